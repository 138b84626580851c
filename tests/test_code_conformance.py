"""Conformance: `code_tests` gives the verdicts plain Python gives, test by test.

Every program of tests/data/code_conformance_*.py (plus derived variants) is scored through the
scorer's batch path, and run with `python` in a temporary directory with the same tests: for
assertion tests, the program followed by each test at module level in try/except with its own
alarm (what `python solution_and_tests.py` does), stdin closed; for stdin/stdout tests, `python
main.py < input`, output compared by the same line rule; for pytest-style tests, `pytest` itself.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from grpo_rewards.scorer import Sample
from grpo_rewards.scorers.code import CodeTests
from grpo_rewards.scorers.code_harness import compare_output

sys.path.insert(0, str(Path(__file__).parent / "data"))
import code_conformance_assert  # noqa: E402
import code_conformance_stdio  # noqa: E402

pytestmark = pytest.mark.timeout(600)
LIMIT_S = 1.0
OUTPUT_CAP = 1 << 20

# Variants of each assertion program: as written; with f's result wrapped (so tests fail or
# error); with f raising on its second call (a mix of verdicts in one run).
VARIANTS = {
    "": "",
    "+wrapped": "\n\n_conf_f = f\ndef f(*args, **kwargs):\n    return [_conf_f(*args, **kwargs)]\n",
    "+second_call_raises": "\n\n_conf_g = f\n_conf_n = []\ndef f(*args, **kwargs):\n    _conf_n.append(1)\n"
                           "    if len(_conf_n) == 2:\n        raise LookupError('second call')\n"
                           "    return _conf_g(*args, **kwargs)\n",
}

# Where code_tests gives another verdict than plain Python, on purpose (docs/sandbox.md, "The
# trust boundary"): values that are not plain data never equal a test's value. Each entry: the
# programs (names, with every variant) and why. A lying object fools plain Python; a library
# object with its own equality (Fraction) is refused the same way, honest or not.
LYING = "class Liar:\n    def __eq__(self, other):\n        return True\n    __hash__ = object.__hash__\n"
LIARS = {
    "liar_eq": (LYING + "def f(a):\n    return Liar()", ["assert f(1) == 2", "assert f(2) == [3]"]),
    "liar_int_subclass": ("class I(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\n"
                          "def f(a):\n    return I(0)", ["assert f(1) == 2", "assert f(0) == 0"]),
    "liar_in_list": (LYING + "def f(a):\n    return [Liar(), Liar()]", ["assert f(1) == [1, 2]"]),
}
INTENDED = {
    "liar_eq": "an object whose == says True equals nothing on the tests' side",
    "liar_int_subclass": "an int subclass compares by its int value",
    "liar_in_list": "a list holding lying objects equals no list of values",
    "fraction": "a Fraction is a library object with its own equality: not plain data, it equals no test value",
}

PYTEST_CASES = {
    "plain": ("def add(a, b):\n    return a + b",
              "from solution import add\n\ndef test_one():\n    assert add(1, 2) == 3\n\ndef test_two():\n    assert add(2, 2) == 5\n"),
    "raises": ("def div(a, b):\n    return a / b",
               "import pytest\nfrom solution import div\n\ndef test_zero():\n    with pytest.raises(ZeroDivisionError):\n"
               "        div(1, 0)\n\ndef test_value():\n    assert div(4, 2) == 2\n\ndef test_boom():\n    div(1, 0)\n"),
    "own_error": ("class OwnError(ValueError):\n    pass\n\ndef check(x):\n    if x < 0:\n        raise OwnError('negative')\n"
                  "    return x",
                  "import pytest\nfrom solution import OwnError, check\n\ndef test_raises():\n    with pytest.raises(OwnError):\n"
                  "        check(-1)\n\ndef test_not_raised():\n    with pytest.raises(OwnError):\n        check(1)\n\n"
                  "def test_base():\n    with pytest.raises(ValueError, match='neg'):\n        check(-2)\n\n"
                  "def test_subclass():\n    assert issubclass(OwnError, ValueError) and not issubclass(OwnError, KeyError)\n\n"
                  "def test_message():\n    try:\n        check(-3)\n    except OwnError as e:\n        assert str(e) == 'positive'\n"),
    "parametrize": ("def sq(x):\n    return x * x",
                    "import pytest\nfrom solution import sq\n\n@pytest.mark.parametrize('x, y', [(1, 1), (2, 4), (3, 9)])\n"
                    "def test_sq(x, y):\n    assert sq(x) == y\n\n@pytest.mark.parametrize('x', [0, 5])\ndef test_bad(x):\n"
                    "    assert sq(x) == 0\n"),
    "classes": ("class Stack:\n    def __init__(self):\n        self.items = []\n    def push(self, x):\n        self.items.append(x)\n"
                "    def pop(self):\n        return self.items.pop()",
                "from solution import Stack\n\nclass TestStack:\n    def setup_method(self, method):\n        self.s = Stack()\n"
                "    def test_push_pop(self):\n        self.s.push(1)\n        assert self.s.pop() == 1\n"
                "    def test_empty(self):\n        assert self.s.pop() is None\n"),
    "main_guard_not_run": ("def f():\n    return 1\nif __name__ == '__main__':\n    raise SystemExit('imported, not run')",
                           "from solution import f\n\ndef test_f():\n    assert f() == 1\n"),
    "annotations": ("def f(a: int):\n    return a",
                    "from solution import f\n\ndef typed(x: int) -> int:\n    return x\n\n"
                    "def test_program_annotations():\n    assert f.__annotations__['a'] is int\n\n"
                    "def test_own_annotations():\n    assert typed.__annotations__['x'] is int\n"),
    "hooks": ("class Stack:\n    def __init__(self):\n        self.items = []\n    def push(self, x):\n        self.items.append(x)\n"
              "    def pop(self):\n        return self.items.pop() if self.items else None",
              "import unittest\nfrom solution import Stack\n\nSEEN = []\n\ndef setup_module():\n    SEEN.append('module')\n\n"
              "def setup_function(function):\n    SEEN.append(function.__name__)\n\n"
              "def test_module_hooks_ran():\n    assert SEEN[:2] == ['module', 'test_module_hooks_ran']\n\n"
              "class TestNoArgSetup:\n    def setup_method(self):\n        self.s = Stack()\n"
              "    def test_push(self):\n        self.s.push(1)\n        assert self.s.pop() == 1\n\n"
              "class TestClassSetup:\n    @classmethod\n    def setup_class(cls):\n        cls.shared = Stack()\n"
              "    def test_shared(self):\n        self.shared.push(2)\n        assert self.shared.pop() == 2\n\n"
              "class StackCase(unittest.TestCase):\n    @classmethod\n    def setUpClass(cls):\n        cls.made = 1\n"
              "    def setUp(self):\n        self.s = Stack()\n    def test_empty(self):\n        self.assertIsNone(self.s.pop())\n"
              "    def test_made(self):\n        self.assertEqual(self.made, 2)\n"),
    "marks": ("def f():\n    return 0",
              "import sys\nimport pytest\nfrom solution import f\n\n@pytest.mark.skip(reason='later')\ndef test_skip():\n"
              "    assert f() == 1\n\n@pytest.mark.skipif(sys.version_info > (3,), reason='py3')\ndef test_skipif():\n"
              "    assert f() == 1\n\n@pytest.mark.skipif(False, reason='never')\ndef test_not_skipped():\n    assert f() == 1\n\n"
              "def test_skip_inside():\n    pytest.skip('inside')\n    assert f() == 1\n\ndef test_runs():\n    assert f() == 0\n"),
    "failing_module_setup": ("def f():\n    return 0",
                             "from solution import f\n\ndef setup_module(module):\n    raise RuntimeError('no fixture data')\n\n"
                             "def test_one():\n    assert f() == 0\n\ndef test_two():\n    assert f() == 0\n"),
    "round_trips": ("import collections, enum\nPoint = collections.namedtuple('Point', 'x y')\n"
                    "class Light(enum.Enum):\n    RED = 1\n    GREEN = 2\n"
                    "def nxt(light):\n    return Light.GREEN if light is Light.RED else Light.RED\n"
                    "def manhattan(a, b):\n    return abs(a.x - b.x) + abs(a.y - b.y)",
                    "from solution import *\n\ndef test_namedtuple_back():\n    assert manhattan(Point(0, 0), Point(3, 4)) == 7\n\n"
                    "def test_isinstance():\n    assert isinstance(Point(1, 2), Point)\n\n"
                    "def test_identity():\n    assert nxt(Light.RED) is Light.GREEN and nxt(nxt(Light.RED)) is Light.RED\n"),
    "module_import": ("import dataclasses\n@dataclasses.dataclass\nclass P:\n    x: int\ndef make(x):\n    return P(x)",
                      "import pickle\nimport solution\n\ndef test_pickle():\n    p = solution.make(2)\n"
                      "    assert pickle.loads(pickle.dumps(p)) == p\n\ndef test_wrong():\n    assert solution.make(1).x == 2\n"),
}


def assert_entries() -> list[tuple[str, str, list[str]]]:
    return [(name + suffix, program + extra, tests)
            for name, (program, tests) in sorted({**code_conformance_assert.CASES, **LIARS}.items())
            for suffix, extra in VARIANTS.items()]


def intended(name: str) -> str | None:
    """Why `name`'s verdicts may differ from plain Python's, or None when they must not."""
    return INTENDED.get(name.split("+")[0])


def stdio_entries() -> list[tuple[str, str, list[tuple[str, str]]]]:
    out = []
    for name, (program, cases) in sorted(code_conformance_stdio.CASES.items()):
        out.append((name, program, cases))
        out.append((name + "+wrong_expected", program, [(i, e + "extra\n") for i, e in cases]))
    return out


# ---- plain Python --------------------------------------------------------------------------


def _limit_output():
    resource.setrlimit(resource.RLIMIT_FSIZE, (OUTPUT_CAP + 1, OUTPUT_CAP + 1))


def python_assert_verdicts(program: str, tests: list[str], workdir: Path) -> list[str]:
    lines = [program, "", "import signal as _conf_sig", "class _ConfTimeout(BaseException):", "    pass",
             "def _conf_alarm(*_):", "    raise _ConfTimeout()", "_conf_sig.signal(_conf_sig.SIGALRM, _conf_alarm)",
             "_conf_out = open('verdicts.txt', 'a', buffering=1)"]
    for test in tests:
        lines += [f"_conf_sig.setitimer(_conf_sig.ITIMER_REAL, {LIMIT_S})", "try:", textwrap.indent(test, "    "),
                  "except _ConfTimeout:", "    _conf_status = 'timeout'", "except AssertionError:",
                  "    _conf_status = 'failed'", "except BaseException:", "    _conf_status = 'error'", "else:",
                  "    _conf_status = 'passed'", "finally:", "    _conf_sig.setitimer(_conf_sig.ITIMER_REAL, 0)",
                  "_conf_out.write(_conf_status + '\\n')"]
    (workdir / "main.py").write_text("\n".join(lines) + "\n")
    try:
        subprocess.run([sys.executable, "main.py"], cwd=workdir, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=30, preexec_fn=_limit_output)
    except subprocess.TimeoutExpired:
        pass
    path = workdir / "verdicts.txt"
    got = path.read_text().split() if path.exists() else []
    return got + ["error"] * (len(tests) - len(got))  # no verdict: the program ended the run first


def python_stdio_verdict(program: str, stdin: str, expected: str, workdir: Path) -> str:
    (workdir / "main.py").write_text(program)
    out_path = workdir / "stdout.txt"
    with open(out_path, "wb") as out:
        try:
            proc = subprocess.run([sys.executable, "main.py"], cwd=workdir, input=stdin.encode(), stdout=out,
                                  stderr=subprocess.DEVNULL, timeout=LIMIT_S, preexec_fn=_limit_output)
        except subprocess.TimeoutExpired:
            return "timeout"
    data = out_path.read_bytes()
    if len(data) > OUTPUT_CAP:
        return "output_limit"
    if proc.returncode != 0:
        return "output_limit" if proc.returncode == -25 else "error"  # SIGXFSZ: over the output cap
    return "passed" if compare_output(expected, data.decode("utf-8", "replace"))[0] else "failed"


def pytest_verdicts(program: str, test_module: str, workdir: Path) -> dict[str, str]:
    (workdir / "solution.py").write_text(program)
    (workdir / "test_solution.py").write_text(test_module)
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml=r.xml",
                    "test_solution.py"], cwd=workdir, stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
    verdicts: dict[str, str] = {}
    for case in ET.parse(workdir / "r.xml").iter("testcase"):
        path = case.get("classname", "").split(".")
        name = case.get("name", "").split("[")[0]
        label = f"{path[-1]}.{name}" if len(path) > 1 else name  # module.Class, or the module alone
        if any(child.tag == "skipped" for child in case):
            verdicts[label] = "skipped"
            continue
        ok = not any(child.tag in ("failure", "error") for child in case)
        verdicts[label] = "passed" if ok and verdicts.get(label, "passed") == "passed" else "failed"
    return verdicts


# ---- the comparison ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def scorer():
    s = CodeTests(per_test_timeout_s=LIMIT_S, timeout_s=30.0, output_bytes=OUTPUT_CAP, workers=2)
    yield s
    s.close()


def test_assertion_programs_get_plain_pythons_verdicts(scorer, tmp_path):
    entries = assert_entries()
    assert len(entries) >= 200
    scores = scorer.score([Sample("", program, {"test_list": tests}) for _, program, tests in entries])

    def reference(i):
        workdir = tmp_path / f"a{i}"
        workdir.mkdir()
        return python_assert_verdicts(entries[i][1], entries[i][2], workdir)

    with ThreadPoolExecutor(4) as pool:
        expected = list(pool.map(reference, range(len(entries))))
    differences, intended_differences = [], set()
    for (name, _, tests), score, want in zip(entries, scores, expected):
        got = [t["status"] for t in score.info.get("tests", [])] or [f"none: {score.info.get('reason')}"]
        if got == want:
            continue
        if intended(name) and all(g == w or (w == "passed" and g == "failed") for g, w in zip(got, want)):
            intended_differences.add(name.split("+")[0])  # only ever a pass that becomes a fail
            continue
        differences.append((name, got, want, [t.get("detail") for t in score.info.get("tests", [])]))
    assert not differences, json.dumps(differences, indent=1)[:6000]
    assert intended_differences == set(INTENDED)  # each liar fools plain Python and fails here
    statuses = {s for want in expected for s in want}
    assert {"passed", "failed", "error", "timeout"} <= statuses  # every kind of verdict is exercised


def test_stdio_programs_get_plain_pythons_verdicts(scorer, tmp_path):
    entries = stdio_entries()
    samples = [Sample("", program, {"inputs": [i for i, _ in cases], "outputs": [e for _, e in cases]})
               for _, program, cases in entries]
    scores = scorer.score(samples)
    jobs = [(n, program, stdin, exp) for n, (_, program, cases) in enumerate(entries) for stdin, exp in cases]

    def reference(job):
        n, program, stdin, exp = job
        workdir = tmp_path / f"s{n}-{abs(hash(stdin)) % 10 ** 8}"
        workdir.mkdir(exist_ok=True)
        return n, python_stdio_verdict(program, stdin, exp, workdir)

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(reference, jobs))
    expected: dict[int, list[str]] = {}
    for n, verdict in results:
        expected.setdefault(n, []).append(verdict)
    differences = [(name, [t["status"] for t in score.info["tests"]], expected[n])
                   for n, ((name, _, _), score) in enumerate(zip(entries, scores))
                   if [t["status"] for t in score.info["tests"]] != expected[n]]
    assert not differences, differences
    assert {"passed", "failed", "error", "timeout", "output_limit"} <= {v for vs in expected.values() for v in vs}


def test_pytest_style_programs_get_pytests_verdicts(scorer, tmp_path):
    names = sorted(PYTEST_CASES)
    scores = scorer.score([Sample("", PYTEST_CASES[n][0], {"test": PYTEST_CASES[n][1]}) for n in names])
    for name, score in zip(names, scores):
        workdir = tmp_path / name
        workdir.mkdir()
        want = pytest_verdicts(*PYTEST_CASES[name], workdir)
        got = {t["test"]: t["status"] if t["status"] in ("passed", "skipped") else "failed" for t in score.info["tests"]}
        assert got == want, (name, score.info["tests"])


def test_the_suite_is_large_enough():
    assert len(assert_entries()) + len(stdio_entries()) + len(PYTEST_CASES) >= 200
