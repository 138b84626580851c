"""`as_verl()` and `grpo_rewards.integrations.verl_functions`, called exactly as verl 0.9.1 calls them.

verl itself is not installed here (importing it needs ray and tensordict), so these tests use
verl's documented calls, read from its source: the naive reward manager calls
`compute_score(data_source=, solution_str=, ground_truth=, extra_info=)` from a thread pool;
the batch manager calls `compute_score(data_sources=, solution_strs=, ground_truths=,
extra_infos=)` with `data_sources` a numpy object array; `custom_reward_function.path:
pkg://MODULE` is `importlib.import_module(MODULE)`; `reward_kwargs` are merged into every call.
Both read a float or a dict whose `score` is the reward.
"""

from __future__ import annotations

import importlib
import math
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import numpy as np
import pytest
from _serve_helpers import math_expected, math_rows, spec_file

from grpo_rewards.compose import build
from grpo_rewards.registry import get_registry


@pytest.fixture(scope="module")
def spec(tmp_path_factory) -> Path:
    return spec_file(tmp_path_factory.mktemp("verl"))


@pytest.fixture(scope="module")
def rows_and_cli():
    return math_rows(12), list(math_expected()[:12])


def same(got: float, expected: float | None) -> bool:
    return math.isnan(got) if expected is None else got == expected


def _call_with_kwargs(raw_fn, extra_kwargs, *args, **kwargs):  # verl.trainer.ppo.reward's merge, reward_kwargs win
    return raw_fn(*args, **{**kwargs, **extra_kwargs})


def test_naive_manager_call_from_threads_equals_the_cli(spec, rows_and_cli):
    rows, expected = rows_and_cli
    reward = build(str(spec), get_registry())
    compute_score = reward.as_verl()
    with ThreadPoolExecutor(4) as pool:  # verl's naive manager: run_in_executor, one sample per call
        results = list(pool.map(lambda r: compute_score(
            data_source="arith", solution_str=r["completion"], ground_truth=r["answer"],
            extra_info={"index": r["id"], "prompt": r["prompt"]}), rows))
    for got, exp in zip(results, expected, strict=True):
        assert same(got["score"], exp["total"]) and got["scored"] == 1.0
        assert same(got["correct"], exp["scores"]["correct"]) and got["format"] == exp["scores"]["format"]
    reward.close()


def test_batch_manager_call_with_numpy_arrays(spec, rows_and_cli):
    rows, expected = rows_and_cli
    with build(str(spec), get_registry()) as reward:
        batch_fn = reward.as_verl().batch
        results = batch_fn(data_sources=np.array(["arith"] * len(rows), dtype=object),
                           solution_strs=[r["completion"] for r in rows],
                           ground_truths=[r["answer"] for r in rows],
                           extra_infos=np.array([{"index": i} for i in range(len(rows))], dtype=object))
        assert [r["score"] for r in results] == [e["total"] for e in expected]
        with pytest.raises(ValueError, match="3 solution_strs, 2 data_sources"):
            batch_fn(data_sources=["a", "b"], solution_strs=["x"] * 3, ground_truths=["1"] * 3)


def test_pkg_path_loading_with_reward_kwargs(spec, rows_and_cli):
    rows, expected = rows_and_cli
    # What verl's load_module does for `pkg://grpo_rewards.integrations.verl_functions`:
    module = importlib.import_module("grpo_rewards.integrations.verl_functions")
    per_sample = partial(_call_with_kwargs, module.compute_score, {"spec": str(spec)})
    got = per_sample(data_source="arith", solution_str=rows[0]["completion"], ground_truth=rows[0]["answer"],
                     extra_info={}, reward_router_address=None)  # extra keywords verl may add are accepted
    assert got["score"] == expected[0]["total"]
    batched = partial(_call_with_kwargs, module.compute_score_batch, {"spec": str(spec), "none_score": -1.0})
    results = batched(data_sources=["arith"] * 4, solution_strs=[r["completion"] for r in rows[:4]],
                      ground_truths=[r["answer"] for r in rows[:4]], extra_infos=[{}] * 4)
    assert [r["score"] for r in results] == [e["total"] for e in expected[:4]]


def test_unscorable_is_none_score_never_silent_zero():
    with build({"scorers": [{"scorer": "math_accuracy", "params": {"timeout_s": 5, "workers": 1}}]}, get_registry()) as reward:
        nan_result = reward.as_verl()(data_source="d", solution_str="<answer>3</answer>", ground_truth="\\frac{")
        assert math.isnan(nan_result["score"]) and nan_result["scored"] == 0.0
        chosen = reward.as_verl(none_score=-0.5)(data_source="d", solution_str="<answer>3</answer>",
                                                 ground_truth="\\frac{")
        assert chosen["score"] == -0.5 and chosen["scored"] == 0.0
        right = reward.as_verl()(data_source="d", solution_str="<answer>3</answer>", ground_truth={"answer": "3"})
        assert right == {"score": 1.0, "scored": 1.0, "math_accuracy": 1.0}


def test_missing_spec_is_a_clear_error(monkeypatch):
    module = importlib.import_module("grpo_rewards.integrations.verl_functions")
    monkeypatch.delenv(module.SPEC_ENV, raising=False)
    with pytest.raises(ValueError, match="reward_kwargs"):
        module.compute_score("d", "x", "1")


def test_the_ground_truth_fills_the_field_the_spec_reads_and_a_dict_without_it_is_refused(tmp_path):
    """A spec reading `solution`: a bare ground truth lands there; a dict without it, or a ground truth
    sent to another field by `answer_field`, is refused with the fix."""
    from grpo_rewards.columns import MissingFieldError

    path = spec_file(tmp_path, "scorers:\n  - scorer: math_accuracy\n    name: correct\n"
                               "    params: {workers: 1, answer_field: solution}\n")
    functions = importlib.import_module("grpo_rewards.integrations.verl_functions")
    call = dict(data_source="d", solution_str="<answer>42</answer>", extra_info={"index": 0}, spec=str(path))
    assert functions.compute_score(ground_truth="42", **call)["score"] == 1.0
    assert functions.compute_score(ground_truth={"solution": "41"}, **call)["score"] == 0.0
    with pytest.raises(MissingFieldError) as caught:
        functions.compute_score_batch(["d"], ["<answer>42</answer>"], [{"gold": "42"}], spec=str(path))
    message = str(caught.value)
    assert "verl's ground_truth (a value is read as 'solution') and extra_info lacks a field" in message
    assert "reads the field 'solution' (its `answer_field`)" in message and "its columns: data_source, gold" in message
    with pytest.raises(MissingFieldError, match="did you mean 'answer'"):
        functions.compute_score(ground_truth="42", answer_field="answer", **call)
