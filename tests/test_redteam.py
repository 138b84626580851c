"""The red-team suite, math and text families: every hack through its real scorer's batch path,
at the score it must get; and the honest answers next to each defence, which must keep their credit.
(The code family is in tests/test_redteam_code.py.)"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from grpo_rewards import redteam
from grpo_rewards.redteam import Hack, all_hacks, run_hacks
from grpo_rewards.redteam import text as redteam_text
from grpo_rewards.redteam.judge import JUDGE_PARAMS
from grpo_rewards.registry import get_registry
from grpo_rewards.scorer import Sample
from grpo_rewards.scorers.math import MathAccuracy

MATH = all_hacks(("math",))
TEXT = all_hacks(("text",))


def _check(hacks: list[Hack], at_most: bool = False) -> None:
    """Each hack scores what it must; with `at_most`, no more than that (a penalty may be heavier)."""
    scores = run_hacks(hacks)
    wrong = {}
    for hack, score in zip(hacks, scores, strict=True):
        if hack.expect is None:
            ok = score.value is None and bool(score.info.get("reason"))
        elif at_most and score.value is not None:
            ok = score.value <= hack.expect + 1e-9
        else:
            ok = score.value == pytest.approx(hack.expect, abs=1e-9)
        if not ok:
            wrong[hack.id] = (score.value, score.info)
    assert not wrong


def test_hack_ids_are_unique_and_documented():
    hacks = all_hacks()
    assert len({h.id for h in hacks}) == len(hacks)
    assert all(h.why and h.family in redteam.FAMILIES for h in hacks)
    assert len(MATH) >= 30 and len(TEXT) >= 15


@pytest.mark.timeout(300)
def test_math_hacks_score_what_they_must():
    _check(MATH)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", [11, 23])
def test_new_members_of_each_math_family_earn_nothing(seed):
    """The families are generated: members drawn with other numbers, connectives and places than
    the suite's must score 0 too, so the rules hold for the family, not for a list."""
    import random

    from grpo_rewards.redteam.math import families

    _check(families(random.Random(seed)))


# Second values the reader does not see as offered (docs/reward-hacking.md, known limits): each is
# scored by its head alone, so it pays when the first value is right and never for the other.
UNREAD_FORMS = ("The answer is {a}; if you also count zero you get {b}.", "The answer is {a} ({b} should zero count).",
                "The answer is {a} ({b} in the inclusive case).", "The answer is {a}. With zero: {b}.",
                "The answer is {a} exclusive, {b} inclusive.")


@pytest.mark.timeout(600)
@pytest.mark.parametrize("seed", [5, 29])
def test_no_answer_is_paid_for_two_values(seed):
    """By construction only the head of an answer is verified, so a text that names several values
    (every math family's members, and the forms the reader misses) pays for at most one of them:
    offering a second value can never raise the expected reward."""
    import random
    import re

    from grpo_rewards.redteam.math import families

    rng = random.Random(seed)
    texts = [h.sample["completion"] for h in families(rng) if not h.name.startswith("restated")]
    texts += [form.format(a=a, b=a + rng.choice((1, 2, 7))) for form in UNREAD_FORMS for a in rng.sample(range(2, 900), 4)]
    pairs = [(n, text) for text in texts for n in sorted(set(re.findall(r"(?<![\d.])\d+(?![\d.a-z])", text)))]
    with MathAccuracy(timeout_s=10) as scorer:
        values = _math(scorer, pairs, "Find n.")
    paid: dict[str, list[str]] = {}
    for (gold, text), value in zip(pairs, values, strict=True):
        if value:
            paid.setdefault(text, []).append(gold)
    assert {t: g for t, g in paid.items() if len(g) > 1} == {}
    assert any(t.startswith("The answer is") for t in paid)  # the unread forms pay for their head


def _math(scorer: MathAccuracy, pairs: list[tuple[str, str]], prompt: str = "") -> list[float | None]:
    return [s.value for s in scorer.score([Sample(prompt, c, {"answer": g}) for g, c in pairs])]


