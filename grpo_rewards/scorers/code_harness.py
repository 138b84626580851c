"""Assertion suites of `code_tests`: the tests of a reference as one suite, the job that runs
them, and the line-by-line output comparison of stdin/stdout tests.

Assertion tests of one sample run in ONE sandbox execution of two processes that share nothing
but a socket: the tests' process (code_runtime.py) runs the reference's setup and tests, the
program's process (code_program_side.py) runs the program; only plain data crosses
(code_wire.py). The tests become one function (the body of HumanEval's `check`, the list of
asserts, the calls of call-based tests, or the test functions of a pytest module), each test
inside `with _grpo_case(i):`, so the tests keep their local scope and each gets a verdict. The
program never holds the tests' stdout, where the verdicts go; a test without a verdict (the run
ended first) never counts as passed. Reading the datasets' layouts into suites is
code_formats.py's job.
"""

from __future__ import annotations

import ast
import builtins
import functools
import json
import math
import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_rewards.extract import fenced_blocks
from grpo_rewards.sandbox.base import Job, Limits
from grpo_rewards.scorers.code_wire import REPORT_PREFIX, encode, frame


@dataclass(frozen=True, eq=False)  # compared by identity: a cache key for what is read from it
class StatementFacts:
    """What a suite needs of a test's text, read from its syntax tree in one walk: whether it
    parses as one statement, the names it reads and binds, whether it imports the program's
    module (`from solution import f`) and whether it calls a builtin that may run anyone's code
    (`eval`, `getattr`, `map`: not in `_PURE_BUILTINS`)."""

    parses: bool
    single: bool
    loads: frozenset[str]
    stores: frozenset[str] = frozenset()
    program_import: bool = False
    dynamic: bool = False


@dataclass
class TestItem:
    kind: str  # "setup" (runs, no verdict) | "test"
    src: str
    label: str = ""
    # Read from the tree its suite was split from (split_check), so the text is not parsed again.
    facts: StatementFacts | None = field(default=None, compare=False, repr=False)


@dataclass
class AssertSuite:
    """HumanEval / MBPP style: module-level setup code, then test statements run in order
    inside one function that receives the candidate (when `param` is set)."""

    setup: str
    items: list[TestItem]
    param: str | None = None  # the function's parameter, bound to the entry point
    entry_point: str | None = None
    pytest_module: str | None = None  # KodCode style: the test module run beside `solution`
    program_names: tuple[str, ...] = ()  # names the tests take from the program besides those they read

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
    """MBPP style: each string is one test (an assert, or any statement that must not raise), but
    one that cannot reach the program (`assert True`) runs as setup: it would pass whatever the
    program does."""
    facts = [_statement_facts(t) for t in tests]
    kinds = _test_kinds([(f, True) for f in facts], set(), _reference_bound(setup))
    return AssertSuite(setup, [TestItem(kind, t, _label(t), f if f.parses else None)
                               for t, f, kind in zip(tests, facts, kinds)])


def _test_kinds(statements: list[tuple[StatementFacts, bool]], tainted: set[str], reference: frozenset[str]
                ) -> list[str]:
    """"test" or "setup" for each (facts, whether it checks) of a suite's statements, in order.
    A test is a statement that reaches the program and checks (asserts, raises): what the
    program does decides it. A statement that reaches the program after the last such one is a
    test too, or a failure there (`helper(candidate)`, `self.assertEqual`) would count nowhere.
    Reaching: reading a name the program provides (`tainted`, and every name neither the
    reference, the statements before nor the builtins bind) or one bound from such a value,
    importing its module, or calling a builtin that may run anyone's code (`eval`, `getattr`)."""
    tainted, bound, reaches = set(tainted), set(), []
    for facts, _ in statements:
        outside = facts.loads - bound - reference - _BUILTIN_NAMES
        reaching = not facts.parses or bool(facts.loads & tainted or outside or facts.program_import or facts.dynamic)
        if reaching:
            tainted |= facts.stores
        bound |= facts.stores
        reaches.append(reaching)
    kinds = ["test" if reaching and checks else "setup" for reaching, (_, checks) in zip(reaches, statements)]
    last = max((i for i, kind in enumerate(kinds) if kind == "test"), default=-1)
    return [("test" if reaching and i > last else kind) for i, (kind, reaching) in enumerate(zip(kinds, reaches))]


