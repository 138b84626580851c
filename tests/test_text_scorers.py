"""Behaviour of the built-in text scorers (values and the `info` that explains them)."""

from __future__ import annotations

import json
import math

import pytest

from _text_helpers import build_tokenizer
from grpo_rewards.compose import build
from grpo_rewards.errors import ConfigError
from grpo_rewards.registry import get_registry
from grpo_rewards.scorer import Sample, Score
from grpo_rewards.scorers.format import ReasoningSteps, RegexFormat, TagCount, ThinkFormat
from grpo_rewards.scorers.json_schema import JsonSchema
from grpo_rewards.scorers.language import LanguageConsistency
from grpo_rewards.scorers.length import CosineLength, Length, OverlongPunishment
from grpo_rewards.scorers.repetition import Repetition
from grpo_rewards.scorers.text import TEXT_SCORERS


def one(scorer, completion, prompt="", **reference) -> Score:
    return scorer.score([Sample(prompt, completion, reference)])[0]


def test_every_text_scorer_is_registered_with_documented_params():
    registry = get_registry()
    for cls in TEXT_SCORERS:
        assert registry.scorer(cls.name) is cls
        assert cls.description()
        for name, field in cls.Params.model_fields.items():
            assert field.description, f"{cls.name}.{name} has no description"


# --- think_format --------------------------------------------------------------------------


@pytest.mark.parametrize("completion,value,problem", [
    ("<think>plan</think><answer>4</answer>", 1.0, None),
    ("<think>plan</think>\n\n<answer>4</answer>\n", 1.0, None),
    ("<think>plan</think>4", 0.0, "missing <answer>"),
    ("<think>plan</think>so <answer>4</answer>", 0.0, "text between the reasoning block and <answer>"),
    ("<think>plan</think><answer>4</answer> done", 0.0, "text after </answer>"),
    ("<think>plan</think><answer>4</answer><answer>5</answer>", 0.0, "<answer> or </answer> repeated"),
    ("plan</think><answer>4</answer>", 0.0, "missing <think>"),
    ("Sure. <think>plan</think><answer>4</answer>", 0.0, "text before <think>"),
    ("<think>plan<think>more</think><answer>4</answer>", 0.0, "<think> repeated"),
    ("<think>plan</think>x</think><answer>4</answer>", 0.0, "</think> repeated"),
    ("<think>plan and no end", 0.0, "missing </think>"),
])
def test_think_format_default_template(completion, value, problem):
    score = one(ThinkFormat(), completion)
    assert score.value == value
    assert score.info.get("problem") == problem


def test_think_format_prompt_opened_think_auto_and_explicit():
    scorer = ThinkFormat()
    continuation = "step one</think><answer>4</answer>"
    assert one(scorer, continuation, prompt="<|assistant|>\n<think>\n").value == 1.0
    assert one(scorer, continuation, prompt="<|assistant|>\n").info["problem"] == "missing <think>"
    repeated = one(scorer, "<think>x</think><answer>4</answer>", prompt="... <think>")
    assert repeated.value == 0.0 and "already opened" in repeated.info["problem"]
    assert one(ThinkFormat(prompt_opens_think=True), continuation).value == 1.0
    chat_prompt = [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "<think>"}]
    assert one(scorer, continuation, prompt=chat_prompt).info["prompt_opened_think"] is True


def test_think_format_lenient_whitespace_tags_and_content():
    text = "\n  <THINK>plan</Think>\n<Answer>4</answer>"
    assert one(ThinkFormat(), text).value == 0.0
    assert one(ThinkFormat(whitespace="lenient"), text).value == 1.0
    assert one(ThinkFormat(require_content=True), "<think> </think><answer>4</answer>").info["problem"] == \
        "empty <think> block"
    custom = ThinkFormat(think_tag="reasoning", answer_tag="final")
    assert one(custom, "<reasoning>r</reasoning><final>f</final>").value == 1.0
    assert one(ThinkFormat(answer_tag=None), "<think>r</think> anything").value == 1.0


# --- tag_count -----------------------------------------------------------------------------


def test_tag_count_partial_credit_repeats_and_nesting():
    scorer = TagCount()
    assert one(scorer, "<think>a</think><answer>b</answer>").value == 1.0
    assert one(scorer, "<think>a</think> b").value == 0.5
    assert one(scorer, "</think>a<think>").value == 0.25  # the close comes before the open: not credited
    # Repeating a tag earns nothing and costs one marker's credit per extra copy.
    repeated = one(scorer, "<think>a</think><think>b</think><answer>c</answer>")
    assert repeated.value == pytest.approx((2 - 2) / 4) and repeated.info["offenses"] == 2
    spam = one(scorer, "<think>" * 20)
    assert spam.value == -1.0
    assert one(TagCount(penalty=0.0), "<think>" * 20).value == 0.0
    nested = one(scorer, "<think>a<answer>b</answer></think>")
    assert nested.value == pytest.approx((4 - 2 - 1) / 4) and nested.info["tags"]["answer"]["nested"]


