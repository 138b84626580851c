"""Test formats of `code_tests`: reading them from a reference, the assertion harness program,
and the line-by-line output comparison.

Assertion tests of one sample run in ONE sandbox execution: the tests become one function (the
body of HumanEval's `check`, or the list of asserts) in which each test statement is wrapped in
try/except with its own alarm, so the tests are compiled once, keep their local scope, and each
gets a verdict. The harness program reports each verdict on a line that starts with a random
per-execution tag; a test without a verdict (the program exited, crashed or was killed first)
never counts as passed.
"""

from __future__ import annotations

import ast
import base64
import functools
import importlib.util
import json
import marshal
import math
import secrets
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass
class TestItem:
    kind: str  # "setup" (runs, no verdict) | "test"
    src: str
    label: str = ""


@dataclass
class AssertSuite:
    """HumanEval / MBPP style: module-level setup code, then test statements run in order
    inside one function that receives the candidate (when `param` is set)."""

    setup: str
    items: list[TestItem]
    param: str | None = None  # the function's parameter, bound to the entry point
    entry_point: str | None = None

    @property
    def tests(self) -> list[TestItem]:
        return [i for i in self.items if i.kind == "test"]


@dataclass
class StdioCase:
    stdin: str
    expected: str


@dataclass
class Parsed:
    assert_suite: AssertSuite | None = None
    stdio: list[StdioCase] = field(default_factory=list)
    problem: str = ""  # why the reference has no usable tests


def _label(src: str) -> str:
    first = src.strip().splitlines()[0] if src.strip() else ""
    return first[:160]


def parse_reference(ref: Mapping[str, Any]) -> Parsed:
    """The tests a reference holds, in any of the accepted layouts (see docs/scorers.md)."""
    test = ref.get("test")
    if isinstance(test, str) and test.strip():
        entry = ref.get("entry_point")
        if not isinstance(entry, str) or not entry.isidentifier():
            return Parsed(problem="reference 'test' needs a valid 'entry_point'")
        return Parsed(assert_suite=split_check(test, entry))
    for key in ("tests", "test_list", "test_cases"):
        tests = ref.get(key)
        if isinstance(tests, list) and tests and all(isinstance(t, str) for t in tests):
            setup = ref.get("test_setup_code") or ""
            imports = ref.get("test_imports") or []
            setup = "\n".join([*(i for i in imports if isinstance(i, str)), setup if isinstance(setup, str) else ""])
            return Parsed(assert_suite=AssertSuite(setup, [TestItem("test", t, _label(t)) for t in tests]))
        if isinstance(tests, list) and tests and all(isinstance(t, Mapping) for t in tests):
            return _stdio([(t.get("input", t.get("stdin")), t.get("output", t.get("stdout", t.get("expected_output"))))
                           for t in tests])
    info = ref.get("verification_info")
    if isinstance(info, str):
        info = _json_or_none(info)
    if isinstance(info, Mapping) and isinstance(info.get("test_cases"), list):
        return parse_reference({"tests": info["test_cases"]})
    io_spec = ref.get("input_output")
    if isinstance(io_spec, str):
        io_spec = _json_or_none(io_spec)
    if isinstance(io_spec, Mapping):
        if io_spec.get("fn_name"):
            return Parsed(problem="call-based tests (input_output.fn_name) are not supported; use assert tests")
        ref = {"inputs": io_spec.get("inputs"), "outputs": io_spec.get("outputs")}
    inputs, outputs = ref.get("inputs"), ref.get("outputs")
    if isinstance(inputs, list) and isinstance(outputs, list) and inputs:
        if len(inputs) != len(outputs):
            return Parsed(problem=f"reference has {len(inputs)} inputs but {len(outputs)} outputs")
        return _stdio(list(zip(inputs, outputs)))
    return Parsed(problem="reference has no tests ('test' + 'entry_point', 'tests', 'inputs'/'outputs', ...)")


def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _stdio(pairs: list[tuple[Any, Any]]) -> Parsed:
    cases = []
    for stdin, expected in pairs:
        if isinstance(stdin, list):
            stdin = "\n".join(map(str, stdin))
        if isinstance(expected, list):
            expected = "\n".join(map(str, expected))
        if not isinstance(stdin, str) or not isinstance(expected, str):
            return Parsed(problem="a stdin/stdout test needs string 'input' and 'output'")
        cases.append(StdioCase(stdin, expected))
    return Parsed(stdio=cases)