def call_suite(fn_name: str, cases: list[tuple[list, Any]]) -> AssertSuite:
    """Call-based tests (APPS/TACO `fn_name`, LiveCodeBench functional): `fn_name(*args)`, or the
    method of a LeetCode-style `class Solution`, must return the expected value."""
    items = []
    for args, expected in cases:
        call = f"{fn_name}({', '.join(_short_repr(a) for a in args)})"
        source = f"_grpo_call({fn_name!r}, {_as_literal_source(args)}, {_as_literal_source(expected)}, {call!r})"
        items.append(TestItem("test", source, _label(call)))
    return AssertSuite("", items, program_names=(fn_name, "Solution"))


def _as_literal_source(value: Any) -> str:
    """A dataset's value (decoded JSON) as source made of literals only. Not repr: it writes an
    infinite float as the name `inf`, which the tests' side would take from the program."""
    if type(value) is float and not math.isfinite(value):
        return "(1e999 - 1e999)" if math.isnan(value) else "1e999" if value > 0 else "-1e999"
    if type(value) in (list, tuple):
        inner = ", ".join(map(_as_literal_source, value))
        return f"[{inner}]" if type(value) is list else f"({inner}{',' if len(value) == 1 else ''})"
    if type(value) is dict:
        return "{" + ", ".join(f"{_as_literal_source(k)}: {_as_literal_source(v)}" for k, v in value.items()) + "}"
    return repr(value)


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
        elif isinstance(node, ast.ClassDef) and (node.name.startswith("Test") or any(
                ast.unparse(b).endswith("TestCase") for b in node.bases)):  # pytest collects unittest's under any name
            names += [f"{node.name}.{m.name}" for m in node.body
                      if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) and m.name.startswith("test")]
    if not names:
        return "the pytest-style tests define no test functions (def test_...)"
    items = [TestItem("test", f"_grpo_pt({n!r})", n) for n in names]
    return AssertSuite("", items, pytest_module=_star_imports_bound(test_code, tree))


def _star_imports_bound(test_code: str, tree: ast.Module) -> str:
    """`test_code` with each `from solution import *` made `_grpo_star(...)`: it binds only the
    names the module reads and binds nowhere itself, so the program's `pytest` or `isclose`
    never replaces the module's own (the reference's names win, as for helpers). Lines keep
    their numbers."""
    stars = [n for n in tree.body if type(n) is ast.ImportFrom and _imports_the_program(n)
             and any(a.name == "*" for a in n.names)]
    if not stars:
        return test_code
    nodes = _walk(tree)
    bound = _reference_bound(ast.unparse(ast.Module([n for n in tree.body if n not in stars], [])))
    read = sorted({n.id for n in nodes if type(n) is ast.Name and type(n.ctx) is ast.Load} - bound - _BUILTIN_NAMES)
    lines = _source_lines(test_code)
    for node in stars:
        lines[node.lineno - 1] = f"_grpo_star(globals(), {tuple(read)!r})"
        for i in range(node.lineno, node.end_lineno):
            lines[i] = ""
    return "\n".join(lines) + "\n"


@functools.lru_cache(maxsize=1024)  # a GRPO group scores one reference many times
def split_check(test_code: str, entry_point: str) -> AssertSuite:
    """HumanEval's `check(candidate)` as one test per top-level statement that checks the
    program (`_test_kinds`), so the reward can be a pass fraction; when the body cannot be split
    safely (returns, globals, nothing that checks the program), the whole `check(entry_point)`
    call is the single test."""
    whole = AssertSuite(test_code, [TestItem("test", f"check({entry_point})", f"check({entry_point})")])
    try:
        tree = ast.parse(test_code)
    except (SyntaxError, ValueError):
        return whole  # the harness reports the syntax error as the test's error
    checks = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    if len(checks) != 1 or len(checks[0].args.args) != 1 or checks[0].args.vararg or checks[0].decorator_list:
        return whole
    lines = _source_lines(test_code)
    check = checks[0]
    statements, texts = [], []
    for stmt in check.body:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue  # a docstring
        nodes = _walk(stmt)  # one walk serves the kinds, the text and the facts
        kinds = _same_scope_kinds(stmt, nodes)
        if kinds & {ast.Return, ast.Global, ast.Nonlocal, ast.Yield, ast.YieldFrom, ast.Await}:
            return whole
        texts.append(_source_of(stmt, lines, nodes))
        statements.append((_facts(nodes, True), bool(kinds & {ast.Assert, ast.Raise})))
    # The module without `check` is the setup (imports, constants), and without the dataset's own
    # call of `check`, which would run before check exists: the body becomes our function.
    dropped = [(n.lineno, n.end_lineno) for n in tree.body if n is check or _calls_check(n)]
    setup = "\n".join("" if any(a <= i + 1 <= b for a, b in dropped) else line for i, line in enumerate(lines))
    param = check.args.args[0].arg
    kinds = _test_kinds(statements, {param}, _reference_bound(setup))
    items = [TestItem(kind, src, _label(src), facts) for (facts, _), src, kind in zip(statements, texts, kinds)]
    if not any(i.kind == "test" for i in items):
        return whole
    return AssertSuite(setup, items, param=param, entry_point=entry_point)