def test_tag_count_newlines_mode_is_open_r1s_layout():
    scorer = TagCount(require_newlines=True)
    assert one(scorer, "<think>\nplan\n</think>\n<answer>\n4\n</answer>").value == 1.0
    assert one(scorer, "<think>plan</think><answer>4</answer>").value == 0.0


# --- regex_format --------------------------------------------------------------------------


def test_regex_format_modes_flags_and_timeout():
    full = RegexFormat(pattern=r"<answer>\d+</answer>")
    assert one(full, "<answer>12</answer>").value == 1.0
    assert one(full, "x <answer>12</answer>").value == 0.0
    assert one(RegexFormat(pattern=r"\d+", mode="search"), "abc 7").info["match_span"] == [4, 5]
    counted = RegexFormat(pattern=r"\bstep\b", mode="count", target_count=4, flags=["ignorecase"])
    assert one(counted, "Step, step, STEP").value == 0.75
    assert one(RegexFormat(pattern="a+", strip=True), "  aaa \n").value == 1.0
    slow = RegexFormat(pattern=r"(a|aa)+$", mode="search", timeout_s=0.05)  # catastrophic backtracking
    score = one(slow, "a" * 40 + "b")
    assert score.value is None and "timed out" in score.info["reason"]


def test_regex_format_bad_pattern_is_a_spec_error():
    with pytest.raises(ConfigError, match=r"scorers\[0\]\.params\.pattern.*invalid regular expression"):
        build({"scorers": [{"scorer": "regex_format", "params": {"pattern": "(unclosed"}}]})


# --- length --------------------------------------------------------------------------------


def test_length_modes():
    target = Length(target=10, tolerance=2, falloff=4)
    assert [one(target, "x" * n).value for n in (10, 12, 14, 16, 30)] == [1.0, 1.0, 0.5, 0.0, 0.0]
    ramp = Length(mode="ramp", low=10, high=20)
    assert [one(ramp, "x" * n).value for n in (0, 15, 25)] == [0.0, 0.5, 1.0]
    assert one(Length(mode="ramp", low=10, high=20, reverse=True), "x" * 12).value == pytest.approx(0.8)
    window = Length(mode="range", low=5, high=8)
    assert [one(window, "x" * n).value for n in (4, 5, 8, 9)] == [0.0, 1.0, 1.0, 0.0]
    soft = Length(mode="range", low=5, high=8, falloff=2)
    assert one(soft, "x" * 9).value == 0.5 and one(soft, "x" * 9).info == {"length": 9, "unit": "chars"}


def test_length_params_are_checked_per_mode():
    for params, message in [({}, "needs 'target'"), ({"mode": "range", "low": 3}, "needs 'low' and 'high'"),
                            ({"mode": "ramp", "low": 5, "high": 5}, "must be below")]:
        with pytest.raises(ConfigError, match=message):
            build({"scorers": [{"scorer": "length", "params": params}]})


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    return str(build_tokenizer(tmp_path_factory.mktemp("bpe")))


def test_length_in_tokens_from_tokenizer_or_completion_ids(tokenizer_dir):
    from transformers import AutoTokenizer

    text = "the answer is 42, the answer is 42"
    n_tokens = len(AutoTokenizer.from_pretrained(tokenizer_dir)(text, add_special_tokens=False)["input_ids"])
    assert n_tokens != len(text)
    by_tokenizer = one(Length(target=n_tokens, tokenizer=tokenizer_dir), text)
    assert by_tokenizer.value == 1.0 and by_tokenizer.info["token_source"] == "tokenizer"
    by_ids = one(Length(target=3, unit="tokens"), text, completion_ids=[1, 2, 3])
    assert by_ids.value == 1.0 and by_ids.info["token_source"] == "completion_ids"
    missing = one(Length(target=3, unit="tokens"), text)
    assert missing.value is None and "no completion_ids" in missing.info["reason"]
    assert one(Length(target=1, tokenizer=tokenizer_dir), "\ud800").value is not None  # lone surrogate


# --- cosine_length -------------------------------------------------------------------------


def test_cosine_length_formula_and_none_propagation():
    scorer = CosineLength(correctness_from="math", max_len=100, unit="tokens")
    samples = [Sample("", "", {"completion_ids": [0] * n}) for n in (0, 50, 100, 300, 50, 10)]
    results = {"math": [Score(1.0), Score(1.0), Score(1.0), Score(0.0), Score(0.0), Score(None, {"reason": "x"})]}
    out = scorer.score(samples, results)
    assert [s.value for s in out[:5]] == pytest.approx([1.0, 0.75, 0.5, -0.5, -0.75])
    assert out[5].value is None and "is None" in out[5].info["reason"]
    assert out[1].info["correct"] is True and out[1].info["progress"] == 0.5
    standalone = scorer.score(samples[:2])
    assert all(s.value is None and "list cosine_length after it" in s.info["reason"] for s in standalone)
    assert CosineLength.dependencies(scorer.params) == ["math"]
    assert scorer.value_range == (-1.0, 1.0)


