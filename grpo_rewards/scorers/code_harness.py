"""Assertion suites of `code_tests`: the tests of a reference as one suite, the guarded tests
function and the program the sandbox runs, and the line-by-line output comparison.

Assertion tests of one sample run in ONE sandbox execution: the tests become one function (the
body of HumanEval's `check`, the list of asserts, the calls of call-based tests, or the test
functions of a pytest module), each test inside `with _grpo_case(i):`, so the tests are compiled
once, keep their local scope, and each gets a verdict. The scorer rewrites the comparisons of
the tests (see `_Guard`) and ships the harness (code_runtime.py); the harness reports each
verdict on a line that starts with a random per-execution tag; a test without a verdict (the
program exited, crashed or was killed first) never counts as passed. Reading the datasets'
layouts into suites is code_formats.py's job.
"""

from __future__ import annotations

import ast
import base64
import builtins
import functools
import importlib.util
import json
import marshal
import math
import secrets
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
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
    pytest_module: str | None = None  # KodCode style: the test module run beside `solution`

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


def assert_list_suite(tests: list[str], setup: str = "") -> AssertSuite:
    """MBPP style: each string is one test (an assert, or any statement that must not raise)."""
    return AssertSuite(setup, [TestItem("test", t, _label(t)) for t in tests])


def call_suite(fn_name: str, cases: list[tuple[list, Any]]) -> AssertSuite:
    """Call-based tests (APPS/TACO `fn_name`, LiveCodeBench functional): `fn_name(*args)`, or the
    method of a LeetCode-style `class Solution`, must return the expected value."""
    items = []
    for args, expected in cases:
        call = f"{fn_name}({', '.join(_short_repr(a) for a in args)})"
        items.append(TestItem("test", f"_grpo_call({fn_name!r}, {args!r}, {expected!r}, {call!r})", _label(call)))
    return AssertSuite("", items)


def _short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def pytest_suite(test_code: str) -> AssertSuite | str:
    """KodCode style: a test module (`from solution import f`, `def test_*()`, `class Test*`),
    each test function one test. Returns why not when the module has no test functions."""
    try:
        tree = ast.parse(test_code)
    except (SyntaxError, ValueError) as exc:
        return f"the pytest-style tests do not parse: {exc}"
    names = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            names.append(node.name)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            names += [f"{node.name}.{m.name}" for m in node.body
                      if isinstance(m, ast.FunctionDef) and m.name.startswith("test")]
    if not names:
        return "the pytest-style tests define no test functions (def test_...)"
    items = [TestItem("test", f"_grpo_pt({n!r})", n) for n in names]
    return AssertSuite("", items, pytest_module=test_code)


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
    multiline_str = stmt.lineno != stmt.end_lineno and any(
        isinstance(n, (ast.Constant, ast.JoinedStr)) and n.lineno != n.end_lineno for n in _walk(stmt))
    if head.strip() or (tail and not tail.startswith("#")) or multiline_str:
        return ast.unparse(stmt)
    text = textwrap.dedent("\n".join(lines[stmt.lineno - 1 : stmt.end_lineno]))
    return text if not text[:1].isspace() else ast.unparse(stmt)


def _walk(node: ast.AST, skip: tuple[type, ...] = ()) -> list[ast.AST]:
    """Every node under `node` (itself included), in no particular order, not descending into
    nodes of the types in `skip`. By hand: on a cold prompt the scorer's time is mostly AST walks,
    and the generators of ast.walk/iter_child_nodes cost as much as the rest of a walk."""
    out, todo = [], [node]
    while todo:
        n = todo.pop()
        out.append(n)
        for field in n._fields:
            value = getattr(n, field, None)
            if isinstance(value, list):
                todo += [v for v in value if isinstance(v, ast.AST) and not isinstance(v, skip)]
            elif isinstance(value, ast.AST) and not isinstance(value, skip):
                todo.append(value)
    return out


def _walk_same_scope(node: ast.AST) -> list[ast.AST]:
    """_walk that does not descend into nested functions, lambdas or classes."""
    return _walk(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef))


# ---- the tests function and the program the sandbox runs ------------------------------------

_OPS = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.In: "in",
        ast.NotIn: "not in"}
_BUILTIN_NAMES = frozenset(n for n in dir(builtins) if not n.startswith("_"))
_PARAMS = "_grpo_case, _grpo_load, _grpo_cmp, _grpo_truth, _grpo_call, _grpo_b, _grpo_pt"


