"""`reward_model`: parity with TRL 1.16's GRPOTrainer reward-model path (its own `_calculate_rewards`),
validation at spec load, one load per process, truncation and transforms."""

from __future__ import annotations

import math
import random

import pytest

pytest.importorskip("torch")
pytest.importorskip("trl")

from _reward_model_helpers import build_reward_model  # noqa: E402

from grpo_rewards.compose import build  # noqa: E402
from grpo_rewards.errors import ConfigError  # noqa: E402
from grpo_rewards.scorer import Sample  # noqa: E402
from grpo_rewards.scorers import reward_model  # noqa: E402
from grpo_rewards.scorers.reward_model import RewardModel  # noqa: E402
from grpo_rewards.spec import load_spec  # noqa: E402

WORDS = "the answer is seven because three plus four makes seven and we check it twice".split()


def texts(n: int, seed: int, longest: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, longest))) for _ in range(n)]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_reward_model(tmp_path_factory.mktemp("rm"))


@pytest.fixture(scope="module")
def trl_trainer(model_dir, tmp_path_factory):
    """A real GRPOTrainer whose one reward function is the reward model, named by its directory as a
    TRL user names it: TRL loads the model and its tokenizer itself."""
    from _tiny_models import build_tiny_llama
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    out = tmp_path_factory.mktemp("trl")
    policy = build_tiny_llama(out / "policy")
    args = GRPOConfig(output_dir=str(out / "run"), per_device_train_batch_size=4, num_generations=4,
                      max_completion_length=4, use_cpu=True, bf16=False, report_to=[], seed=0)
    return GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(policy), reward_funcs=[str(model_dir)], args=args,
                       processing_class=AutoTokenizer.from_pretrained(policy),
                       train_dataset=Dataset.from_list([{"prompt": "x"}]))


def trl_rewards(trainer, prompts, completions) -> list[float]:
    inputs = [{"prompt": p, "completion": c} for p, c in zip(prompts, completions, strict=True)]
    rewards = trainer._calculate_rewards(inputs, prompts, completions, [[0]] * len(prompts))
    return rewards[:, 0].tolist()


@pytest.mark.timeout(600)
def test_text_rewards_equal_trls(trl_trainer, model_dir):
    prompts = texts(12, 0, 30)
    completions = texts(12, 1, 60)
    expected = trl_rewards(trl_trainer, prompts, completions)
    scorer = RewardModel(model=str(model_dir), batch_size=5)
    got = [s.value for s in scorer.score([Sample(p, c) for p, c in zip(prompts, completions, strict=True)])]
    assert len(set(expected)) == 12  # the model tells the samples apart
    assert got == pytest.approx(expected, abs=1e-5)


@pytest.mark.timeout(600)
def test_conversational_rewards_equal_trls(trl_trainer, model_dir):
    prompts = [[{"role": "system", "content": "Be brief."}, {"role": "user", "content": q}] for q in texts(10, 2, 25)]
    completions = [[{"role": "assistant", "content": a}] for a in texts(10, 3, 50)]
    expected = trl_rewards(trl_trainer, prompts, completions)
    scorer = RewardModel(model=str(model_dir), batch_size=4)
    samples = [Sample(p, c) for p, c in zip(prompts, completions, strict=True)]
    assert [s.value for s in scorer.score(samples)] == pytest.approx(expected, abs=1e-5)
    # A completion given as text with a chat prompt is the assistant message TRL would have built.
    as_text = [Sample(p, c[0]["content"]) for p, c in zip(prompts, completions, strict=True)]
    assert [s.value for s in scorer.score(as_text)] == pytest.approx(expected, abs=1e-5)


def test_values_do_not_depend_on_batch_order_or_size(model_dir):
    samples = [Sample(p, c) for p, c in zip(texts(20, 4, 20), texts(20, 5, 80), strict=True)]
    one_by_one = [s.value for s in RewardModel(model=str(model_dir), batch_size=1).score(samples)]
    order = list(range(20))
    random.Random(0).shuffle(order)
    shuffled = RewardModel(model=str(model_dir), batch_size=7).score([samples[i] for i in order])
    back = [None] * 20
    for i, score in zip(order, shuffled, strict=True):
        back[i] = score.value
    assert back == pytest.approx(one_by_one, abs=1e-5)


def test_loaded_once_and_shared_by_every_member(model_dir):
    spec = {"scorers": [{"scorer": "reward_model", "name": "a", "params": {"model": str(model_dir)}},
                        {"scorer": "reward_model", "name": "b", "params": {"model": str(model_dir), "batch_size": 2,
                                                                          "transform": "sigmoid"}}]}
    with build(spec) as reward:
        a, b = (m.scorer for m in reward.members)
        assert a.loaded.model is b.loaded.model
        batch = reward.score([Sample("q", "an answer"), Sample("q", "another answer")])
    logits = batch.values["a"]
    assert batch.values["b"] == pytest.approx([1 / (1 + math.exp(-v)) for v in logits])


def test_missing_or_broken_model_is_a_spec_error(tmp_path):
    with pytest.raises(ConfigError) as missing:
        load_spec({"scorers": [{"scorer": "reward_model", "params": {"model": str(tmp_path / "nope")}}]})
    assert "scorers[0].params" in str(missing.value) and "nope" in str(missing.value)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match="cannot be loaded"):
        load_spec({"scorers": [{"scorer": "reward_model", "params": {"model": str(broken)}}]})


def test_truncation_keeps_the_end_and_says_so(model_dir):
    long = Sample("question " * 5, " ".join(WORDS) * 3)
    full = RewardModel(model=str(model_dir)).score([long])[0]
    cut = RewardModel(model=str(model_dir), max_length=16).score([long])[0]
    assert "truncated" not in full.info and cut.info["tokens"] == 16
    assert cut.info["truncated"] == full.info["tokens"] - 16
    tail = RewardModel(model=str(model_dir))
    ids = tail.loaded.tokenizer(long.prompt + long.completion, add_special_tokens=False)["input_ids"][-16:]
    assert cut.value == pytest.approx(tail._forward([ids])[0], abs=1e-6)


def test_affine_transform_and_a_sample_the_template_rejects(model_dir):
    scorer = RewardModel(model=str(model_dir), transform="affine", affine_from=(-2, 2), affine_to=(0, 10))
    good, bad = scorer.score([Sample([{"role": "user", "content": "hi"}], "hello"),
                              Sample([{"role": "user", "content": "hi"}], [{"role": "assistant"}])])
    assert good.value == pytest.approx((good.info["logit"] + 2) / 4 * 10)
    assert bad.value is None and bad.info["reason"] == "cannot render the sample"


def test_the_model_cache_is_keyed_by_path_device_and_dtype(model_dir):
    before = dict(reward_model._LOADED)
    RewardModel(model=str(model_dir), dtype="bfloat16")
    RewardModel(model=str(model_dir), dtype="bfloat16")
    added = set(reward_model._LOADED) - set(before)
    assert added == {(str(model_dir), "cpu", "bfloat16")}
