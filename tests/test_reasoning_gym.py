"""reasoning-gym as a task source (`task: reasoning_gym:<name>`): options, splits, and our math_accuracy
against reasoning-gym's own checkers on generated problems."""

from __future__ import annotations

from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest

rg = pytest.importorskip("reasoning_gym")

from reasoning_gym.utils import extract_answer  # noqa: E402

from grpo_core.data import get_task  # noqa: E402
from grpo_core.tasks import EVAL_SEEDS  # noqa: E402
from grpo_rewards.compose import build  # noqa: E402
from grpo_rewards.errors import ConfigError, UnknownNameError  # noqa: E402

pytestmark = pytest.mark.timeout(300)
REPO = Path(__file__).resolve().parents[1]


def options(name, **given):
    return get_task(f"reasoning_gym:{name}").params.model_validate(given).model_dump()


def build_split(name, split, size, seed, **given):
    return get_task(f"reasoning_gym:{name}").build(split, size, seed, **options(name, **given))


def test_held_out_set_is_fixed_distinct_and_never_trained_on():
    # a small problem space (two 1-digit terms: 200 questions), so training draws would hit held-out ones
    small = dict(min_terms=2, max_terms=2, min_digits=1, max_digits=1, eval_count=60)
    held = build_split("chain_sum", "eval", None, 7, **small)
    assert len(held) == 60 and len({r["question"] for r in held}) == 60
    assert held == build_split("chain_sum", "eval", None, 123, **small)  # whatever the run's seed
    assert build_split("chain_sum", "eval", 10, 7, **small) == held[:10]
    held_questions = {r["question"] for r in held}
    for seed in (1, 2):
        train = build_split("chain_sum", "train", 300, seed, **small)
        assert len(train) == 300 and not held_questions & {r["question"] for r in train}
    assert build_split("chain_sum", "train", 50, 1, **small) != build_split("chain_sum", "train", 50, 2, **small)


def test_held_out_seeds_are_above_every_training_seed(monkeypatch):
    import grpo_core.tasks as tasks

    calls = []
    real = tasks._items
    monkeypatch.setattr(tasks, "_items", lambda name, seed, count, gen: calls.append((seed, count)) or real(name, seed, count, gen))
    build_split("chain_sum", "train", 100, 5, eval_count=50)
    eval_seeds = [(s, c) for s, c in calls if s >= EVAL_SEEDS]
    train_seeds = [(s, c) for s, c in calls if s < EVAL_SEEDS]
    assert eval_seeds and train_seeds
    assert all(s + c <= EVAL_SEEDS for s, c in train_seeds)  # item i of a generator uses seed + i


def test_records_are_chat_prompts_with_the_gold_answer():
    record = build_split("basic_arithmetic", "eval", 1, 0, max_terms=2, max_digits=2, shots=1)[0]
    messages = record["prompt"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[0]["content"].startswith("Solve the problem") and messages[1]["content"].startswith("<answer>")
    assert messages[-1]["content"] == record["question"] and record["answer"]
    system = build_split("basic_arithmetic", "eval", 1, 0, shots=0, system_prompt=True, instruction="Be exact.")[0]
    assert system["prompt"] == [{"role": "system", "content": "Be exact."}, {"role": "user", "content": system["question"]}]


def test_options_are_validated_with_the_generators_own_checks(tmp_path):
    from grpo_core.config import load_config

    params = get_task("reasoning_gym:chain_sum").params
    with pytest.raises(ValueError, match="max_terms must be >= min_terms"):
        params.model_validate({"min_terms": 4, "max_terms": 2})
    with pytest.raises(ValueError, match="eval_count"):
        params.model_validate({"eval_count": 0})
    with pytest.raises(UnknownNameError, match="chain_sum"):
        get_task("reasoning_gym:chain_sums")
    bad = tmp_path / "train.yaml"
    bad.write_text("model: {name_or_path: smollm2-135m-instruct}\n"
                   "data:\n  task: reasoning_gym:chain_sum\n  options: {min_digits: x}\n"
                   "rewards: {scorers: [{scorer: math_accuracy}]}\n")
    with pytest.raises(ConfigError, match=r"data\.options\.min_digits"):
        load_config(bad)


def test_the_recipe_config_is_valid():
    from grpo_core.config import load_config

    config = load_config(REPO / "examples" / "smollm2_rg.yaml")
    assert config.data.task == "reasoning_gym:chain_sum" and config.rewards.aggregate == "normalize_then_sum"


def _variants(gold: str) -> list[str]:
    """The gold answer, numerically wrong answers, and equal values written differently."""
    g = int(gold)
    wrong = [str(g + 1), str(g - 1), str(g * 10 + 5), str(-g) if g else "1", "", "no idea"]
    return [gold, f" {gold} ", *wrong, f"{g:,}", f"{g}.0"]


def _equal(answer: str, gold: str) -> bool:
    try:
        return Decimal(answer.strip().replace(",", "")) == Decimal(gold)
    except ArithmeticError:
        return False


@pytest.mark.parametrize("name, given, count", [
    ("chain_sum", dict(min_terms=2, max_terms=4, max_digits=3), 120),
    ("basic_arithmetic", dict(max_terms=3, max_digits=2, operators=["+", "-", "*"]), 120),
    ("gsm_symbolic", {}, 60),
])
def test_math_accuracy_agrees_with_the_reasoning_gym_checker(name, given, count):
    """On a few hundred generated problems, each with its gold answer and wrong and reformatted ones in
    <answer> tags: our verdict is the arithmetic truth on every answer, and reasoning-gym's checker
    (`score_answer` == 1) says the same except on two families where it is the one that errs."""
    dataset = rg.create_dataset(name, seed=11, size=count, **given)
    reward = build({"scorers": [{"scorer": "math_accuracy"}]})
    rows, cases = [], []
    for entry in dataset:
        for answer in _variants(entry["answer"]):
            completion = f"<think>working</think><answer>{answer}</answer>"
            rows.append({"prompt": entry["question"], "completion": completion, "answer": entry["answer"]})
            theirs = dataset.score_answer(extract_answer(completion), entry) == 1.0
            cases.append((entry["answer"], answer, theirs))
    ours = [v == 1.0 for v in reward.score(rows).values["math_accuracy"]]
    assert ours == [_equal(answer, gold) for gold, answer, _ in cases]
    families = Counter()
    for ok, (gold, answer, theirs) in zip(ours, cases):
        if ok == theirs:
            continue
        if ok and answer.strip() != gold:  # an equal value in another format: theirs compares strings
            families["reformatted"] += 1
        elif not ok and name == "gsm_symbolic" and answer == f"-{gold}":  # its number regex drops a leading "-"
            families["sign dropped"] += 1
        else:
            families[f"unexpected: {gold!r} vs {answer!r}"] += 1
    assert not [f for f in families if f.startswith("unexpected")], families
    agree = sum(o == t for o, (_, _, t) in zip(ours, cases))
    assert agree / len(cases) > 0.85  # the two families are a small share of the answers
    if name == "chain_sum":  # its checker strips commas and compares numbers: full agreement
        assert agree == len(cases)