def test_cosine_length_reads_an_earlier_scorer_in_a_spec():
    spec = {"scorers": [
        {"scorer": "regex_format", "name": "correct", "params": {"pattern": "42", "mode": "search"}},
        {"scorer": "cosine_length", "params": {"correctness_from": "correct", "max_len": 40, "padding": "count"}},
    ]}
    batch = build(spec).score([{"completion": "42"}, {"completion": "41" + " " * 38}])
    assert batch.values["cosine_length"][0] == pytest.approx(0.5 + 0.25 * (1 + math.cos(math.pi * 2 / 40)))
    assert batch.values["cosine_length"][1] == pytest.approx(-0.5)
    misordered = {"scorers": list(reversed(spec["scorers"]))}
    with pytest.raises(ConfigError, match="must be listed before it"):
        build(misordered)


# --- overlong_punishment -------------------------------------------------------------------


def test_overlong_punishment_zones_and_penalty():
    scorer = OverlongPunishment(max_length=20, buffer=10, penalty=2.0)
    got = [one(scorer, "x" * n) for n in (10, 15, 20, 21)]
    assert [s.value for s in got] == [0.0, -1.0, -2.0, -2.0]
    assert [s.info["zone"] for s in got] == ["within limit", "soft buffer", "soft buffer", "over max_length"]
    with pytest.raises(ConfigError, match="must not exceed"):
        build({"scorers": [{"scorer": "overlong_punishment", "params": {"max_length": 5, "buffer": 6}}]})
    with pytest.raises(ConfigError, match="max_length"):
        build({"scorers": [{"scorer": "overlong_punishment", "params": {"buffer": 6}}]})


# --- repetition ----------------------------------------------------------------------------


def test_repetition_words_and_ids():
    scorer = Repetition()
    assert one(scorer, "a b c d e f").value == 0.0
    loop = one(scorer, "go go go go go go")  # 4 trigrams, 1 unique
    assert loop.value == pytest.approx(-0.75) and loop.info["unit"] == "words"
    assert one(scorer, "Go go GO go") == one(scorer, "go go go go")
    assert one(Repetition(lowercase=False), "Go go GO go").value == 0.0
    by_ids = one(scorer, "a b c d", completion_ids=[5, 5, 5, 5, 5])  # auto: the ids win when present
    assert by_ids.value == pytest.approx(-2 / 3) and by_ids.info["unit"] == "completion_ids"
    assert one(Repetition(unit="words"), "a b c d", completion_ids=[5] * 5).value == 0.0
    assert one(Repetition(unit="tokens"), "a a a a").value is None
    assert one(scorer, "").value == 0.0 and one(scorer, "").info["ngrams"] == 0


# --- reasoning_steps -----------------------------------------------------------------------


def test_reasoning_steps_markers_cap_and_source():
    scorer = ReasoningSteps()
    text = "Step 1: read.\nStep 2: add.\n1. carry\n- note\nFirst, then. Finally, done."
    got = one(scorer, text)
    assert got.value == 1.0 and got.info["steps"] == 3  # stops at the cap
    assert one(ReasoningSteps(target_steps=10), text).info["steps"] == 6
    assert one(scorer, "just an answer").value == 0.0
    assert one(ReasoningSteps(patterns=[r"\bthen\b"], ignore_case=True), "Then add. then carry, THEN 4").value == 1.0
    # A marker is a step only when something visible follows it before the next marker.
    empty = one(scorer, "Step 1:\nStep 2: \u3164\nStep 3: ...\n- \n- compute 2 + 2")
    assert empty.value == pytest.approx(1 / 3) and empty.info["empty_markers"] == 4
    only_reasoning = ReasoningSteps(source="reasoning", target_steps=2)
    assert one(only_reasoning, "<think>Step 1: x</think>Step 2: y\nStep 3: z").value == 0.5


# --- language_consistency ------------------------------------------------------------------


