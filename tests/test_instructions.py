"""instruction_following: reference layouts, strict and loose modes, rewards, and None with a reason."""

from __future__ import annotations

import json

import pytest

from grpo_rewards.registry import get_registry
from grpo_rewards.scorer import Sample
from grpo_rewards.scorers.instructions import INSTRUCTION_TYPES, InstructionFollowing
from grpo_rewards.scorers.instructions.docs import instructions_table

IDS = ["punctuation:no_comma", "startend:end_checker", "length_constraints:number_words"]
KWARGS = [{}, {"end_phrase": "Any other questions?"}, {"num_words": 10, "relation": "less than"}]
GOOD = "All done here. Any other questions?"
ONE_WRONG = "All done, here. Any other questions?"


def score(completion, reference, **params):
    return InstructionFollowing(params)(Sample("Write.", completion, reference))


def ifeval_row(ids=IDS, kwargs=KWARGS):
    keys = {k for kw in kwargs for k in kw}
    return {"instruction_id_list": ids, "kwargs": [{**dict.fromkeys(keys), **kw} for kw in kwargs]}


def test_registered_as_a_builtin():
    assert get_registry().scorer("instruction_following") is InstructionFollowing


def test_ifeval_layout_with_none_for_unused_keys():
    assert score(GOOD, ifeval_row()).value == 1.0
    wrong = score(ONE_WRONG, ifeval_row())
    assert wrong.value == 0.0
    assert [v["followed"] for v in wrong.info["instructions"]] == [False, True, True]
    assert wrong.info["instructions"][0]["why"] == "1 commas"


@pytest.mark.parametrize("ground_truth", [
    json.dumps({"instruction_id": IDS, "kwargs": KWARGS}),
    str([json.dumps({"instruction_id": IDS, "kwargs": KWARGS})]),  # open-instruct: a list around a JSON string
    repr([{"instruction_id": IDS, "kwargs": KWARGS}]),
])
def test_open_instruct_ground_truth_layouts(ground_truth):
    assert score(GOOD, {"ground_truth": ground_truth}).value == 1.0
    assert score(ONE_WRONG, {"ground_truth": ground_truth}, reward="fraction").value == pytest.approx(2 / 3)


def test_fraction_reward_is_the_share_followed():
    assert score(ONE_WRONG, ifeval_row(), reward="fraction").value == pytest.approx(2 / 3)
    assert score("a, b, c, d, e, f, g, h, i, j, k", ifeval_row(), reward="fraction").value == 0.0


def test_loose_mode_forgives_an_intro_line_and_asterisks():
    row = ifeval_row(["startend:quotation", "detectable_format:json_format"], [{}, {}])
    quoted = 'Sure, here it is:\n"**text**"'
    assert score(quoted, ifeval_row(["startend:quotation"], [{}])).value == 0.0
    loose = score(quoted, ifeval_row(["startend:quotation"], [{}]), mode="loose")
    assert loose.value == 1.0 and loose.info["instructions"][0]["variant"] == "first line removed"
    assert score('Here:\n{"a": 1}\nBye', row, mode="loose", reward="fraction").value == 0.5


def test_only_the_text_after_the_reasoning_is_checked():
    row = ifeval_row(["punctuation:no_comma"], [{}])
    assert score("<think>a, b, c</think>No commas here", row).value == 1.0
    assert score("<think>a, b, c</think>No commas here", row, after_think=False).value == 0.0
    assert score("<think>still thinking", row).value == 0.0


@pytest.mark.parametrize(("reference", "reason"), [
    ({"instruction_id_list": ["punctuation:no_coma"], "kwargs": [{}]}, "did you mean 'punctuation:no_comma'"),
    ({"instruction_id_list": ["keywords:frequency"], "kwargs": [{"keyword": "x", "frequency": 2}]},
     "kwargs.relation: Field required"),
    ({"instruction_id_list": ["keywords:frequency"], "kwargs": [{"keyword": "x", "frequency": 2,
                                                                  "relation": "at most"}]}, "kwargs.relation"),
    ({"instruction_id_list": ["punctuation:no_comma"], "kwargs": [{"num_words": 3}]},
     "kwargs.num_words: Extra inputs are not permitted"),
    ({"instruction_id_list": ["keywords:letter_frequency"], "kwargs": [{"letter": "ab", "let_frequency": 2,
                                                                         "let_relation": "at least"}]},
     "kwargs.letter"),
    ({"instruction_id_list": ["language:response_language"], "kwargs": [{"language": "xx"}]}, "langdetect"),
    ({"instruction_id_list": ["length_constraints:nth_paragraph_first_word"],
      "kwargs": [{"num_paragraphs": 2, "nth_paragraph": 3, "first_word": "a"}]}, "past num_paragraphs"),
    ({"instruction_id_list": ["punctuation:no_comma", "startend:quotation"], "kwargs": [{}]}, "list of 2 dicts"),
    ({"instruction_id_list": []}, "not a non-empty list"),
    ({"answer": "4"}, "neither `instruction_id_list`"),
    ({"ground_truth": "not json ["}, "neither JSON nor a Python literal"),
    ({"ground_truth": json.dumps({"func_name": "validate_lowercase"})}, "holds no"),
])
def test_what_cannot_be_checked_is_none_with_the_reason(reference, reason):
    result = score("anything", reference)
    assert result.value is None
    assert reason in result.info["reason"]


def test_an_empty_response_follows_nothing():
    row = ifeval_row(["punctuation:no_comma", "change_case:english_lowercase"], [{}, {}])
    for text in ("", "   \n "):
        result = score(text, row, mode="loose", reward="fraction")
        assert result.value == 0.0 and result.info["instructions"][0]["why"] == "empty response"


def test_docs_table_lists_every_instruction_with_its_kwargs():
    table = instructions_table()
    for kind in INSTRUCTION_TYPES.values():
        assert f"`{kind.id}`" in table
        for name in kind.kwargs.model_fields:
            assert f"`{name}`" in table


def test_capital_words_skip_only_sentences_without_one():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from grpo_rewards.scorers.instructions import nlp

    def full(text):
        return sum(token.isupper() for token in nlp.word_tokens(text))

    tricky = ["DOn't go", "'Tis the SEASON", "CANnot", "GIMme that", "Ⓐbc", "ǅemal", "ᵃB x", "The U.S. is BIG",
              "wanna WANna", "I", "A-OK", "e.g. (THE)", "iPhone IOS x", "NASA's", '"HELLO" she said.']
    assert [nlp.count_capital_words(t) for t in tricky] == [full(t) for t in tricky]

    @settings(max_examples=300, deadline=None)
    @given(st.text(alphabet="aAbBtTnNsS'. \"-,Ⓐǅᵃ", max_size=40))
    def agrees(text):
        assert nlp.count_capital_words(text) == full(text)

    agrees()


def test_a_missing_library_is_named_with_the_extra_to_install(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "langdetect_rs" else real(name, *a))
    with pytest.raises(ImportError, match=r"langdetect_rs: pip install 'grpo-rewards\[ifeval\]'"):
        InstructionFollowing()