def _calls_check(node: ast.stmt) -> bool:
    """A top-level `check(...)` statement: the dataset's own run of the tests."""
    return (type(node) is ast.Expr and type(node.value) is ast.Call and type(node.value.func) is ast.Name
            and node.value.func.id == "check")


def _source_lines(text: str) -> list[str]:
    r"""`text`'s lines as the parser numbers them: str.splitlines also splits at form feeds, \x1c-\x1e,
    \x85 and \u2028/9, and the AST's line numbers would then point at other text."""
    lines = re.split("\r\n|\r|\n", text)
    if lines[-1] == "":
        lines.pop()  # as splitlines: no line after the last newline
    return lines


def _source_of(stmt: ast.stmt, lines: list[str], nodes: list[ast.AST]) -> str:
    """The statement's own text (`nodes`: its `_walk`), dedented. ast.unparse (several times
    slower) when the text cannot be re-indented safely: the statement shares a line, holds a
    string spanning lines (whose content re-indenting would change), or has decorators (which
    start on lines before its own)."""
    if getattr(stmt, "decorator_list", None):
        return ast.unparse(stmt)
    first, last = lines[stmt.lineno - 1].encode(), lines[stmt.end_lineno - 1].encode()  # offsets count UTF-8 bytes
    head = first[: stmt.col_offset].decode(errors="replace")
    tail = last[stmt.end_col_offset:].decode(errors="replace").strip()
    multiline_str = stmt.lineno != stmt.end_lineno and any(
        isinstance(n, (ast.Constant, ast.JoinedStr)) and n.lineno != n.end_lineno for n in nodes)
    if head.strip() or (tail and not tail.startswith("#")) or multiline_str:
        return ast.unparse(stmt)
    text = textwrap.dedent("\n".join(lines[stmt.lineno - 1 : stmt.end_lineno]))
    return text if not text[:1].isspace() else ast.unparse(stmt)


def _walk(node: ast.AST) -> list[ast.AST]:
    """Every node under `node` (itself included), in a fixed order (depth first, last child
    first). By hand: on a cold prompt the scorer's time is mostly AST walks, and the generators
    of ast.walk/iter_child_nodes cost as much as the rest of a walk."""
    out, todo = [], [node]
    while todo:
        n = todo.pop()
        out.append(n)
        for field in n._fields:
            value = getattr(n, field, None)
            if isinstance(value, list):
                todo += [v for v in value if isinstance(v, ast.AST)]
            elif isinstance(value, ast.AST):
                todo.append(value)
    return out


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _same_scope_kinds(node: ast.AST, nodes: list[ast.AST]) -> set[type]:
    """The types of the nodes in `nodes` (`_walk(node)`) that are not a nested function, lambda
    or class, nor inside one."""
    nested = {id(inner) for n in nodes if n is not node and isinstance(n, _SCOPES) for inner in _walk(n)}
    return {type(n) for n in nodes if id(n) not in nested}


# ---- the job: the tests' process, the program's process, and the data of one run ----------

_SOURCES = {name: Path(__file__).with_name(name).read_text(encoding="utf-8")
            for name in ("code_wire.py", "code_runtime.py", "code_program_side.py")}
