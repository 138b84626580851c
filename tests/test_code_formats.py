"""`code_tests` reads the test layouts of the common code datasets. Each fixture has the shape
the dataset publishes (field names, JSON-in-string encodings, LiveCodeBench's compressed private
tests); each is scored with a right and a wrong solution."""

from __future__ import annotations

import base64
import json
import pickle
import zlib

import pytest

from grpo_rewards.scorer import Sample
from grpo_rewards.scorers.code import CodeTests
from grpo_rewards.scorers.code_formats import parse_reference

pytestmark = pytest.mark.timeout(120)

STDIN_SUM = "a, b = map(int, input().split())\nprint(a + b)"
STDIN_WRONG = "a, b = map(int, input().split())\nprint(a * b + 1)"


def lcb_compress(cases: list[dict]) -> str:
    """LiveCodeBench's encoding of private tests: base64(zlib(pickle(json string)))."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(cases)))).decode()


FIXTURES = {
    # openai_humaneval: prompt, canonical_solution, test (def check(candidate)), entry_point
    "humaneval": ({"task_id": "HumanEval/x", "entry_point": "add",
                   "test": "\n\nMETADATA = {}\n\n\ndef check(candidate):\n    assert candidate(2, 3) == 5\n"
                           "    assert candidate(0, 0) == 0\n"},
                  "def add(a, b):\n    return a + b", "def add(a, b):\n    return a * b + 1", "assert"),
    # mbpp: test_list (assert strings), test_setup_code, challenge_test_list
    "mbpp": ({"task_id": 2, "test_setup_code": "import math", "challenge_test_list": [],
              "test_list": ["assert add(2, 3) == 5", "assert math.isclose(add(0.5, 0.25), 0.75)"]},
             "def add(a, b):\n    return a + b", "def add(a, b):\n    return a * b + 1", "assert"),
    # KodCode-V1: test holds a pytest module importing from `solution`
    "kodcode": ({"question_id": "Prefill_1", "test": "from solution import add\n\ndef test_add_positive():\n"
                 "    assert add(2, 3) == 5\n\ndef test_add_zero():\n    assert add(0, 0) == 0\n",
                 "test_info": [{"function_name": "add", "parameter_list": "(a, b)"}]},
                "def add(a, b):\n    return a + b", "def add(a, b):\n    return a * b + 1", "assert"),
    # APPS / TACO, standard input: input_output is a JSON string
    "apps_stdin": ({"problem_id": 1, "input_output": json.dumps({"inputs": ["2 3\n", "10 -4\n"],
                                                                   "outputs": ["5\n", "6\n"]})},
                   STDIN_SUM, STDIN_WRONG, "stdio"),
    # APPS / TACO, call-based: fn_name, inputs are argument lists, outputs one-element lists
    "apps_call": ({"problem_id": 2, "input_output": json.dumps({"fn_name": "add", "inputs": [[2, 3], [10, -4]],
                                                                  "outputs": [[5], [6]]})},
                  "def add(a, b):\n    return [a + b]", "def add(a, b):\n    return a * b + 1", "assert"),  # [5] and 5 both pass, as in APPS
    # deepmind/code_contests: public/private/generated tests as {input: [...], output: [...]}
    "code_contests": ({"name": "x", "public_tests": {"input": ["2 3\n"], "output": ["5\n"]},
                       "private_tests": {"input": ["10 -4\n"], "output": ["6\n"]},
                       "generated_tests": {"input": ["3 4\n"], "output": ["7\n"]}},
                      STDIN_SUM, STDIN_WRONG, "stdio"),
    # livecodebench/code_generation_lite, stdin: public JSON string, private compressed
    "livecodebench_stdin": ({"question_id": "abc", "metadata": "{}",
                             "public_test_cases": json.dumps([{"input": "2 3\n", "output": "5\n",
                                                               "testtype": "stdin"}]),
                             "private_test_cases": lcb_compress([{"input": "10 -4\n", "output": "6\n",
                                                                  "testtype": "stdin"}])},
                            STDIN_SUM, STDIN_WRONG, "stdio"),
    # livecodebench functional (LeetCode): JSON lines per argument, metadata.func_name, class Solution
    "livecodebench_functional": ({"question_id": "2999", "metadata": json.dumps({"func_name": "maxSum"}),
                                  "starter_code": "class Solution:\n    def maxSum(self, nums: List[int], k: int) -> int:\n",
                                  "public_test_cases": json.dumps([{"input": "[1, 2, 3]\n2", "output": "5",
                                                                    "testtype": "functional"}]),
                                  "private_test_cases": lcb_compress([{"input": "[4, 4]\n1", "output": "4",
                                                                       "testtype": "functional"}])},
                                 "from typing import List\nclass Solution:\n    def maxSum(self, nums: List[int], k: int)"
                                 " -> int:\n        return sum(sorted(nums)[-k:])",
                                 "class Solution:\n    def maxSum(self, nums, k):\n        return sum(nums)", "assert"),
    # open-r1/verifiable-coding-problems-python: verification_info with stdin_stdout test cases
    "open_r1": ({"verification_info": {"language": "python", "test_cases": [
                    {"fn_name": None, "input": "2 3\n", "output": "5\n", "type": "stdin_stdout"},
                    {"fn_name": None, "input": "10 -4\n", "output": "6\n", "type": "stdin_stdout"}]}},
                STDIN_SUM, STDIN_WRONG, "stdio"),
    "open_r1_function_call": ({"verification_info": json.dumps({"language": "python", "test_cases": [
                                  {"fn_name": "add", "input": [2, 3], "output": [5], "type": "function_call"}]})},
                              "def add(a, b):\n    return a + b", "def add(a, b):\n    return a * b + 1", "assert"),
}


@pytest.fixture(scope="module")
def scorer():
    s = CodeTests(per_test_timeout_s=2.0, timeout_s=6.0, workers=2)
    yield s
    s.close()


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_each_dataset_layout_scores_right_and_wrong_solutions(scorer, name):
    ref, right, wrong, kind = FIXTURES[name]
    good, bad = scorer.score([Sample("", f"```python\n{right}\n```", ref), Sample("", wrong, ref)])
    assert good.value == 1.0, good.info
    assert good.info["format"] == kind and good.info["total"] >= 1
    assert bad.value == 0.0, bad.info


def test_a_call_based_failure_shows_the_call_the_expected_and_the_actual_value(scorer):
    ref, _, _, _ = FIXTURES["apps_call"]
    s = scorer.score([Sample("", "def add(a, b):\n    return list(range(a * 100))", ref)])[0]
    first = s.info["tests"][0]
    assert first["test"] == "add(2, 3)" and first["status"] == "failed"
    assert first["detail"].startswith("add(2, 3) returned [0, 1, 2,") and first["detail"].endswith("expected [5]")
    assert len(first["detail"]) < 300  # the actual value is cut


def test_lcb_private_tests_never_unpickle_objects():
    evil = base64.b64encode(zlib.compress(pickle.dumps(ValueError("x")))).decode()
    parsed = parse_reference({"public_test_cases": "[]", "private_test_cases": evil})
    assert parsed.problem and "compressed" in parsed.problem
