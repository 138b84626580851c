"""The TRL functions say what they take (`prompts`, `completions`, `**kwargs`, as TRL documents reward
functions), and a dataset without a column the spec reads stops the first call, in the pinned TRL too."""

from __future__ import annotations

import inspect

import pytest
from test_trl_adapter import tiny_model_dir

from grpo_rewards import build
from grpo_rewards.columns import MissingFieldError

pytestmark = pytest.mark.timeout(600)

SPEC = {"scorers": [{"scorer": "math_accuracy", "name": "correct", "params": {"workers": 1}},
                    {"scorer": "think_format", "name": "format", "weight": 0.2}]}


def test_the_signature_names_prompts_completions_and_kwargs():
    with build(SPEC) as reward:
        funcs, _ = reward.as_trl()
        params = inspect.signature(funcs[0]).parameters
        assert list(params) == ["prompts", "completions", "kwargs"]
        assert params["kwargs"].kind is inspect.Parameter.VAR_KEYWORD
        assert all(params[p].default is inspect.Parameter.empty for p in ("prompts", "completions"))
        prompts, completions = ["What is 6*7?"] * 2, ["<answer>42</answer>", "<answer>41</answer>"]
        by_keyword = funcs[0](prompts=prompts, completions=completions, answer=["42", "42"])
        assert by_keyword == [1.0, 0.0]
        # What an external tool that reads the signature does: positionally, in the order it names.
        assert funcs[0](prompts, completions, answer=["42", "42"]) == by_keyword
        with pytest.raises(TypeError, match="missing 1 required positional argument: 'completions'"):
            funcs[0](completions)
        with pytest.raises(TypeError, match="positional arguments but 4 were given"):
            funcs[0](prompts, completions, ["42", "42"])


def test_a_missing_column_is_a_clear_error_on_the_first_call_and_an_empty_one_masks():
    with build(SPEC) as reward:
        funcs, _ = reward.as_trl()
        prompts, completions = ["What is 6*7?"] * 2, ["<answer>42</answer>"] * 2
        with pytest.raises(MissingFieldError) as caught:
            funcs[1](prompts=prompts, completions=completions, solution=["42", "42"], trainer_state=object())
        message = str(caught.value)
        assert "the TRL dataset lacks a field the reward reads (its columns: solution)" in message
        assert "Set `answer_field: solution` in scorers[0].params" in message
        # A column present with None on some rows: TRL's multi-task mask, as before.
        assert funcs[0](prompts=prompts, completions=completions, answer=["42", None]) == [1.0, None]


def test_the_pinned_grpo_trainer_stops_at_its_first_step_on_a_missing_column(tmp_path):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    model_dir = tiny_model_dir(tmp_path / "model")
    dataset = Dataset.from_list([{"prompt": f"what is {a} plus {a}", "solution": str(2 * a)} for a in range(8)])
    with build(SPEC) as reward:
        reward_funcs, reward_weights = reward.as_trl()
        args = GRPOConfig(output_dir=str(tmp_path / "out"), max_steps=1, per_device_train_batch_size=4,
                          num_generations=4, max_completion_length=4, logging_steps=1, use_cpu=True, bf16=False,
                          beta=0.0, report_to=[], save_strategy="no", reward_weights=reward_weights, seed=0)
        trainer = GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(model_dir), reward_funcs=reward_funcs,
                              args=args, train_dataset=dataset, processing_class=AutoTokenizer.from_pretrained(model_dir))
        with pytest.raises(MissingFieldError, match="Set `answer_field: solution`"):
            trainer.train()
        assert trainer.state.global_step == 0