class _Guard:
    """Rewrites test code so that a program-made value cannot pass for a builtin one:
    each single comparison `a OP b` becomes `_grpo_cmp('OP', a, b)`, each asserted value
    `assert x` becomes `assert _grpo_truth(x)`, and builtin names the tests do not bind
    themselves are read from a copy of the builtins taken before the program ran.

    One pass over `_fields` by hand rather than an ast.NodeTransformer, whose per-node
    dispatch made this most of the scorer's time on a cold prompt; new nodes get the location
    of the node they replace (no fix_missing_locations walk over the whole tree). The same pass
    collects the names the code binds (`bound`) and the builtin names it read (`read`): where
    they meet, the caller runs it again with those names left alone."""

    def __init__(self, builtin_names: frozenset[str]) -> None:
        self.builtin_names = builtin_names
        self.bound: set[str] = set()
        self.read: set[str] = set()

    def visit(self, node: ast.AST) -> ast.AST:
        for field in node._fields:
            value = getattr(node, field, None)
            if isinstance(value, list):
                for i, item in enumerate(value):
                    if isinstance(item, ast.AST):
                        value[i] = self.visit(item)
            elif isinstance(value, ast.AST):
                setattr(node, field, self.visit(value))
        kind = type(node)
        if kind is ast.Compare:
            return self._compare(node)
        if kind is ast.Assert:
            node.test = self._truth(node.test)
        elif kind is ast.Name:
            if type(node.ctx) is not ast.Load:
                self.bound.add(node.id)
            elif node.id in self.builtin_names:
                self.read.add(node.id)
                return _located(ast.Subscript(_located(ast.Name("_grpo_b", ast.Load()), node),
                                              _located(ast.Constant(node.id), node), ast.Load()), node)
        elif kind in _BINDERS:
            self.bound.update(_bound_by(node, kind))
        return node

    @staticmethod
    def _compare(node: ast.Compare) -> ast.AST:
        if len(node.ops) != 1 or type(node.ops[0]) not in _OPS:
            return node
        return _call_node("_grpo_cmp", [_located(ast.Constant(_OPS[type(node.ops[0])]), node), node.left,
                                   node.comparators[0]], node)

    def _truth(self, test: ast.expr) -> ast.expr:
        if isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "_grpo_cmp":
            return test
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return _located(ast.UnaryOp(ast.Not(), self._truth(test.operand)), test)
        if isinstance(test, ast.BoolOp):
            return _located(ast.BoolOp(test.op, [self._truth(v) for v in test.values]), test)
        return _call_node("_grpo_truth", [test], test)


def _located(node: ast.AST, like: ast.AST) -> ast.AST:
    return ast.copy_location(node, like)


def _call_node(name: str, args: list[ast.expr], like: ast.AST) -> ast.Call:
    return _located(ast.Call(_located(ast.Name(name, ast.Load()), like), args, []), like)


_BINDERS = frozenset((ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom, ast.arg))


def _bound_by(node: ast.AST, kind: type) -> tuple[str, ...] | list[str]:
    """The names a def, class, import or argument node binds (kind in `_BINDERS`)."""
    if kind is ast.arg:
        return (node.arg,)
    if kind is ast.Import or kind is ast.ImportFrom:
        return [(a.asname or a.name).split(".")[0] for a in node.names]
    return (node.name,)


def _bound_names(tree: ast.AST, imports: set[str]) -> set[str]:
    """Names the reference's code binds (assignments, imports, defs): those are not builtins there.
    Also collects into `imports` the top-level modules it imports (absolute imports only)."""
    out: set[str] = set()
    for node in _walk(tree):
        kind = type(node)
        if kind is ast.Name and type(node.ctx) is not ast.Load:
            out.add(node.id)
        elif kind in _BINDERS:
            out.update(_bound_by(node, kind))
            if kind is ast.Import:
                imports.update(a.name.split(".")[0] for a in node.names)
            elif kind is ast.ImportFrom and node.module and not node.level:
                imports.add(node.module.split(".")[0])
    return out


