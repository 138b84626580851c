"""The TRL adapter: TRL's keyword call, one named function per scorer, one scoring per batch,
and a real 2-step `GRPOTrainer` run (pinned TRL) with a tiny model built from a config."""

from __future__ import annotations

import pickle
import threading

import pytest
from reward_helpers import Answer, HelperPlugin, Slow

from grpo_rewards import build, load_registry
from grpo_rewards.integrations.trl import TRAINER_KWARGS, samples_from_trl


@pytest.fixture(scope="module")
def registry():
    return load_registry(extra_plugins=[HelperPlugin()])


SPEC = {"scorers": [
    {"scorer": "t_answer", "name": "correct", "weight": 1.0},
    {"scorer": "t_gated", "params": {"of": "correct"}, "weight": 0.5},
    {"scorer": "t_length", "name": "len", "weight": -0.1, "params": {"max_chars": 10}},
]}


def trl_call(func, prompts, completions, **columns):
    """Call a reward function exactly as TRL 1.16's `_calculate_rewards` does (trainer kwargs included)."""
    logged = []
    return func(prompts=prompts, completions=completions, completion_ids=[[1, 2]] * len(completions),
                **columns, trainer_state=object(), log_extra=lambda *a: logged.append(a),
                log_metric=lambda *a: logged.append(a))


def test_one_function_per_scorer_named_by_alias_with_weights(registry):
    funcs, weights = build(SPEC, registry).as_trl()
    assert [f.__name__ for f in funcs] == ["correct", "t_gated", "len"]
    assert weights == [1.0, 0.5, -0.1]
    from trl.trainer.utils import get_callable_name

    assert [get_callable_name(f) for f in funcs] == ["correct", "t_gated", "len"]


def test_standard_and_conversational_completions(registry):
    funcs, _ = build(SPEC, registry).as_trl()
    prompts = ["1+1?", "2+2?", "no gold"]
    completions = ["2", "it is 5", "0123456789xyz"]
    answers = ["2", "4", None]
    standard = [trl_call(f, prompts, completions, answer=answers) for f in funcs]
    assert standard == [[1.0, 0.0, None], [0.5, 0.0, 0.0], [0.1, 0.7, 1.0]]
    conv_prompts = [[{"role": "system", "content": "be brief"}, {"role": "user", "content": p}] for p in prompts]
    conv_completions = [[{"role": "assistant", "content": c}] for c in completions]
    conversational = [trl_call(f, conv_prompts, conv_completions, answer=answers) for f in funcs]
    assert conversational == standard


def test_dataset_columns_become_reference_and_trainer_kwargs_do_not(registry):
    Answer.seen_reference_keys.clear()
    funcs, _ = build(SPEC, registry).as_trl()
    trl_call(funcs[0], ["p", "q"], ["a", "b"], answer=["a", "c"], level=[1, 2], scalar=3)
    [keys] = Answer.seen_reference_keys
    assert keys == [["answer", "completion_ids", "level"]] * 2
    assert TRAINER_KWARGS >= {"trainer_state", "log_extra", "log_metric"}
    samples = samples_from_trl(["p"], ["c"], None, answer=["x"], trainer_state=["looks like a column"])
    assert dict(samples[0].reference) == {"answer": "x"}


def test_the_composite_is_scored_once_per_batch(registry):
    Answer.calls = 0
    funcs, _ = build(SPEC, registry).as_trl()
    cache = funcs[0].cache
    batch_a = (["p", "q"], ["x 1", "y"], {"answer": ["1", "1"]})
    batch_b = (["p", "q"], ["x 1", "y"], {"answer": ["1", "y"]})  # same completions, other reference
    for f in funcs:
        trl_call(f, batch_a[0], batch_a[1], **batch_a[2])
    assert Answer.calls == 1 and cache.scored_batches == 1
    results_b = [trl_call(f, batch_b[0], batch_b[1], **batch_b[2]) for f in funcs]
    assert Answer.calls == 2
    assert results_b[0] == [1.0, 1.0]
    # only the latest batches are kept: a third batch evicts the first (its scores then come
    # from the composite's score cache, so the scorer itself is not called again)
    trl_call(funcs[0], ["z"], ["z"], answer=["z"])
    trl_call(funcs[0], batch_a[0], batch_a[1], **batch_a[2])
    assert cache.scored_batches == 4 and Answer.calls == 3


def test_batches_differing_only_inside_large_arrays_are_not_confused():
    import numpy as np

    from grpo_rewards.integrations.trl import _batch_key

    a, b = np.zeros(5000), np.zeros(5000)
    b[2500] = 1.0  # numpy's repr of both is "array([0., 0., 0., ..., 0., 0., 0.])"
    assert repr(a) == repr(b)
    key = lambda arr: _batch_key(samples_from_trl(["p"], ["c"], None, image=[arr]))  # noqa: E731
    assert key(a) != key(b) and key(a) == key(np.zeros(5000))


