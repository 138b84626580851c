"""grpo_rewards.connectives.OR_WORDS is what CLDR's "or" list patterns say, read with babel."""

from __future__ import annotations

import pytest

from grpo_rewards.connectives import NOT_CONNECTIVES, OR_WORDS, cldr_or_words


@pytest.mark.timeout(120)
def test_or_words_match_cldr():
    pytest.importorskip("babel")
    assert OR_WORDS == cldr_or_words()


def test_or_words_cover_the_scripts_and_leave_out_english_words():
    assert {"or", "oder", "ou", "или", "或", "또는", "أو", "या"} <= set(OR_WORDS)
    assert not NOT_CONNECTIVES & set(OR_WORDS)