@functools.lru_cache(maxsize=1024)  # a GRPO group scores one reference many times
def split_check(test_code: str, entry_point: str) -> AssertSuite:
    """HumanEval's `check(candidate)` as one test per top-level statement that asserts, so the
    reward can be a pass fraction; when the body cannot be split safely (returns, globals, no
    asserts at the top), the whole `check(entry_point)` call is the single test."""
    whole = AssertSuite(test_code, [TestItem("test", f"check({entry_point})", f"check({entry_point})")])
    try:
        tree = ast.parse(test_code)
    except (SyntaxError, ValueError):
        return whole  # the harness reports the syntax error as the test's error
    checks = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    if len(checks) != 1 or len(checks[0].args.args) != 1 or checks[0].args.vararg or checks[0].decorator_list:
        return whole
    lines = test_code.splitlines()
    items = []
    for stmt in checks[0].body:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue  # a docstring
        kinds = {type(n) for n in _walk_same_scope(stmt)}
        if kinds & {ast.Return, ast.Global, ast.Nonlocal, ast.Yield, ast.YieldFrom, ast.Await}:
            return whole
        src = _source_of(stmt, lines)
        items.append(TestItem("test" if ast.Assert in kinds else "setup", src, _label(src)))
    if not any(i.kind == "test" for i in items):
        return whole
    # The module without `check` is the setup (imports, constants); the body becomes our function.
    check = checks[0]
    setup = "\n".join(lines[: check.lineno - 1] + [""] * (check.end_lineno - check.lineno + 1)
                      + lines[check.end_lineno:])
    return AssertSuite(setup, items, param=check.args.args[0].arg, entry_point=entry_point)


def _source_of(stmt: ast.stmt, lines: list[str]) -> str:
    """The statement's own text, dedented. ast.unparse (several times slower) when the text cannot
    be re-indented safely: the statement shares a line, or holds a string spanning lines (whose
    content re-indenting would change)."""
    head = lines[stmt.lineno - 1][: stmt.col_offset]
    tail = lines[stmt.end_lineno - 1][stmt.end_col_offset:].strip()
    multiline_str = any(isinstance(n, (ast.Constant, ast.JoinedStr)) and n.lineno != n.end_lineno
                        for n in ast.walk(stmt))
    if head.strip() or (tail and not tail.startswith("#")) or multiline_str:
        return ast.unparse(stmt)
    text = textwrap.dedent("\n".join(lines[stmt.lineno - 1 : stmt.end_lineno]))
    return text if not text[:1].isspace() else ast.unparse(stmt)


def tests_function(suite: AssertSuite) -> str:
    """Source of `__grpo_tests(param)`: the items in order, each test inside `with __grpo_case(i):`,
    which times it, reports its verdict and swallows its exception so the next test still runs
    (a `with` compiles about twice as fast as the equivalent try/except/else)."""
    lines = [f"def __grpo_tests({suite.param or ''}):"]
    test = 0
    for item in suite.items:
        if item.kind == "setup":
            lines.append("\n".join("    " + line for line in item.src.splitlines()))
            continue
        lines.append(f"    with __grpo_case({test}):")
        lines.append("\n".join("        " + line for line in item.src.splitlines()) or "        pass")
        test += 1
    return "\n".join(lines) + "\n"


def _walk_same_scope(node: ast.AST):
    """ast.walk that does not descend into nested functions, lambdas or classes."""
    todo = [node]
    while todo:
        n = todo.pop()
        yield n
        for child in ast.iter_child_nodes(n):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                todo.append(child)


# The fixed part of the harness: compiled once by the scorer, shipped as bytecode (below).
_HARNESS = '''\
import json as _json, os as _os, signal as _signal, traceback as _tb
_OUT = _os.dup(1)


def _report(**rec):
    _os.write(_OUT, (_D["tag"] + _json.dumps(rec) + "\\n").encode())


class _Timeout(BaseException):
    pass


def _alarm(*_):
    raise _Timeout()


def _classify(e):
    if e is None:
        return "passed", ""
    try:
        if isinstance(e, _Timeout):
            return "timeout", "over %g s" % _D["limit"]
        if isinstance(e, MemoryError):
            return "memory", "MemoryError"
        if isinstance(e, AssertionError):
            return "failed", str(e)[:300]
        if isinstance(e, SystemExit):
            return "error", "the program called exit(%r)" % (e.code,)
        return "error", _tb.format_exception_only(type(e), e)[-1].strip()[:300]
    except BaseException:
        return "error", type(e).__name__


def _begin(i):
    _signal.signal(_signal.SIGALRM, _alarm)
    _signal.setitimer(_signal.ITIMER_REAL, _D["limit"])


def _end(i, e):
    _signal.setitimer(_signal.ITIMER_REAL, 0)
    status, detail = _classify(e)
    _report(test=i, status=status, detail=detail)


class _Case:
    def __init__(self, i):
        self.i = i

    def __enter__(self):
        _begin(self.i)

    def __exit__(self, kind, e, tb):
        _end(self.i, e)
        return True


def _run(src, name, ns):
    _begin(-1)
    try:
        exec(compile(src, name, "exec") if isinstance(src, str) else src, ns)
    except BaseException as e:
        _signal.setitimer(_signal.ITIMER_REAL, 0)
        return _classify(e)
    _signal.setitimer(_signal.ITIMER_REAL, 0)
    return "passed", ""


def _main():
    ns = {"__name__": "solution", "__builtins__": __builtins__}
    for src, name in ((_D["code"], "solution.py"), (_load("setup.py"), "setup.py")):
        status, detail = _run(src, name, ns)
        if status != "passed":
            _report(phase=name, status=status, detail=detail)
            return
    args = ()
    if _D["entry_point"]:
        if not callable(ns.get(_D["entry_point"])):
            _report(phase="solution.py", status="error", detail="entry point %r is not defined" % _D["entry_point"])
            return
        args = (ns[_D["entry_point"]],)
    ns["__grpo_case"] = _Case
    status, detail = _run(_load("tests.py"), "tests.py", ns)
    if status == "passed":
        try:
            ns["__grpo_tests"](*args)
        except BaseException as e:
            _signal.setitimer(_signal.ITIMER_REAL, 0)
            status, detail = _classify(e)
            _report(phase="setup", status=status, detail=detail)
            return
    else:
        _report(phase="tests.py", status=status, detail=detail)
        return
    _report(done=True)


_main()
'''