@pytest.mark.timeout(60)
def test_threads_share_one_scoring_of_a_batch(registry):
    Slow.batch_sizes.clear()
    funcs, _ = build({"scorers": [{"scorer": "t_slow", "params": {"seconds": 0.3}},
                                  {"scorer": "t_length", "name": "a"}, {"scorer": "t_length", "name": "b"}]},
                     registry).as_trl()
    results: dict[str, list] = {}
    barrier = threading.Barrier(len(funcs) * 2)

    def call(f, i):
        barrier.wait()
        results[f"{f.__name__}{i}"] = trl_call(f, ["p"] * 4, ["abcde"] * 4)

    threads = [threading.Thread(target=call, args=(f, i)) for f in funcs for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert Slow.batch_sizes == [1]  # six concurrent calls, one scoring (of the one distinct sample)
    assert results["t_slow0"] == results["t_slow1"] == [1.0] * 4
    assert results["a0"] == results["b1"] == [0.5] * 4


def test_an_error_reaches_every_caller_and_the_batch_is_retried(registry):
    funcs, _ = build({"on_error": "raise", "scorers": [{"scorer": "t_explode"}, {"scorer": "t_length"}]},
                     registry).as_trl()
    for f in funcs:
        with pytest.raises(RuntimeError, match="boom"):
            trl_call(f, ["p"], ["c"])
    assert funcs[0].cache.scored_batches == 0


def test_lengths_and_empty_batches(registry):
    funcs, _ = build(SPEC, registry).as_trl()
    assert trl_call(funcs[2], [], []) == []
    with pytest.raises(ValueError, match="2 prompts for 1 completions"):
        funcs[2](prompts=["a", "b"], completions=["c"])


def test_reward_functions_pickle(registry):
    funcs, _ = build({"scorers": [{"scorer": "t_length"}]}, registry).as_trl()
    trl_call(funcs[0], ["p"], ["abc"])
    clone = pickle.loads(pickle.dumps(funcs[0]))
    assert clone.__name__ == "t_length" and clone.cache.scored_batches == 0
    assert trl_call(clone, ["p"], ["abcde"]) == [0.5]


# ---------------------------------------------------------------------------------------------
# A real GRPOTrainer run


WORDS = ["what", "is", "plus", "the", "answer", "yes", "no", "so", "<think>", "</think>", *map(str, range(10))]


def tiny_model_dir(path):
    """A 1-layer Llama and a word-level tokenizer, built offline and saved like a hub checkpoint."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(["<pad>", "<eos>", "<unk>", *WORDS])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>",
                                        unk_token="<unk>")
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
                         pad_token_id=0, eos_token_id=1, bos_token_id=None, tie_word_embeddings=True)
    LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.mark.timeout(600)
def test_grpo_trainer_logs_every_scorer(tmp_path, registry):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    model_dir = tiny_model_dir(tmp_path / "model")
    dataset = Dataset.from_list([{"prompt": f"what is {a} plus {b}", "answer": str(a + b)}
                                 for a, b in [(1, 2), (2, 3), (3, 4), (0, 5), (4, 4), (1, 1), (2, 2), (3, 3)]])
    reward = build(SPEC, registry)
    reward_funcs, reward_weights = reward.as_trl()
    Answer.calls = 0
    Answer.seen_reference_keys.clear()
    args = GRPOConfig(output_dir=str(tmp_path / "out"), max_steps=2, per_device_train_batch_size=4,
                      num_generations=4, max_completion_length=6, learning_rate=1e-3, logging_steps=1,
                      use_cpu=True, bf16=False, beta=0.0, report_to=[], save_strategy="no",
                      reward_weights=reward_weights, seed=0)
    trainer = GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(model_dir), reward_funcs=reward_funcs,
                          args=args, train_dataset=dataset,
                          processing_class=AutoTokenizer.from_pretrained(model_dir))
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "loss" in entry or "reward" in entry]
    assert len(logs) >= 2
    for alias in reward.aliases:
        key = f"rewards/{alias}/mean"
        assert all(key in entry for entry in logs), (key, logs[0].keys())
        assert all(entry[key] == entry[key] for entry in logs)  # not NaN: every sample had a value
    # one composite scoring per generation batch although TRL called three functions
    assert Answer.calls == trainer.state.global_step == 2
    assert all(keys == ["answer", "completion_ids"] for batch in Answer.seen_reference_keys for keys in batch)