@functools.lru_cache(maxsize=1024)  # a group's completions share their reference
def _module_facts(source: str) -> tuple[frozenset[str], frozenset[str]]:
    """(names bound, top-level modules imported) of the reference's setup or test module; both
    empty when it does not parse (the sandbox then reports the syntax error)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return frozenset(), frozenset()
    imports: set[str] = set()
    return frozenset(_bound_names(tree, imports)), frozenset(imports)


def imported_modules(*sources: str) -> tuple[str, ...]:
    """Top-level modules the reference's setup and test module import (the harness keeps them as they were)."""
    names = set().union(*(_module_facts(source)[1] for source in sources if source))
    # sys holds the program's own state (stdout, argv, path); builtins reach the tests as a copy.
    return tuple(sorted(names - {"solution", "sys", "builtins"}))


def _tests_source(suite: AssertSuite) -> str:
    """`_grpo_tests(...)`: load the program (phase -1), then the items in order inside phase -2,
    each test inside `with _grpo_case(i):`, whose exit hands the verdict to the harness thread."""
    lines = [f"def _grpo_tests({_PARAMS}):", "    with _grpo_case(-1):",
             f"        {suite.param or '_grpo_entry'} = _grpo_load()", "    if _grpo_case.failed:", "        return",
             "    with _grpo_case(-2):"]
    test = 0
    for item in suite.items:
        body = item.src.splitlines() or ["pass"]
        if item.kind == "setup":
            lines.append("\n".join("        " + line for line in body))
            continue
        lines.append(f"        with _grpo_case({test}):")
        lines.append("\n".join("            " + line for line in body))
        test += 1
    if test == 0:
        lines.append("        pass")
    return "\n".join(lines) + "\n"


def _guarded(source: str, filename: str, bound_elsewhere: frozenset[str], bound_here: frozenset[str] | None = None
             ) -> ast.Module | str:
    """The guarded AST of `source`, or the syntax error's text (the sandbox then reports it).
    `bound_here`: the names `source` binds, when known; otherwise the guard finds them, and the
    rare code that reads a builtin name it also binds is guarded again with that name left alone."""
    names = _BUILTIN_NAMES - bound_elsewhere - (bound_here or frozenset())
    for _ in range(2):
        try:
            tree = ast.parse(source, filename)
        except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
            return f"{type(exc).__name__}: {exc}"
        guard = _Guard(names)
        tree = guard.visit(tree)
        if bound_here is not None or not guard.read & guard.bound:
            break
        names = names - guard.bound
    return tree


@functools.lru_cache(maxsize=2048)  # the tests of one prompt serve its whole group
def _compiled_parts(tests_src: str, setup: str, pytest_module: str, bytecode: bool) -> dict[str, tuple[str, str | None]]:
    """{part: (source, base64 marshalled bytecode or None)}: the guarded tests function, the
    setup and the pytest-style module. Source is what remote backends run (and what the
    sandbox compiles when the bytecode cannot be made); bytecode is for the local sandbox, and
    then the guarded source is not written out (ast.unparse costs more than the compile)."""
    setup_bound = _module_facts(setup)[0] if setup else frozenset()
    parts = {"tests.py": (tests_src, setup_bound, None), "setup.py": (setup, frozenset(), setup_bound)}
    if pytest_module:
        parts["test_solution.py"] = (pytest_module, frozenset(), _module_facts(pytest_module)[0])
    out = {}
    for name, (source, bound_elsewhere, bound_here) in parts.items():
        tree = _guarded(source, name, bound_elsewhere, bound_here)
        if isinstance(tree, str):
            out[name] = (source, None)  # compiled (and its error reported) in the sandbox
            continue
        compiled = _marshal(tree, name) if bytecode else None
        out[name] = ("" if compiled else ast.unparse(tree), compiled)
    return out


def _marshal(source: str | ast.Module, filename: str, optimize: int = -1) -> str | None:
    try:
        # dont_inherit: this module's `from __future__ import annotations` must not reach the
        # tests, the setup or the runtime (whose own compile() calls would pass it on to the program).
        code = compile(source, filename, "exec", optimize=optimize, dont_inherit=True)
        return base64.b64encode(marshal.dumps(code)).decode("ascii")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


# The harness's two parts: the main thread's and the program thread's (code_runtime*.py).
_RUNTIME = {part: Path(__file__).with_name(name).read_text(encoding="utf-8")
            for part, name in (("harness.py", "code_runtime.py"), ("thread.py", "code_runtime_thread.py"))}