def test_language_consistency_script_share():
    zh = LanguageConsistency(target="zh")
    by_letters = LanguageConsistency(target="zh", unit="letters", source="reasoning")
    mixed = one(by_letters, "<think>我们先计算 then add</think>answer")
    assert mixed.value == pytest.approx(5 / 12) and mixed.info["source"] == "think_block"
    # The whole completion by default: 5 characters, 3 words (`then`, `add`, `answer`); tags are markup.
    assert one(zh, "<think>我们先计算 then add</think>answer").value == pytest.approx(5 / 8)
    assert one(LanguageConsistency(), "<think>all english here</think>").value == 1.0
    assert one(LanguageConsistency(target="Cyrillic", unit="letters"), "Привет world").value == pytest.approx(6 / 11)
    assert one(LanguageConsistency(target="Cyrillic"), "Привет world").value == pytest.approx(1 / 2)
    # LaTeX and code are not prose: $\frac{x}{y}$ in Chinese reasoning does not count as English.
    assert one(zh, r"计算 $\frac{x}{y}$ 和 `print(x)`").value == 1.0
    assert one(LanguageConsistency(target="zh", ignore_math_and_code=False), r"计算 $x$").value < 1.0
    # ... but prose in another script is prose wherever it is written: in math, code or the answer block.
    for hidden in [r"$\text{我们先计算}$", "`我们先计算`", "```\n# 我们先计算\n```", "<answer>我们先计算</answer>"]:
        assert one(LanguageConsistency(), f"<think>we add</think>{hidden}").value == pytest.approx(2 / 7)
    empty = one(zh, "<think>12 + 3 = 15</think>")
    assert empty.value is None and "letters" in empty.info["reason"]


def test_language_consistency_langid_tells_apart_latin_languages():
    scorer = LanguageConsistency(target="en", method="langid")
    english = "This is a sentence written in English. It talks about numbers."
    french = "Ceci est une phrase écrite en français. Elle parle des nombres."
    assert one(scorer, english).value == 1.0
    assert one(scorer, french).value == 0.0
    assert one(LanguageConsistency(target="en"), french).value == 1.0  # the script method cannot tell
    with pytest.raises(ConfigError, match="unknown language or script"):
        build({"scorers": [{"scorer": "language_consistency", "params": {"target": "Klingon"}}]})
    with pytest.raises(ConfigError, match="needs a language code"):
        build({"scorers": [{"scorer": "language_consistency", "params": {"target": "Latin", "method": "langid"}}]})


# --- json_schema ---------------------------------------------------------------------------

SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}


def test_json_schema_sources_and_partial_credit():
    scorer = JsonSchema(json_schema=SCHEMA, invalid_credit=0.25)
    assert one(scorer, '{"answer": 4}').value == 1.0
    fenced = one(scorer, 'Here:\n```json\n{"answer": 4}\n```\nthanks')
    assert fenced.value == 1.0 and fenced.info["source"] == "fenced"
    tagged = one(scorer, '<think>{"x": 1}</think><answer>{"answer": 5}</answer>')
    assert tagged.value == 1.0 and tagged.info["source"] == "answer_block"
    assert one(scorer, '<think>hmm {"answer": "no"}</think> {"answer": 6}').info["source"] == "after_think"
    invalid = one(scorer, '{"answer": "four"}')
    assert invalid.value == 0.25 and "answer" in invalid.info["problem"]
    broken = one(scorer, '{"answer": 4')
    assert broken.value == 0.0 and broken.info["problem"].startswith("not JSON")
    assert one(JsonSchema(json_schema=SCHEMA, source="fenced"), '{"answer": 4}').info["problem"] == \
        "no JSON found (fenced)"
    assert one(scorer, "[" * 100_000).value == 0.0  # deep nesting is not a crash


def test_json_schema_per_sample_schema_and_errors():
    scorer = JsonSchema()
    assert one(scorer, "3", schema={"type": "integer"}).value == 1.0
    assert one(scorer, "3", schema=json.dumps({"type": "string"})).value == 0.0
    none = one(scorer, "3")
    assert none.value is None and "no schema" in none.info["reason"]
    bad = one(scorer, "3", schema={"type": "no-such-type"})
    assert bad.value is None and "invalid JSON Schema" in bad.info["reason"]
    with pytest.raises(ConfigError, match="invalid JSON Schema"):
        build({"scorers": [{"scorer": "json_schema", "params": {"json_schema": {"type": 5}}}]})
    formats = JsonSchema(json_schema={"type": "string", "format": "email"}, check_formats=True)
    assert one(formats, '"not an email"').value == 0.0
    assert one(JsonSchema(json_schema={"type": "string", "format": "email"}), '"not an email"').value == 1.0


def test_json_schema_unresolvable_ref_is_unscorable_not_an_error():
    # Found by the fuzz test: jsonschema raises on a `$ref` to nowhere while validating.
    reward = build({"scorers": [{"scorer": "json_schema", "params": {"json_schema": {"$ref": "#/nope"}}}]})
    batch = reward.score([Sample(completion='{"a": 1}')])
    assert batch.errors["json_schema"] == 0
    score = batch.scores["json_schema"][0]
    assert score.value is None and "unresolvable reference" in score.info["reason"]
