"""verl's custom reward functions for a spec file: `compute_score` and `compute_score_batch`.

Point verl's `custom_reward_function` at this module and name the spec in `reward_kwargs` (verl
merges them into every call):

    reward:
      custom_reward_function:
        path: pkg://grpo_rewards.integrations.verl_functions
        name: compute_score            # or compute_score_batch with reward_manager.name: batch
        reward_kwargs: {spec: /abs/path/rewards.yaml}

The spec is built once per process (verl calls the function for every sample).
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from grpo_rewards.compose import build
from grpo_rewards.integrations.verl import VerlReward

SPEC_ENV = "GRPO_REWARDS_SPEC"  # the spec when reward_kwargs does not name one
_loaded: dict[tuple[str, float, str], VerlReward] = {}
_loaded_lock = threading.Lock()


def _from_spec(spec: str | None, none_score: float, answer_field: str | None) -> VerlReward:
    path = spec or os.environ.get(SPEC_ENV)
    if not path:
        raise ValueError(f"grpo_rewards.integrations.verl_functions: name the spec in reward_kwargs ({{spec: PATH}}) "
                         f"or in the {SPEC_ENV} environment variable")
    key = (os.path.abspath(path), float(none_score), answer_field)
    with _loaded_lock:
        if key not in _loaded:
            _loaded[key] = VerlReward(build(path), none_score, answer_field)
        return _loaded[key]


def compute_score(data_source: Any, solution_str: str, ground_truth: Any, extra_info: Mapping[str, Any] | None = None,
                  spec: str | None = None, none_score: float = math.nan, answer_field: str | None = None,
                  **kwargs: Any) -> dict[str, float]:
    """verl's per-sample custom reward function, for the spec in `spec` (a reward_kwargs entry)."""
    return _from_spec(spec, none_score, answer_field)(data_source, solution_str, ground_truth, extra_info)


def compute_score_batch(data_sources: Sequence[Any], solution_strs: Sequence[str], ground_truths: Sequence[Any],
                        extra_infos: Sequence[Mapping[str, Any] | None] | None = None, spec: str | None = None,
                        none_score: float = math.nan, answer_field: str | None = None,
                        **kwargs: Any) -> list[dict[str, float]]:
    """verl's batched custom reward function (`reward_manager.name: batch`)."""
    return _from_spec(spec, none_score, answer_field).batch(data_sources, solution_strs, ground_truths, extra_infos)