# What the sandbox runs: decode the data, then run the harness (code_runtime.py). For the local
# sandbox (same interpreter, same bytecode magic) the trusted parts come as bytecode compiled by
# the scorer: a child forked for one run compiles several times slower than a warm process, and
# the tests of one prompt are compiled once for all the completions of its group. Other
# backends get source. The candidate's code is always compiled inside the sandbox. Nothing is
# bound at module level: the data reaches `_main` as an argument. With `library`, the program is
# one line that runs the boot and passes the data: the boot, the runtime and the compiled tests
# come as the job's library, which the local sandbox decodes in its warm worker (each part once
# while it stays in use) and hands over as `__library__` (taken out before anything runs).
_BOOT = '''\
import base64 as _b64, json as _json, marshal as _marshal
from importlib.util import MAGIC_NUMBER as _MAGIC


def _part(data, library, name):
    if name in library:
        return library[name]
    if data["magic"] == _MAGIC.hex() and data["compiled"].get(name):
        return _marshal.loads(_b64.b64decode(data["compiled"][name]))
    return compile(data["sources"][name], name, "exec", dont_inherit=True)


def _boot(text):
    library = globals().pop("__library__", {})
    data = _json.loads(text)
    harness = _part(data, library, "harness.py")
    if type(harness) is not dict:  # not made by the worker (a warm part): made here
        exec(harness, globals())
        harness = globals()
    harness["_main"](data, lambda name: _part(data, library, name))
'''
_BOOT_CALL = "_boot(%r)\n"
# The library parts the local sandbox's worker runs once and keeps made (`Job.warm`), in order.
WARM_PARTS = ("thread.py", "harness.py")
_LIBRARY_BOOT = "exec(__library__['boot.py'])\n"


def harness_program(code: str, suite: AssertSuite, per_test_s: float, bytecode: bool = False,
                    library: bool = False) -> tuple[str, str, tuple[tuple[str, str], ...]]:
    """(program, tag, library): the harness with the candidate, setup and tests embedded as JSON.

    `bytecode`: ship the trusted parts compiled (only for a sandbox running this very
    interpreter, as the local one does); otherwise as source, for any Python 3. `library`
    (with `bytecode`): the trusted parts leave the program for the returned library, which the
    job must carry (`Job.library`); otherwise the library is empty."""
    tag = "@@grpo-" + secrets.token_hex(8) + "@@"
    parts = _compiled_parts(_tests_source(suite), suite.setup, suite.pytest_module or "", bytecode)
    sources = {**_RUNTIME, **{name: src for name, (src, _) in parts.items()}}
    compiled = {}
    if bytecode:
        compiled = {**_runtime_bytecode(), **{name: b for name, (_, b) in parts.items() if b}}
        sources = {name: src for name, src in sources.items() if name not in compiled}
    shipped: tuple[tuple[str, str], ...] = ()
    if bytecode and library:
        shipped, compiled = tuple(sorted({**compiled, "boot.py": _runtime_bytecode("boot")["boot.py"]}.items())), {}
    data = {"tag": tag, "code": code, "limit": per_test_s, "entry_point": suite.entry_point if suite.param else None,
            "module": "solution" if suite.pytest_module else "__main__", "ntests": len(suite.tests),
            "has_setup": bool(suite.setup.strip()), "pytest": bool(suite.pytest_module),
            "modules": imported_modules(suite.setup, suite.pytest_module or ""),
            "magic": importlib.util.MAGIC_NUMBER.hex(), "compiled": compiled, "sources": sources}
    call = _BOOT_CALL % json.dumps(data)
    if shipped:
        return _LIBRARY_BOOT + call, tag, shipped
    return _BOOT + call, tag, ()


@functools.lru_cache(maxsize=2)
def _runtime_bytecode(which: str = "runtime") -> dict[str, str | None]:
    """The runtime's parts (or, `which="boot"`, the boot) compiled. Without docstrings
    (optimize=2; the harness has no asserts): a program without a library carries them."""
    parts = _RUNTIME if which == "runtime" else {"boot.py": _BOOT}
    return {part: _marshal(source, part, optimize=2) for part, source in parts.items()}


def clear_caches() -> None:
    """Forget every reference prepared so far (benchmarks measure the cold path with it)."""
    for cached in (split_check, _module_facts, _compiled_parts):
        cached.cache_clear()


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
