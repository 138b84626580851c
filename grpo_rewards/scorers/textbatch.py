"""Batch analyses shared by the text scorers: whitespace tokens analysed once per distinct token, and
repeated runs of text found for a whole batch at once.

A batch's tokens recur (its vocabulary), so each scorer maps every token through a dict built from the
batch's distinct tokens: the per-completion work is C-level `map`/`join`/`set` over that dict, and the
analysis itself (folding, splitting, script checks) runs once per distinct token, remembered across
batches in a bounded LRU cache.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

import regex
from cachetools import LRUCache

T = TypeVar("T")


@functools.cache
def _numpy():
    # Imported on the first batch, not with the module: a run that scores only code or math
    # never needs numpy, whose import is a large share of the command line's start-up.
    import numpy

    return numpy

# Distinct tokens remembered across batches, per analysis: a batch's vocabulary, numbers aside, recurs.
TOKENS_CACHED = 1 << 16


class TokenAnalysis:
    """`analyse(token)` per distinct token, remembered across batches in an LRU cache."""

    def __init__(self, analyse: Callable[[str], T], maxsize: int = TOKENS_CACHED) -> None:
        self.analyse = analyse
        self.cache: LRUCache[str, T] = LRUCache(maxsize=maxsize)

    def table(self) -> dict[str, T]:
        """A dict for one batch: `table[token]` is the analysis, looked up or computed on a token's first
        use in the batch; every later use is a plain dict lookup (no Python call)."""
        return _BatchTable(self)


class _BatchTable(dict):
    # New tokens a batch adds to the cache: an insert into the LRU cache costs several times a lookup,
    # and a batch whose tokens are nearly all new (numbers, identifiers) would only churn it.
    NEW_PER_BATCH = 4096

    def __init__(self, analysis: TokenAnalysis) -> None:
        super().__init__()
        self._analysis = analysis
        self._room = self.NEW_PER_BATCH

    def __missing__(self, token: str):
        cache = self._analysis.cache
        if token in cache:
            value = cache[token]
        else:
            value = self._analysis.analyse(token)
            if self._room:
                cache[token] = value
                self._room -= 1
        self[token] = value
        return value


# ---------------------------------------------------------------------------------------------
# Whole-batch passes with numpy: texts joined into one array of code points, spans compared by hash

# A unit starts after each of these (neither survives `visible_text`, so neither is ever text).
UNIT_SEP, STREAM_SEP = "\x00", "\x01"
# Characters per numpy pass: bounds the arrays (a few times 8 bytes per character).
_CHUNK_CHARS = 1 << 20
_CHUNK_TEXTS = 1 << 16  # within the 20 bits a sort key leaves for a text's index
_RUN_TEXTS = 512  # texts per pass of `repeated_runs` (about 1 M characters at 2 kB each)
_BASE = 0x9E3779B97F4A7C15  # odd, so invertible modulo 2**64
# A span's hash keeps this many high bits; the text's index fills the rest of the 64-bit sort key.
_HASH_BITS = 44


def _chunks(texts: Sequence[str]) -> Iterator[list[str]]:
    chunk: list[str] = []
    size = 0
    for text in texts:
        if chunk and (size + len(text) > _CHUNK_CHARS or len(chunk) == _CHUNK_TEXTS):
            yield chunk
            chunk, size = [], 0
        chunk.append(text)
        size += len(text) + 1
    if chunk:
        yield chunk


def _code_points(texts: list[str], sep: str):
    """The texts joined by `sep`, `sep` after the last too, as a uint32 array of code points."""
    np = _numpy()
    joined = sep.join(texts) + sep
    return np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


def _span_hashes(codes, starts, ends):
    """Polynomial hash modulo 2**64 of each span `codes[start:end]`, the same wherever it sits (two
    different spans share `_HASH_BITS` high bits with odds of about 2**-44)."""
    np = _numpy()
    powers, inverse = _powers(len(codes) + 1)
    prefix = np.zeros(len(codes) + 1, dtype=np.uint64)
    np.cumsum(codes.astype(np.uint64) * powers[: len(codes)], out=prefix[1:])
    hashes = (prefix[ends] - prefix[starts]) * inverse[starts]
    # MurmurHash3's finaliser (a bijection): a short span's hash is small, and only high bits are kept.
    for multiplier in (0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53):
        hashes ^= hashes >> np.uint64(33)
        hashes *= np.uint64(multiplier)
    return hashes ^ (hashes >> np.uint64(33))


def _keys(hashes, text_of, low_bit=None):
    """64-bit sort keys: the text's index above the hash's high bits (the lowest bit `low_bit` if given)."""
    np = _numpy()
    keys = (hashes >> np.uint64(64 - _HASH_BITS)) | (text_of.astype(np.uint64) << np.uint64(_HASH_BITS))
    if low_bit is not None:
        keys = (keys & ~np.uint64(1)) | low_bit.astype(np.uint64)
    return keys


def _distinct(keys):
    """The distinct keys, sorted (`np.unique` would hash them, slower on these keys)."""
    np = _numpy()
    keys = np.sort(keys)
    return keys[np.concatenate(([True], keys[1:] != keys[:-1]))] if len(keys) else keys


_POWERS: list = []


def _powers(n: int):
    """(BASE**i, BASE**-i) modulo 2**64 for i < n, grown on demand and kept (numpy wraps uint64 products)."""
    np = _numpy()
    if not _POWERS or len(_POWERS[0]) < n:
        size = max(n, 1 << 16)
        base = np.full(size, _BASE, dtype=np.uint64)
        base[0] = 1
        inverse_base = np.full(size, pow(_BASE, -1, 1 << 64), dtype=np.uint64)
        inverse_base[0] = 1
        _POWERS[:] = [np.cumprod(base), np.cumprod(inverse_base)]
    return _POWERS[0], _POWERS[1]


def containing(texts: Sequence[str], table) -> list[bool]:
    """Whether each text holds a character marked in `table` (a boolean table over code points)."""
    np = _numpy()
    out: list[bool] = []
    for chunk in _chunks(texts):
        codes = _code_points(chunk, " ")
        ends_at = np.cumsum(np.fromiter(map(len, chunk), dtype=np.int64, count=len(chunk)) + 1) - 1
        out += (np.diff(np.cumsum(table[codes])[ends_at], prepend=0) > 0).tolist()
    return out


def repeated_runs(token_lists: Sequence[Sequence[str]], unit_table: dict[str, str],
                  run_chars: int) -> list[tuple[int, int]]:
    """(units, repeated runs) of each text, given as its tokens and `unit_table` (a token's units joined by
    `UNIT_SEP`): a run is the `run_chars` characters from a unit's start, whitespace left out, repeated
    when the same characters ran from an earlier unit of the same text (compared by `_span_hashes`)."""
    np = _numpy()
    out: list[tuple[int, int]] = []
    end_of_text = (STREAM_SEP,)
    for start in range(0, len(token_lists), _RUN_TEXTS):
        chunk = token_lists[start : start + _RUN_TEXTS]
        joined = UNIT_SEP.join(itertools.chain.from_iterable(
            itertools.chain(map(unit_table.__getitem__, tokens), end_of_text) for tokens in chunk))
        codes = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        is_char = codes > 1
        marks = np.flatnonzero(~is_char)
        chars = codes[is_char]
        # In the characters without separators: where each unit starts, where each text ends; a unit
        # that ends where it starts (next to a text's end, a token with no units, an empty text) is none.
        after_mark = marks - np.arange(len(marks))
        ends = after_mark[codes[marks] == 1]
        starts = np.concatenate(([0], after_mark[:-1]))
        stream_of = np.concatenate(([0], np.cumsum(codes[marks[:-1]] == 1)))
        unit = np.diff(starts, append=len(chars)) > 0
        starts, stream_of = starts[unit], stream_of[unit]
        units = np.bincount(stream_of, minlength=len(chunk))
        whole = starts + run_chars <= ends[stream_of]
        starts, stream_of = starts[whole], stream_of[whole]
        keys = np.sort(_keys(_span_hashes(chars, starts, starts + run_chars), stream_of))
        repeats = keys[1:] == keys[:-1]
        repeated = np.bincount((keys[1:][repeats] >> np.uint64(_HASH_BITS)).astype(np.int64), minlength=len(chunk))
        out += zip(units.tolist(), repeated.tolist(), strict=True)
    return out


def distinct_ngrams(word_hashes: Sequence[bytes], n: int) -> list[tuple[int, int]]:
    """(n-grams, distinct n-grams) of each text, given as its words' 64-bit hashes (8 bytes a word)."""
    np = _numpy()
    out: list[tuple[int, int]] = []
    for start in range(0, len(word_hashes), _CHUNK_TEXTS // 8):
        chunk = word_hashes[start : start + _CHUNK_TEXTS // 8]
        words = np.frombuffer(b"".join(chunk), dtype=np.uint64)
        counts = np.fromiter(map(len, chunk), dtype=np.int64, count=len(chunk)) // 8
        ends = np.cumsum(counts)
        text_of = np.repeat(np.arange(len(chunk)), counts)
        starts = np.flatnonzero(np.arange(len(words)) + n <= ends[text_of])
        keys = _distinct(_keys(_span_hashes(words, starts, starts + n), text_of[starts]))
        distinct = np.bincount((keys >> np.uint64(_HASH_BITS)).astype(np.int64), minlength=len(chunk))
        out += zip(np.maximum(counts - n + 1, 0).tolist(), distinct.tolist(), strict=True)
    return out


def script_counts(texts: Sequence[str], letter, unspaced, target) -> list[tuple[int, int, int, int]]:
    """(letters, letters in the target's scripts, distinct words, distinct words wholly in them) of each
    text. `letter`, `unspaced`, `target`: boolean tables over code points. A word is a run of letters,
    or one character of a script written without spaces (`unspaced`); words are told apart by hash."""
    np = _numpy()
    out: list[tuple[int, int, int, int]] = []
    for chunk in _chunks(texts):
        codes = _code_points(chunk, "\x00")
        ends_at = np.flatnonzero(codes == 0)
        is_letter, in_target = letter[codes], target[codes]
        letters = np.diff(np.cumsum(is_letter)[ends_at], prepend=0)
        target_letters = np.diff(np.cumsum(is_letter & in_target)[ends_at], prepend=0)
        alone = unspaced[codes]
        runs = is_letter & ~alone
        edges = np.diff(runs.astype(np.int8), prepend=0, append=0)
        single = np.flatnonzero(alone)
        starts = np.concatenate((np.flatnonzero(edges == 1), single))
        ends = np.concatenate((np.flatnonzero(edges == -1), single + 1))
        outside = np.zeros(len(codes) + 1, dtype=np.int64)
        np.cumsum(~in_target, out=outside[1:])
        whole_target = outside[ends] == outside[starts]
        text_of = np.searchsorted(ends_at, starts)
        keys = _distinct(_keys(_span_hashes(codes, starts, ends), text_of, whole_target))
        text_of_word = (keys >> np.uint64(_HASH_BITS)).astype(np.int64)
        words = np.bincount(text_of_word, minlength=len(chunk))
        target_words = np.bincount(text_of_word[(keys & np.uint64(1)).astype(bool)], minlength=len(chunk))
        out += zip(letters.tolist(), target_letters.tolist(), words.tolist(), target_words.tolist(), strict=True)
    return out


@functools.cache
def char_table(pattern: str):
    """A boolean table over all code points: True where `pattern` (a `regex` class) matches the character."""
    np = _numpy()
    table = np.zeros(0x110000, dtype=bool)
    matched = "".join(regex.findall(pattern, _all_characters()))
    table[np.frombuffer(matched.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)] = True
    return table


@functools.cache
def _all_characters() -> str:
    return "".join(map(chr, range(0x110000)))