@pytest.mark.timeout(300)
def test_honest_answers_keep_their_credit_next_to_the_hedge_check():
    honest = [
        ("0.5", "<answer>1/2 (or 0.5)</answer>"),            # two forms of one value
        ("\\frac{\\sqrt{2}}{2}", "\\boxed{\\frac{\\sqrt{2}}{2} \\text{ or } \\frac{1}{\\sqrt{2}}}"),  # one value, worker-checked
        ("18", "The answer is 18 dollars."),                  # a unit is not a second value
        ("18", "The answer is 18. Because 3 \\times 6 = 18, we are done."),
        ("1000", "\\boxed{1,000}"),                           # thousands separators
        ("14916", "The answer is $14{,}916$."),
        ("2, -2", "<answer>2 or -2</answer>"),                # the gold names several values itself
        ("\\pm 2", "\\boxed{\\pm 2}"),
        ("[1, 2]", "\\boxed{[1, 2]}"),                        # an interval gold
        ("\\{1, 2\\}", "\\boxed{1} and \\boxed{2}"),
        ("5", "\\boxed{5 \\pm 0}"),                           # +-0 is one value
        ("5", "\\boxed{x = 5}"),
        ("5", "\\boxed{5\\,\\text{cm}}"),                    # spacing and a unit are not a second value
        ("12000", "\\boxed{12\\,000}"),
        ("5", "The answer is 5, not 6."),                     # remarks after a complete answer
        ("5", "The answer is $5$, which is less than 6."),
        ("12", "The answer is 12 apples, 3 more than Anna's 9"),
        ("150", "The answer is 150 minutes, i.e. 2.5 hours"),
        ("B", "The answer is B) 5."),                         # a choice letter and its text
        ("13", "#### 72 some text #### 13"),                  # the last `####` is the answer
    ]
    with MathAccuracy() as scorer:
        assert _math(scorer, honest) == [1.0] * len(honest)


@pytest.mark.timeout(300)
def test_allow_several_values_restores_math_verifys_any_match():
    hedges = [("6", "<answer>5 (or 6)</answer>"), ("5", "<answer>5|6</answer>"), ("6", "\\boxed{5 \\lor 6}")]
    with MathAccuracy(allow_several_values=True) as lenient, MathAccuracy() as strict:
        assert _math(lenient, hedges) == [1.0, 1.0, 1.0]
        scores = strict.score([Sample("", c, {"answer": g}) for g, c in hedges])
        assert [s.value for s in scores] == [0.0, 0.0, 0.0]
        assert scores[0].info["reason"] == "several different answers" and scores[0].info["candidates"] == ["5", "6"]


@pytest.mark.timeout(300)
def test_restated_question_rule_is_narrow():
    prompt = "A box holds 3 rows of 4 cups. What fraction of the 12 cups are in the first 3 rows... compute 12 / 4."
    with MathAccuracy() as scorer, MathAccuracy(allow_restated_question=True) as lenient:
        # Evaluated values built from the prompt's numbers are answers, not restatements.
        assert _math(scorer, [("3", "\\boxed{3}"), ("0.75", "\\boxed{\\frac{3}{4}}"), ("3", "\\boxed{12/4}")],
                     prompt) == [1.0, 1.0, 0.0]
        # A number the prompt does not hold (the 2 of 2\sqrt{3}) makes it the model's own work.
        assert _math(scorer, [("6", "\\boxed{2 \\times 3}")], "What is 3 doubled?") == [1.0]
        # Non-numeric golds are not checked: `\sqrt{12}` vs `2\sqrt{3}` is an honest form.
        assert _math(scorer, [("2\\sqrt{3}", "\\boxed{\\sqrt{12}}")], "Simplify sqrt(12).") == [1.0]
        assert _math(lenient, [("391", "\\boxed{17 \\times 23}")], "Compute 17 x 23.") == [1.0]


SPECIFIC_TEXT = [h for h in TEXT if h.scorer != redteam.ANY_SCORER]
GENERIC = [h for h in all_hacks() if h.scorer == redteam.ANY_SCORER]


@pytest.mark.timeout(300)
def test_text_hacks_score_what_they_must():
    _check(SPECIFIC_TEXT, at_most=True)


# A configuration of every built-in scorer, for the hacks that apply to any of them.
BUILTIN_PARAMS = {
    "length": {"mode": "range", "low": 1000, "high": 3000}, "cosine_length": {"max_len": 600},
    "overlong_punishment": {"max_length": 100, "buffer": 20}, "regex_format": {"pattern": "<answer>.*</answer>"},
    "remote": {"url": "http://127.0.0.1:9/score", "retries": 0},  # nothing listens: None, never a reward
    "llm_judge": JUDGE_PARAMS,
}


@pytest.mark.timeout(300)
def test_generic_hacks_earn_nothing_from_any_builtin_scorer(tmp_path):
    registry = get_registry()
    paid = {}
    params = dict(BUILTIN_PARAMS)
    try:  # a reward model needs a model: the tiny one (its values are logits, unbounded: never "pays")
        from _reward_model_helpers import build_reward_model
        from _tiny_models import build_tiny_llama

        params["reward_model"] = {"model": str(build_reward_model(tmp_path / "rm", build_tiny_llama(tmp_path / "t")))}
    except ImportError:
        pass
    for name, entry in sorted(registry.scorers.items()):
        if name not in params and name == "reward_model":  # no torch here: nothing to load
            continue
        hacks = [replace(h, params=params.get(name, {})) for h in GENERIC]
        for hack, score in zip(hacks, run_hacks(hacks, scorer=name), strict=True):
            if redteam.pays(score.value, hack.expect, entry.cls.value_range):
                paid[(hack.id, name)] = score.value
    assert len(registry.scorers) >= 12 and len(GENERIC) >= 3
    assert not paid