# The two programs of every assertion job (see code_runtime.py and code_program_side.py): the
# same text for every run, so a sandbox can prepare them once.
TESTS_SIDE = _SOURCES["code_wire.py"] + _SOURCES["code_runtime.py"] + "\n_main()\n"
PROGRAM_SIDE = _SOURCES["code_wire.py"] + _SOURCES["code_program_side.py"] + "\n_serve_requests(3)\n"
_BUILTIN_NAMES = frozenset(dir(builtins))
# Builtins that, on plain data, run no code but the interpreter's: calling them does not reach the
# program. An allow-list: any other (eval, exec, getattr, setattr, map, filter, iter, next,
# __import__, globals, vars, open, ...) may.
_PURE_BUILTINS = frozenset(f.__name__ for f in (
    abs, all, any, ascii, bin, bool, bytes, chr, complex, dict, divmod, enumerate, float, format, frozenset, hash, hex,
    int, isinstance, len, list, max, min, oct, ord, pow, print, range, repr, reversed, round, set, sorted, str, sum,
    tuple, type, zip))


def _tests_source(suite: AssertSuite) -> str:
    """`_grpo_tests(param)`: the items in order, each test inside `with _grpo_case(i):`, which
    gives it its time limit and its verdict."""
    lines = [f"def _grpo_tests({suite.param or '_grpo_entry'}):"]
    test = 0
    for item in suite.items:
        body = _source_lines(item.src) or ["pass"]
        if item.kind == "setup":
            lines.append("\n".join("    " + line for line in body))
            continue
        lines.append(f"    with _grpo_case({test}):")
        lines.append("\n".join("        " + line for line in body))
        test += 1
    if len(lines) == 1:
        lines.append("    pass")
    return "\n".join(lines) + "\n"


def _facts(nodes: list[ast.AST], single: bool) -> StatementFacts:
    """`nodes`: a statement's `_walk`."""
    loads, stores, program_import, dynamic = set(), set(), False, False
    for node in nodes:
        kind = type(node)
        if kind is ast.Name:
            (loads if type(node.ctx) is ast.Load else stores).add(node.id)
        elif kind is ast.Call:
            dynamic = dynamic or (type(node.func) is ast.Name and node.func.id in _BUILTIN_NAMES
                                  and node.func.id not in _PURE_BUILTINS)
        elif kind in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef):
            stores.add(node.name)
        elif kind in (ast.Import, ast.ImportFrom):
            stores.update(_imported_names(node))
            program_import = program_import or _imports_the_program(node)
    return StatementFacts(True, single, frozenset(loads), frozenset(stores), program_import, dynamic)


@functools.lru_cache(maxsize=4096)  # a group's completions share their reference
def _statement_facts(src: str) -> StatementFacts:
    try:
        tree = ast.parse(src)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return StatementFacts(False, False, frozenset())
    return _facts(_walk(tree), len(tree.body) == 1)


def _item_facts(item: TestItem) -> StatementFacts:
    return item.facts or _statement_facts(item.src)


def _names_wanted(suite: AssertSuite, tests: str) -> tuple[str, ...]:
    """The global names the tests (`tests`, `_tests_source(suite)`) and the setup read that are
    not builtins: the program may define them. From the items' facts when every item is one
    statement: `tests` holds nothing else but `_grpo_case`."""
    facts = [_item_facts(i) for i in suite.items]
    if not all(f.parses and f.single for f in facts):
        return _names_read((tests, suite.setup))
    loads = frozenset().union(*(f.loads for f in facts))
    return _names_read((suite.setup,), loads | ({"_grpo_case"} if suite.tests else set()))


@functools.lru_cache(maxsize=1024)  # a group's completions share their reference
def _names_read(sources: tuple[str, ...], loads: frozenset[str] = frozenset()) -> tuple[str, ...]:
    names = set(loads)
    for source in sources:
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue  # the tests' process reports it
        names.update(n.id for n in _walk(tree) if type(n) is ast.Name and type(n.ctx) is ast.Load)
    return tuple(sorted(names - _BUILTIN_NAMES))


@functools.lru_cache(maxsize=1024)
def reference_helpers(prompt: str, entry_point: str) -> str:
    """The prompt's own definitions (HumanEval's helpers, imports) without the entry point's
    stub: the tests call these, never the program's versions. Empty when the prompt is no code."""
    try:
        tree = ast.parse(_prompt_code(prompt))  # a chat prompt's code block, as `function_body_joined` reads it
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ""
    kept = [n for n in tree.body if not (isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                                         and n.name == entry_point)]
    if len(kept) == len(tree.body) or not kept:
        return ""  # no stub of the entry point: not a code prompt of this task
    return ast.unparse(ast.Module(kept, []))