# What the sandbox runs: decode the data, then run the harness. For the local sandbox (same
# interpreter, same bytecode magic) the trusted parts (harness, the reference's setup and
# tests) come as bytecode compiled by the scorer: a child forked for one run compiles several
# times slower than a warm process (page faults), and the tests of one prompt are compiled
# once for all the completions of its group. Other backends get source. The candidate's code
# is always compiled inside the sandbox.
_BOOT = '''\
import base64 as _b64, json as _json, marshal as _marshal
from importlib.util import MAGIC_NUMBER as _MAGIC
_D = _json.loads(%r)


def _load(name):
    if _D["magic"] == _MAGIC.hex() and name in _D["compiled"]:
        return _marshal.loads(_b64.b64decode(_D["compiled"][name]))
    return _D["sources"][name]


_h = _load("harness.py")
exec(compile(_h, "harness.py", "exec") if isinstance(_h, str) else _h)
'''


@functools.lru_cache(maxsize=2048)
def _bytecode(source: str, filename: str) -> str | None:
    try:
        return base64.b64encode(marshal.dumps(compile(source, filename, "exec"))).decode("ascii")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None  # the sandbox compiles it and reports the error as the tests' error


def harness_program(code: str, suite: AssertSuite, per_test_s: float, bytecode: bool = False) -> tuple[str, str]:
    """(program, tag): the harness with the candidate, setup and tests embedded as JSON.

    `bytecode`: ship the trusted parts compiled (only for a sandbox running this very
    interpreter, as the local one does); otherwise as source, for any Python 3."""
    tag = "@@grpo-" + secrets.token_hex(8) + "@@"
    sources = {"harness.py": _HARNESS, "setup.py": suite.setup, "tests.py": tests_function(suite)}
    compiled = {}
    if bytecode:
        compiled = {name: b for name, src in sources.items() if (b := _bytecode(src, name)) is not None}
        sources = {name: src for name, src in sources.items() if name not in compiled}
    data = {"tag": tag, "code": code, "limit": per_test_s, "entry_point": suite.entry_point if suite.param else None,
            "magic": importlib.util.MAGIC_NUMBER.hex(), "compiled": compiled, "sources": sources}
    return _BOOT % json.dumps(data), tag


def harness_reports(stdout: str, tag: str) -> list[dict]:
    out = []
    for line in stdout.splitlines():
        if line.startswith(tag):
            try:
                out.append(json.loads(line[len(tag):]))
            except ValueError:
                continue
    return out


# ---- stdin/stdout comparison -----------------------------------------------------------------


def _lines(text: str, whitespace: str) -> list[str]:
    lines = text.replace("\r\n", "\n").split("\n")
    if whitespace != "exact":
        lines = [line.rstrip() for line in lines]
    while lines and (lines[-1] == "" if whitespace == "exact" else not lines[-1].strip()):
        lines.pop()  # exact: only the final newline is optional; otherwise trailing blank lines
    return lines


def _tokens_equal(expected: str, actual: str, tolerance: float) -> bool:
    a, b = expected.split(), actual.split()
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x == y:
            continue
        try:
            fx, fy = float(x), float(y)
        except ValueError:
            return False
        if not (tolerance > 0 and math.isclose(fx, fy, rel_tol=tolerance, abs_tol=tolerance)):
            return False
    return True


def compare_output(expected: str, actual: str, whitespace: str = "trailing", float_tolerance: float = 0.0
                   ) -> tuple[bool, str]:
    """Every line, in order: a missing or an extra line fails. Returns (equal, first difference)."""
    exp, act = _lines(expected, whitespace), _lines(actual, whitespace)
    for i in range(max(len(exp), len(act))):
        if i >= len(act):
            return False, f"line {i + 1}: expected {exp[i][:120]!r}, output ended"
        if i >= len(exp):
            return False, f"line {i + 1}: extra output {act[i][:120]!r}"
        if exp[i] == act[i]:
            continue
        if (whitespace == "tokens" or float_tolerance > 0) and _tokens_equal(exp[i], act[i], float_tolerance):
            continue
        return False, f"line {i + 1}: expected {exp[i][:120]!r}, got {act[i][:120]!r}"
    return True, ""
