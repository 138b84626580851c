"""grpo_rewards.answer: normalisation, the head and its alternatives, restatements (no workers)."""

from __future__ import annotations

import time
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_rewards import answer
from grpo_rewards.answer import choice_letter, normalise, question_numbers, read, restates


@pytest.mark.parametrize(("text", "expected"), [
    ("5\\,\\text{cm}", "5 cm"), ("12\\,000", "12000"), ("12{,}000", "12000"), ("12,000", "12000"),
    ("12,\\!000", "12000"), ("12\u2009000", "12000"), ("\\$18.50", "18.50"), ("30^\\circ", "30"), ("30°", "30"),
    ("25\\%", "25"), ("\\dfrac{3}{4}", "\\frac{3}{4}"), ("\\left(2\\right)^{10}", "(2)^{10}"), ("(2,12)", "(2,12)"),
    ("0,111", "0,111"), ("$\\boxed{7}$", "7"),
])
def test_normalise(text, expected):
    assert normalise(text) == expected


# Pieces of every kind `normalise` removes, and plain ones, so that generated texts mix both.
_PIECES = ["5", "12", "000", ",", ".", " ", "\n", "x", "cm", "\\", "\\,", "{", "}", "$", "%", "\\%", "^", "\\circ",
           "°", "~", "*", "**", "_", "__", "`", "\u2009", "\u00a0", "\x01", "\\text{", "\\left(", "\\right)", "\\dfrac",
           "€", "\\$", "(", ")", "-", "/", "or"]


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=14))
def test_normalise_skips_only_texts_it_would_leave_alone(pieces):
    """The full pass runs only where a presentation character is present: on every other text it
    changes nothing but whitespace and spaced thousands, so both roads give the same result."""
    text = "".join(pieces)
    assert normalise(text) == answer._normalise_spacing(answer._without_presentation(text))


@pytest.mark.parametrize("text", [
    "5, not 6", "$5$, which is less than 6", "5 rather than 6", "5 cm", "5\\,\\text{cm}", "5 (not 6)",
])
def test_remarks_after_a_complete_answer_are_not_alternatives(text):
    reading = read(text, numeric_gold=True)
    assert (reading.head, reading.alternatives) == ("5", [])


def test_the_issues_remarks():
    assert read("12 apples, 3 more than Anna's 9", numeric_gold=True).candidates == ["12"]
    assert read("150 minutes, i.e. 2.5 hours", numeric_gold=True).candidates == ["150"]
    assert read("B) 5", letter_gold=True).candidates == ["B"]
    assert choice_letter("\\textbf{(B)}") == "B"


@pytest.mark.parametrize(("head", "sides"), [
    ("x = 5+5+1 = 7 = 11", ["11"]),  # earlier sides are working; the last exact side is the answer
    ("2 + 3 = 5", ["5"]),
    ("2\\sqrt{2} \\approx 2.83", ["2\\sqrt{2}", answer.Rounded("2.83", 2)]),
    ("\\frac{70}{9} = 7.777 \\approx 8", ["7.777", answer.Rounded("8", 0)]),
    ("5 ≈ 6", ["5", answer.Rounded("6", 0)]),
    ("\\pi \\approx \\frac{22}{7}", ["\\pi", answer.Rounded("\\frac{22}{7}", None)]),
    ("x = 5", []), ("5", []), ("a \\le 5", []), ("\\lim_{x \\to 0} \\frac{1}{x+1} = 1", []),
])
def test_what_a_chain_of_relations_answers(head, sides):
    assert answer.relation_sides(head) == sides


@pytest.mark.parametrize(("text", "offered"), [
    ("5 (6 if we count zero)", ["6"]), ("5, but 6 if we count zero", ["6"]), ("5 unless it is 6", ["6"]),
    ("5; if we count zero, 6", ["6"]), ("5; if we count zero then 6", ["6"]), ("5, except when it's 6", ["6"]),
    ("5; if we count zero, it would be 6", ["6"]), ("5 if n is even and 6 if n is odd", ["6"]),
    # values inside a condition, or of another quantity, are remarks
    ("5 apples, when each box holds 6", []), ("5, because if you add 3 and 2 you get 5", []),
    ("12, since if each box holds 6 then 2 boxes hold 12", []), ("5 apples, unless Anna eats 2", []),
    ("12; if she had bought 3 more, she would have 15", []), ("5 in general, assuming nothing else changes", []),
])
def test_a_value_offered_for_a_case_is_an_alternative(text, offered):
    assert read(text, numeric_gold=True).alternatives == offered


def test_a_value_given_as_the_head_rounded_is_not_an_alternative():
    reading = read("\\frac{70}{9}, approximately 7.78", numeric_gold=False)
    assert (reading.alternatives, reading.rounded) == ([], [answer.Rounded("7.78", 2)])
    assert read("5 (about 6)", numeric_gold=True).sides == ["5", answer.Rounded("6", 0)]
    assert read("the largest n is 34", numeric_gold=True).head == "34"  # a name given the value
    assert read("12 000 apples", numeric_gold=True).head == "12000"  # spaces between thousands


@pytest.mark.parametrize("join", ["or", "oder", "ou", "或", "или", "maybe", ";", "|", "\\lor", "\\vee", ",", "and",
                                  "\\quad", "\\text{ or }", "\\\\"])
@pytest.mark.parametrize("first", [True, False])
def test_alternatives_by_any_connective_in_either_position(join, first):
    a, b = ("5", "6") if first else ("6", "5")
    assert set(read(f"{a} {join} {b}", numeric_gold=True).candidates) == {"5", "6"}


def test_values_beside_a_box():
    assert read("5", before="Thus 6 or ", after=" cm.").candidates == ["5", "6"]
    assert read("5", after=" or 6.").candidates == ["5", "6"]
    assert read("9", after=" \\pmod{11}.").candidates == ["9"]


def test_restatements_read_the_question_in_digits_and_words():
    numbers = question_numbers("Compute seventeen times twenty-three, or 12,000 / 4.")
    assert {Fraction(17), Fraction(23), Fraction(12000), Fraction(4)} <= numbers
    for head in ["17 \\times 23", "{17}\\times{23}", "\\left(17\\right) \\cdot 23", "17 \\times 23 \\times 1",
                 "1 \\cdot 17 \\times 23 + 0", "(17)^{1} \\times 23", "x = 17 \\times 23", "12000/4"]:
        assert restates(head, numbers), head
    for head in ["391", "\\frac{17}{23}", "2 \\times 17 \\times 23", "3000", "-391"]:
        assert not restates(head, numbers), head


def test_identities_that_hand_back_a_question_number_restate_it():
    numbers = question_numbers("What is 0 + 2?")
    for head in ["0+2", "2 \\times 1", "2^{1}", "1 \\cdot 2", "2 + 0", "x = 0 + 2"]:
        assert restates(head, numbers), head
    for head in ["2", "x = 2", "2.0"]:
        assert not restates(head, numbers), head


@pytest.mark.timeout(30)
@pytest.mark.parametrize("text", ["\\boxed{" * 2000 + "5" + "}" * 2000, "(" * 4000, "5 or " * 1000, "5, " * 2000,
                                  "\\text{" * 1000, "a b " * 1000])
def test_reading_stays_linear(text):
    start = time.process_time()
    read(text * 25, numeric_gold=True)  # cut to the region limit first
    assert time.process_time() - start < 1.0