@functools.lru_cache(maxsize=1024)
def _reference_bound(source: str) -> frozenset[str]:
    """Names the reference's setup and helpers bind, imports included."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return frozenset()
    out: set[str] = set()
    for node in _walk(tree):
        if type(node) is ast.Name and type(node.ctx) is not ast.Load:
            out.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update(_imported_names(node))
    return frozenset(out)


def _imported_names(node: ast.Import | ast.ImportFrom) -> list[str]:
    """The names an import binds, but not those of the program's own module (`solution`, which the
    tests' side maps to the program): those are the program's, not the reference's or the tests'."""
    if type(node) is ast.ImportFrom:
        return [] if _imports_the_program(node) else [a.asname or a.name for a in node.names]
    return [(a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] not in _PROGRAM_MODULES]


def _imports_the_program(node: ast.Import | ast.ImportFrom) -> bool:
    if type(node) is ast.ImportFrom:
        return node.level > 0 or (node.module or "").split(".")[0] in _PROGRAM_MODULES
    return any(a.name.split(".")[0] in _PROGRAM_MODULES for a in node.names)


_PROGRAM_MODULES = ("solution", "__main__")


def _defines(source: str, name: str) -> bool | None:
    """Whether `source` defines function `name` at top level; None when it does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name for n in tree.body)


def _prompt_code(prompt: str) -> str:
    blocks = fenced_blocks(prompt, "python", aliases=("py", "python3")) or fenced_blocks(prompt)
    return blocks[-1] if blocks else prompt


def function_body_joined(prompt: str, code: str, entry_point: str) -> str:
    """`program: auto`: `code` when it defines `entry_point`, after the imports of the prompt's
    code (a whole function written again often leaves out the prompt's `from typing import List`,
    which HumanEval's own harness, running prompt + completion, supplies); the prompt's code
    followed by `code` when `code` is only the function's body (the prompt's code defines the
    function and the two parse joined, HumanEval style); otherwise `code` as is."""
    head = _prompt_code(prompt)
    if _defines(code, entry_point):
        imports = _top_level_imports(head) if _defines(head, entry_point) else ""
        return imports + code if imports and _defines(imports + code, entry_point) else code
    if not head.strip() or not _defines(head, entry_point):
        return code
    joined = head + ("" if head.endswith("\n") else "\n") + code
    return joined if _defines(joined, entry_point) else code


def _top_level_imports(source: str) -> str:
    """The import statements at the top level of `source`, one per line; "" when it does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ""
    return "".join(ast.unparse(n) + "\n" for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)))


def assert_job(code: str, suite: AssertSuite, per_test_s: float, limits: Limits, helpers: str = "") -> Job:
    """One run of the tests: the tests' process gets the reference's code and limits on stdin; the
    program's process gets the program's text and the names the tests read as its first request
    (number 1), so the program's text never enters the tests' process. Each call of the program
    is asked when the tests make it, never ahead: a call made ahead would show the program the
    arguments of tests to come, and run before the reference's setup."""
    tests = _tests_source(suite)
    wanted = _names_wanted(suite, tests)
    wanted = (*wanted, *suite.program_names, *([suite.entry_point] if suite.entry_point else []))
    load = encode([1, "load", per_test_s, code, "solution" if suite.pytest_module else "__main__", wanted])
    data = json.dumps({"entry": suite.entry_point if suite.param else None, "limit": per_test_s, "prompt": helpers,
                       "setup": suite.setup, "pytest": suite.pytest_module or "", "tests": tests})
    return Job(TESTS_SIDE, data, limits, peer=PROGRAM_SIDE, peer_input=frame(load))


def clear_caches() -> None:
    """Forget every reference prepared so far (benchmarks measure the cold path with it)."""
    for cached in (split_check, _statement_facts, _names_read, reference_helpers, _reference_bound):
        cached.cache_clear()


def harness_reports(stdout: str) -> list[dict]:
    out = []
    for line in stdout.splitlines():
        if line.startswith(REPORT_PREFIX):
            try:
                out.append(json.loads(line[len(REPORT_PREFIX):]))
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