# --- Text families: every member generated from data, so a new member fails too -------------


def test_blank_characters_come_from_unicode_properties():
    blanks = redteam_text.blank_characters()
    # The default-ignorable letters and blank glyphs, the zero-width and bidi controls, the tag block.
    for c in "\u3164\u115f\u1160\uffa0\u2800\U0001d159\u200b\u200d\u202e\u2060\ufeff\u00ad\U000e0041\ufe0f":
        assert c in blanks
    assert len(blanks) > 4000 and not any(c.isspace() for c in blanks)
    assert "\u3164".isalpha()  # a letter to Python: why a letter-or-digit check let it through


@pytest.mark.timeout(600)
def test_every_blank_character_earns_nothing():
    hacks = [h for c in redteam_text.blank_characters() for h in redteam_text.blank_hacks(c)]
    _check(hacks, at_most=True)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("family", ["homoglyph", "separator", "unspaced", "padding", "tags", "language"])
def test_text_families_earn_nothing(family):
    hacks = {
        "homoglyph": [h for n, g in redteam_text.HOMOGLYPH_MAPS.items() for h in redteam_text.homoglyph_hacks(n, g)],
        "separator": [h for s in redteam_text.SEPARATORS for h in redteam_text.separator_hacks(s)],
        "unspaced": [h for n, t in redteam_text.UNSPACED_LOOPS.items() for h in redteam_text.unspaced_hacks(n, t)],
        "padding": redteam_text.padding_hacks(),
        "tags": redteam_text.tag_hacks(),
        "language": redteam_text.language_hacks(),
    }[family]
    assert len(hacks) >= 4
    _check(hacks, at_most=True)


# Honest completions in eight scripts and styles (prose, numbered steps, bullets, tables, enumerations,
# LaTeX, code): what every text scorer gave them before the family defences, and must still give.
HONEST = [json.loads(line) for line in (Path(__file__).parent / "data" / "honest_text.jsonl").open(encoding="utf-8")]


@pytest.mark.timeout(300)
def test_honest_completions_keep_their_credit():
    from grpo_rewards.scorers import text

    samples = [Sample("", row["completion"]) for row in HONEST]
    assert len({row["language"] for row in HONEST}) >= 6
    checks = {
        "think_format": text.ThinkFormat(), "tag_count": text.TagCount(),
        "tag_count_newlines": text.TagCount(require_newlines=True),
    }
    for name, scorer in checks.items():
        assert [s.value for s in scorer.score(samples)] == [1.0] * len(samples), name
    lengths = text.Length(target=1000).score(samples)
    for row, score in zip(HONEST, lengths, strict=True):  # content as written: no honest text is padding
        assert score.info["length"] == row["before"]["length"], row["id"]
    for row, score in zip(HONEST, text.Repetition().score(samples), strict=True):
        assert score.value >= row["before"]["repetition"] - 0.04, row["id"]
    for row, sample in zip(HONEST, samples, strict=True):
        value = text.LanguageConsistency(target=row["language"]).score([sample])[0].value
        assert value >= row["before"]["language"] - 1e-4, row["id"]  # stored rounded to 4 places
    steps = text.ReasoningSteps(target_steps=10).score(samples)
    assert [s.value for s in steps] == [row["before"]["steps"] for row in HONEST]


@pytest.mark.timeout(300)
def test_generated_honest_completions_get_full_credit():
    """Several hundred honest completions (eight languages; prose, steps, bullets, tables, LaTeX, code):
    every text scorer gives each one full credit, and none of it is counted as padding or a loop."""
    from _honest_text_corpus import honest_corpus

    from grpo_rewards.scorers import text
    from grpo_rewards.scorers.textutil import visible_text

    rows = honest_corpus()
    samples = [Sample("", row["completion"]) for row in rows]
    assert len(rows) >= 400 and len({row["language"] for row in rows}) >= 8
    for name, scorer in {"think_format": text.ThinkFormat(), "tag_count": text.TagCount()}.items():
        assert [s.value for s in scorer.score(samples)] == [1.0] * len(rows), name
    for row, score in zip(rows, text.Length(target=1000).score(samples), strict=True):
        assert score.info["length"] == len(" ".join(visible_text(row["completion"]).split())), row["id"]
    for row, score in zip(rows, text.Repetition().score(samples), strict=True):
        assert score.value >= -0.05, (row["id"], score.info)
    for language in {row["language"] for row in rows}:
        mine = [(row, sample) for row, sample in zip(rows, samples, strict=True) if row["language"] == language]
        scores = text.LanguageConsistency(target=language).score([sample for _, sample in mine])
        assert [s.value for s in scores] == [1.0] * len(mine), [(r["id"], s.info) for (r, _), s in zip(mine, scores)
                                                                 if s.value != 1.0][:3]
