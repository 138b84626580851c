"""The test layouts of the common code datasets, read into `code_tests`' two kinds of tests:
assertion suites (run by the harness in one execution) and stdin/stdout cases.

Each reader follows the dataset's published shape; docs/scorers.md has one row per layout.
A reference that matches none gives `Parsed.problem`, which lists the accepted layouts.
"""

from __future__ import annotations

import base64
import io
import json
import pickle
import zlib
from collections.abc import Mapping
from typing import Any

from grpo_rewards.scorers.code_harness import (
    Parsed, StdioCase, assert_list_suite, call_suite, pytest_suite, split_check,
)

ACCEPTED = ("HumanEval ('test' + 'entry_point')", "MBPP ('test_list', 'test_setup_code')",
            "KodCode ('test' holding pytest-style def test_* functions)",
            "APPS/TACO ('input_output' with 'inputs'/'outputs', optional 'fn_name')",
            "CodeContests ('public_tests'/'private_tests'/'generated_tests' as {input: [...], output: [...]})",
            "LiveCodeBench ('public_test_cases'/'private_test_cases', 'metadata.func_name')",
            "open-r1 ('verification_info.test_cases')", "'tests' (assert strings or {input, output} dicts)",
            "'inputs'/'outputs'")


def parse_reference(ref: Mapping[str, Any]) -> Parsed:
    """The tests a reference holds, in the first layout that matches (see docs/scorers.md)."""
    for reader in (_humaneval_or_pytest, _assert_lists, _open_r1, _apps, _code_contests, _livecodebench, _io_lists):
        parsed = reader(ref)
        if parsed is not None:
            return parsed
    return Parsed(problem="reference has no tests in an accepted layout: " + "; ".join(ACCEPTED))


def _humaneval_or_pytest(ref: Mapping[str, Any]) -> Parsed | None:
    test = ref.get("test")
    if not isinstance(test, str) or not test.strip():
        return None
    entry = ref.get("entry_point")
    if isinstance(entry, str) and entry.isidentifier():
        return Parsed(assert_suite=split_check(test, entry))
    if "def test" in test:
        suite = pytest_suite(test)
        return Parsed(problem=suite) if isinstance(suite, str) else Parsed(assert_suite=suite)
    return Parsed(problem="reference 'test' needs a valid 'entry_point' (HumanEval), or pytest-style "
                          "def test_* functions (KodCode)")


def _assert_lists(ref: Mapping[str, Any]) -> Parsed | None:
    for key in ("tests", "test_list", "test_cases"):
        tests = ref.get(key)
        if isinstance(tests, list) and tests and all(isinstance(t, str) for t in tests):
            setup = ref.get("test_setup_code") or ""
            imports = ref.get("test_imports") or []
            setup = "\n".join([*(i for i in imports if isinstance(i, str)), setup if isinstance(setup, str) else ""])
            return Parsed(assert_suite=assert_list_suite(tests, setup))
        if isinstance(tests, list) and tests and all(isinstance(t, Mapping) for t in tests):
            return _cases(tests)
    return None


def _cases(tests: list[Mapping]) -> Parsed:
    """{input, output} dicts: stdin/stdout, or function calls when they name a function
    (open-r1 `type: function_call` with `fn_name`)."""
    fn_names = {t.get("fn_name") for t in tests if t.get("fn_name") or t.get("type") == "function_call"}
    if fn_names:
        if len(fn_names) != 1 or not isinstance(next(iter(fn_names)), str):
            return Parsed(problem="function-call tests need one 'fn_name'")
        return _calls(next(iter(fn_names)), [t.get("input") for t in tests], [t.get("output") for t in tests])
    return _stdio([(t.get("input", t.get("stdin")), t.get("output", t.get("stdout", t.get("expected_output"))))
                   for t in tests])


def _open_r1(ref: Mapping[str, Any]) -> Parsed | None:
    info = _json_field(ref.get("verification_info"))
    if isinstance(info, Mapping) and isinstance(info.get("test_cases"), list) and info["test_cases"]:
        if all(isinstance(t, Mapping) for t in info["test_cases"]):
            return _cases(info["test_cases"])
        return Parsed(problem="verification_info.test_cases must be {input, output} objects")
    return None


