"""Language consistency (DeepSeek-R1): the share of a completion written in the target language.

What a reader reads is judged: by default the whole completion, and inside math, code and the answer
block every letter except ASCII notation.

Default method `script`: the share of distinct words written in the target's Unicode scripts,
by the `regex` module's script properties (C speed, no model, exact for language pairs with distinct
scripts such as English vs Chinese). Words rather than letters, and distinct ones: counted by
letters, an English word weighs five Chinese characters, and a Latin filler word repeated a hundred
times would outweigh the Chinese reasoning around it. Method `langid` tells apart languages that share a script
(English vs French) with py3langid, per sentence, at roughly 50x the cost.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import regex
from pydantic import Field, field_validator, model_validator

from grpo_rewards.patterns import LazyPattern
from grpo_rewards.scorer import ParamsModel, Sample, Score, Scorer
from grpo_rewards.scorers.textbatch import char_table, script_counts
from grpo_rewards.scorers.textutil import (
    CODE_SPANS, UNSPACED_SCRIPTS, completion_text, reasoning_text, visible_texts,
)

_LATIN = ("af ca cs cy da de en es et eu fi fr ga gl hr hu id is it lt lv ms mt nl no pl pt ro sk sl sq sv sw "
          "tl tr vi").split()
LANGUAGE_SCRIPTS: dict[str, tuple[str, ...]] = {
    **{code: ("Latin",) for code in _LATIN},
    "zh": ("Han",), "ja": ("Han", "Hiragana", "Katakana"), "ko": ("Hangul", "Han"),
    **{code: ("Cyrillic",) for code in ("ru", "uk", "bg", "sr", "mk", "be", "kk", "mn")},
    **{code: ("Arabic",) for code in ("ar", "fa", "ur", "ps")},
    **{code: ("Devanagari",) for code in ("hi", "mr", "ne")},
    "el": ("Greek",), "he": ("Hebrew",), "th": ("Thai",), "bn": ("Bengali",), "ta": ("Tamil",),
    "te": ("Telugu",), "ka": ("Georgian",), "hy": ("Armenian",), "am": ("Ethiopic",), "km": ("Khmer",),
}

_NON_LETTERS = LazyPattern(regex.compile, r"\P{L}+")
# Scripts written without spaces: each character is counted as a word.
_UNSPACED = "".join(rf"\p{{{script}}}" for script in UNSPACED_SCRIPTS)
# Math and code are written in ASCII letters whatever the language of the prose around them, so
# there those letters are neither target nor foreign; any other letter in them is prose and counts.
# Each alternative stops at its next delimiter, so the scan stays linear on any input.
_MATH = LazyPattern(regex.compile, r"\$\$[^$]*\$\$|\$[^$\n]*\$|\\\(.*?(?:\\\)|\Z)|\\\[.*?(?:\\\]|\Z)|\\[A-Za-z]+",
                                   regex.DOTALL)
_ASCII_LETTERS = LazyPattern(regex.compile, r"\\[A-Za-z]+|[A-Za-z]+")
# Markup is not language; an answer block is notation (a number, a unit, a choice letter) like math.
_TAG = LazyPattern(regex.compile, r"</?[A-Za-z_][\w:.-]{0,63}>")
_ANSWER_BLOCK = LazyPattern(regex.compile, r"<answer>.*?(?:</answer>|\Z)", regex.DOTALL)
_SENTENCE_END = LazyPattern(regex.compile, r"[.!?。！？\n]+")


def _without_ascii_letters(match: regex.Match) -> str:
    return " " + _ASCII_LETTERS.sub(" ", match.group()) + " "


@functools.lru_cache(maxsize=64)
def _not_in_scripts(scripts: tuple[str, ...]) -> regex.Pattern:
    return regex.compile("[^" + "".join(rf"\p{{Script={s}}}" for s in scripts) + "]+")


def scripts_of(target: str) -> tuple[str, ...]:
    """The Unicode scripts of a language code, or the script named by `target` itself."""
    if target.lower() in LANGUAGE_SCRIPTS:
        return LANGUAGE_SCRIPTS[target.lower()]
    try:
        _not_in_scripts((target,))
    except regex.error:
        raise ValueError(f"unknown language or script {target!r}: use a language code "
                         f"({', '.join(sorted(LANGUAGE_SCRIPTS)[:8])}, ...) or a Unicode script name "
                         "(Latin, Han, Cyrillic, ...)") from None
    return (target,)


class LanguageConsistencyParams(ParamsModel):
    target: str = Field("en", min_length=2, max_length=40,
                        description="Target language code (`en`, `zh`, `ja`, ...) or Unicode script name "
                        "(`Latin`, `Han`, ...).")
    method: Literal["script", "langid"] = Field(
        "script", description="`script`: share of letters in the target's scripts; `langid`: share of letters "
        "in sentences that py3langid identifies as the target language (needs a language code).")
    source: Literal["reasoning", "completion"] = Field(
        "completion", description="`completion`: everything the reader sees, reasoning and answer. "
        "`reasoning`: only the `<think>` block (or the text before `</think>`, or the whole completion when "
        "there is no tag): text outside it is not looked at.")
    ignore_math_and_code: bool = Field(
        True, description="In `$…$`, `\\(…\\)`, `\\[…\\]` math, code spans and fences and the `<answer>` "
        "block, leave out ASCII letters, and LaTeX commands anywhere (notation, not language); every other "
        "letter there still counts.")
    min_letters: int = Field(1, ge=1, description="Fewer letters than this in the reasoning: None.")
    unit: Literal["words", "letters"] = Field(
        "words", description="`script` method: share of the distinct words (a run of letters; in Chinese, "
        "Japanese, Thai... each character) written wholly in the target's scripts, so that mixing in filler "
        "words or script-mixed words does not raise it; `letters`: share of all letters.")

    @field_validator("target")
    @classmethod
    def _known(cls, target: str) -> str:
        scripts_of(target)
        return target

    @model_validator(mode="after")
    def _langid_needs_language(self) -> LanguageConsistencyParams:
        if self.method == "langid" and self.target.lower() not in LANGUAGE_SCRIPTS:
            raise ValueError(f"method 'langid' needs a language code as target, not the script {self.target!r}")
        return self


class LanguageConsistency(Scorer):
    """Share of the reasoning written in the target language or script (DeepSeek-R1's consistency reward)."""

    name = "language_consistency"
    Params = LanguageConsistencyParams
    value_range = (0.0, 1.0)

    def __init__(self, params: Any = None, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        # Script_Extensions: a character several scripts share (Japanese `ー`, Script Common) is each one's.
        self._in_target = "[" + "".join(rf"\p{{Script_Extensions={s}}}" for s in scripts_of(self.params.target)) + "]"
        if self.params.method == "langid" and importlib.util.find_spec("py3langid") is None:
            raise ImportError("language_consistency method 'langid' needs py3langid: "
                              "pip install 'grpo-rewards[langid]'")

    def score(self, samples: Sequence[Sample], results: Mapping[str, Sequence[Score]] | None = None) -> list[Score]:
        p = self.params
        texts = [completion_text(s) for s in samples]
        wheres = ["completion"] * len(texts)
        if p.source == "reasoning":
            parts = [reasoning_text(text) for text in texts]
            texts, wheres = [text for text, _ in parts], [where for _, where in parts]
        texts = [self._readable(text) for text in visible_texts(texts)]
        if p.method == "langid":
            counts = [(len(_NON_LETTERS.sub("", text)), self._langid_letters(text), 0, 0) for text in texts]
        else:
            tables = char_table(r"\p{L}"), char_table(f"[{_UNSPACED}]"), char_table(self._in_target)
            counts = script_counts(texts, *tables)
        return [self._verdict(where, *count) for where, count in zip(wheres, counts, strict=True)]

    def _readable(self, text: str) -> str:
        """Visible `text` as judged: tags out, and ASCII notation out of math, code and the answer block."""
        p = self.params
        if "<" in text:
            text = _TAG.sub(" ", _ANSWER_BLOCK.sub(_without_ascii_letters, text) if p.ignore_math_and_code else text)
        if p.ignore_math_and_code and ("$" in text or "`" in text or "\\" in text or "~~~" in text):
            text = _MATH.sub(_without_ascii_letters, CODE_SPANS.sub(_without_ascii_letters, text))
        return text

    def _verdict(self, where: str, letters: int, target_letters: int, words: int, target_words: int) -> Score:
        p = self.params
        if letters < p.min_letters:
            return Score.unscorable(f"{letters} letters in the {where}, fewer than min_letters", source=where)
        if p.method == "langid" or p.unit == "letters":
            in_target, total = target_letters, letters
        else:
            in_target, total = target_words, words
        return Score(in_target / total, {"letters": letters, "in_target": in_target, "of": total,
                                         "unit": "letters" if p.method == "langid" else p.unit,
                                         "source": where, "method": p.method})

    def _langid_letters(self, text: str) -> int:
        import py3langid  # optional extra: imported only by this method

        target = self.params.target.lower()
        count = 0
        for sentence in _SENTENCE_END.split(text):
            n = len(_NON_LETTERS.sub("", sentence))
            if n and py3langid.classify(sentence)[0] == target:
                count += n
        return count