def _apps(ref: Mapping[str, Any]) -> Parsed | None:
    spec = _json_field(ref.get("input_output"))
    if not isinstance(spec, Mapping):
        return None
    inputs, outputs = spec.get("inputs"), spec.get("outputs")
    if not isinstance(inputs, list) or not isinstance(outputs, list) or not inputs:
        return Parsed(problem="input_output needs non-empty 'inputs' and 'outputs' lists")
    if spec.get("fn_name"):
        return _calls(spec["fn_name"], inputs, outputs)
    return _pairs(inputs, outputs)


def _code_contests(ref: Mapping[str, Any]) -> Parsed | None:
    groups = [ref.get(k) for k in ("public_tests", "private_tests", "generated_tests")]
    groups = [g for g in groups if isinstance(g, Mapping)]
    if not groups:
        return None
    inputs = [x for g in groups for x in (g.get("input") or [])]
    outputs = [x for g in groups for x in (g.get("output") or [])]
    if not inputs:
        return Parsed(problem="public_tests/private_tests/generated_tests hold no input")
    return _pairs(inputs, outputs)


def _livecodebench(ref: Mapping[str, Any]) -> Parsed | None:
    if "public_test_cases" not in ref and "private_test_cases" not in ref:
        return None
    cases: list = []
    for key in ("public_test_cases", "private_test_cases"):
        value = ref.get(key)
        if value in (None, "", []):
            continue
        decoded = _lcb_cases(value)
        if decoded is None:
            return Parsed(problem=f"{key} is neither a JSON list nor LiveCodeBench's compressed encoding")
        cases += decoded
    if not cases or not all(isinstance(c, Mapping) for c in cases):
        return Parsed(problem="LiveCodeBench test cases hold no {input, output, testtype} objects")
    if all(c.get("testtype") == "functional" for c in cases):
        metadata = _json_field(ref.get("metadata"))
        fn = metadata.get("func_name") if isinstance(metadata, Mapping) else None
        if not isinstance(fn, str) or not fn.isidentifier():
            return Parsed(problem="functional LiveCodeBench tests need metadata.func_name")
        try:
            args = [[json.loads(line) for line in c["input"].split("\n") if line.strip()] for c in cases]
            expected = [json.loads(c["output"]) for c in cases]
        except (ValueError, TypeError, KeyError) as exc:
            return Parsed(problem=f"a functional LiveCodeBench test is not JSON lines: {exc}")
        return Parsed(assert_suite=call_suite(fn, list(zip(args, expected))))
    return _pairs([c.get("input") for c in cases], [c.get("output") for c in cases])


class _StringsOnly(pickle.Unpickler):
    """LiveCodeBench pickles a JSON string; anything that names a class is refused."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")


def _lcb_cases(value: Any) -> list | None:
    if isinstance(value, list):
        return value
    if not isinstance(value, str):
        return None
    parsed = _json_field(value)
    if isinstance(parsed, list):
        return parsed
    try:
        text = _StringsOnly(io.BytesIO(zlib.decompress(base64.b64decode(value)))).load()
        return json.loads(text) if isinstance(text, str) else None
    except Exception:  # noqa: BLE001 - any malformed encoding is "not this layout"
        return None


def _io_lists(ref: Mapping[str, Any]) -> Parsed | None:
    inputs, outputs = ref.get("inputs"), ref.get("outputs")
    if isinstance(inputs, list) and isinstance(outputs, list) and inputs:
        return _pairs(inputs, outputs)
    return None


def _json_field(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value


def _pairs(inputs: list, outputs: list) -> Parsed:
    if len(inputs) != len(outputs):
        return Parsed(problem=f"reference has {len(inputs)} inputs but {len(outputs)} outputs")
    return _stdio(list(zip(inputs, outputs)))


def _calls(fn_name: Any, inputs: list, outputs: list) -> Parsed:
    """APPS-style call-based tests: each input is the argument list, each output the value
    (often as a one-element list)."""
    if not isinstance(fn_name, str) or not fn_name.isidentifier():
        return Parsed(problem=f"fn_name {fn_name!r} is not a Python name")
    if len(inputs) != len(outputs) or not inputs:
        return Parsed(problem=f"reference has {len(inputs)} inputs but {len(outputs)} outputs")
    args = [list(i) if isinstance(i, (list, tuple)) else [i] for i in inputs]
    try:
        return Parsed(assert_suite=call_suite(fn_name, list(zip(args, outputs))))
    except (TypeError, ValueError) as exc:
        return Parsed(problem=f"call-based tests hold values that are not plain data: {exc}")


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
