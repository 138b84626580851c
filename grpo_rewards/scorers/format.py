"""Format scorers: think/answer template, tag counting, a user regex, reasoning step markers.

Tag checks use `str.find`/`str.count` (linear, no backtracking) rather than one big regex, so a
1 MB completion costs a few scans; user regexes run under the `regex` module's timeout.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import regex
from pydantic import Field, field_validator

from grpo_rewards.scorer import ParamsModel, Sample, Score, Scorer
from grpo_rewards.scorers.textutil import (
    completion_text, has_content, prompt_text, reasoning_text, without_code_tags,
)

TAG_NAME = r"^[A-Za-z_][\w:.-]{0,63}$"


class ThinkFormatParams(ParamsModel):
    think_tag: str = Field("think", pattern=TAG_NAME, description="Name of the reasoning tag (`<think>`).")
    answer_tag: str | None = Field(
        "answer", pattern=TAG_NAME,
        description="Name of the answer tag that must follow the reasoning block; null: anything may follow "
        "it (TRL's `think_format_reward`).",
    )
    prompt_opens_think: bool | Literal["auto"] = Field(
        "auto",
        description="The chat template already opened the reasoning block, so the completion starts inside it "
        "and must not open it again. `auto`: true when the prompt text ends with the opening tag.",
    )
    whitespace: Literal["strict", "lenient"] = Field(
        "strict",
        description="`strict`: the completion begins with the opening tag itself. `lenient`: leading whitespace "
        "and upper-case tag names are accepted too. Between and after the blocks only whitespace is allowed in "
        "both modes.",
    )
    require_content: bool = Field(
        True, description="The reasoning (and answer) block must hold a letter or a digit: an empty, "
        "whitespace-only or invisible-only block scores 0 (TRL's `think_format_reward` accepts it: false).")


class ThinkFormat(Scorer):
    """1 when the completion follows the `<think>…</think>` (then `<answer>…</answer>`) template, else 0."""

    name = "think_format"
    Params = ThinkFormatParams
    value_range = (0.0, 1.0)

    def score(self, samples: Sequence[Sample], results: Mapping[str, Sequence[Score]] | None = None) -> list[Score]:
        return [self._one(s) for s in samples]

    def _opened_by_prompt(self, sample: Sample) -> bool:
        p = self.params
        if p.prompt_opens_think != "auto":
            return bool(p.prompt_opens_think)
        open_tag = f"<{p.think_tag}>"
        tail = prompt_text(sample).rstrip()[-len(open_tag) :]  # only the end of a long prompt matters
        if p.whitespace == "lenient":
            return tail.lower() == open_tag.lower()
        return tail == open_tag

    def _one(self, sample: Sample) -> Score:
        p = self.params
        text = without_code_tags(completion_text(sample))
        think, answer = p.think_tag, p.answer_tag
        if p.whitespace == "lenient":
            text, think, answer = text.lstrip().lower(), think.lower(), answer.lower() if answer else None
        opened = self._opened_by_prompt(sample)
        problem, info = _check_think(text, think, opened, p.require_content, answer)
        if problem is None and answer is not None:
            problem = _check_answer(text[info.pop("after") :], answer, p.require_content)
        info.pop("after", None)
        info["prompt_opened_think"] = opened
        if problem is not None:
            return Score(0.0, {"problem": problem, **info})
        return Score(1.0, {"format": "ok", **info})


def _check_think(text: str, tag: str, opened: bool, require_content: bool,
                 answer_tag: str | None) -> tuple[str | None, dict[str, Any]]:
    """The first problem with the reasoning block, and where the text after it starts."""
    open_tag, close_tag = f"<{tag}>", f"</{tag}>"
    if opened:
        start = 0
        if open_tag in text:
            return f"{open_tag} repeated: the prompt already opened it", {}
    else:
        if not text.startswith(open_tag):
            return (f"text before {open_tag}" if open_tag in text else f"missing {open_tag}"), {}
        start = len(open_tag)
        if text.find(open_tag, start) >= 0:
            return f"{open_tag} repeated", {}
    close_at = text.find(close_tag, start)
    if close_at < 0:
        return f"missing {close_tag}", {}
    after = close_at + len(close_tag)
    # A second closing tag is a broken template (TRL accepts it; see docs/scorers.md).
    if text.find(close_tag, after) >= 0:
        return f"{close_tag} repeated", {}
    if require_content and not has_content(text[start:close_at]):
        return f"empty {open_tag} block", {}
    if answer_tag is not None and f"<{answer_tag}>" in text[start:close_at]:
        return f"<{answer_tag}> inside the {open_tag} block", {}
    return None, {"think_chars": close_at - start, "after": after}


def _check_answer(rest: str, tag: str, require_content: bool) -> str | None:
    open_tag, close_tag = f"<{tag}>", f"</{tag}>"
    body = rest.strip()
    if not body.startswith(open_tag):
        return f"text between the reasoning block and {open_tag}" if open_tag in body else f"missing {open_tag}"
    if body.count(open_tag) > 1 or body.count(close_tag) > 1:
        return f"{open_tag} or {close_tag} repeated"
    if not body.endswith(close_tag):
        return f"text after {close_tag}" if close_tag in body else f"missing {close_tag}"
    if require_content and not has_content(body[len(open_tag) : -len(close_tag)]):
        return f"empty {open_tag} block"
    return None


# ---------------------------------------------------------------------------------------------


class TagCountParams(ParamsModel):
    tags: list[str] = Field(["think", "answer"], min_length=1, max_length=32,
                            description="Tag names; each contributes an opening and a closing marker.")
    require_newlines: bool = Field(
        False, description="Each tag must stand alone on its line (open-r1's `tag_count_reward` counts "
        "`<think>\\n`, `\\n</think>\\n`, ...).")
    penalty: float = Field(
        1.0, ge=0.0, le=1.0,
        description="Subtracted, in units of one marker's credit, for every extra occurrence of a marker and "
        "for every tag block nested in (or crossing) another or placed out of the order of `tags`; 0 only "
        "withholds the credit. Tags inside code spans or fences are code, not markers.",
    )
    require_content: bool = Field(
        True, description="A block with no letter or digit inside (`<think> </think>`) earns nothing for its "
        "two markers.")

    @field_validator("tags")
    @classmethod
    def _tag_names(cls, tags: list[str]) -> list[str]:
        bad = [t for t in tags if not regex.match(TAG_NAME, t)]
        if bad:
            raise ValueError(f"invalid tag names {bad}: use letters, digits, _ : . -")
        if len(set(tags)) != len(tags):
            raise ValueError("tag names must be distinct")
        return tags


class TagCount(Scorer):
    """Partial credit per well-formed tag marker: each counted once; repeated, nested or misordered tags are penalised."""

    name = "tag_count"
    Params = TagCountParams
    value_range = (-1.0, 1.0)

    def __init__(self, params: Any = None, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        self.value_range = (-1.0 if self.params.penalty > 0 else 0.0, 1.0)
        self._line_patterns = {
            t: (regex.compile(rf"(?m)^[ \t]*<{regex.escape(t)}>[ \t]*$"),
                regex.compile(rf"(?m)^[ \t]*</{regex.escape(t)}>[ \t]*$"))
            for t in self.params.tags
        }

    def _positions(self, text: str, tag: str) -> tuple[list[int], list[int]]:
        """Start offsets of the opening and closing markers of `tag`."""
        if self.params.require_newlines:
            o, c = self._line_patterns[tag]
            return [m.start() for m in o.finditer(text)], [m.start() for m in c.finditer(text)]
        return _find_all(text, f"<{tag}>"), _find_all(text, f"</{tag}>")

    def score(self, samples: Sequence[Sample], results: Mapping[str, Sequence[Score]] | None = None) -> list[Score]:
        return [self._one(without_code_tags(completion_text(s))) for s in samples]

    def _one(self, text: str) -> Score:
        credits, offenses, per_tag, blocks = 0, 0, {}, []
        for tag in self.params.tags:
            opens, closes = self._positions(text, tag)
            status = {"open": len(opens), "close": len(closes)}
            offenses += max(0, len(opens) - 1) + max(0, len(closes) - 1)
            good_open = len(opens) == 1
            good_close = len(closes) == 1 and good_open and closes[0] > opens[0]
            credits += good_open + good_close
            if good_open and good_close:
                blocks.append((opens[0], closes[0], tag))
                if self.params.require_content and not has_content(text[opens[0] + len(tag) + 2 : closes[0]]):
                    credits -= 2
                    status["empty"] = True
            per_tag[tag] = status
        for tag, problem in _misplaced(blocks, self.params.tags):
            credits -= 2  # its markers earn nothing
            offenses += 1
            per_tag[tag][problem] = True
        unit = 1.0 / (2 * len(self.params.tags))
        value = max(-1.0, min(1.0, (credits - self.params.penalty * offenses) * unit))
        return Score(value, {"tags": per_tag, "credited_markers": credits, "offenses": offenses})


def _misplaced(blocks: list[tuple[int, int, str]], order: list[str]) -> list[tuple[str, str]]:
    """(tag, "nested" or "out_of_order") for each block inside or across the one before it, or
    placed before a block whose tag the list names earlier."""
    out, end, latest = [], -1, -1
    for start, close, tag in sorted(blocks):
        rank = order.index(tag)
        if start < end:
            out.append((tag, "nested"))
        elif rank < latest:
            out.append((tag, "out_of_order"))
        else:
            latest = rank
        end = max(end, close)
    return out


def _find_all(text: str, needle: str) -> list[int]:
    out, at = [], text.find(needle)
    while at >= 0:
        out.append(at)
        at = text.find(needle, at + len(needle))
    return out


# ---------------------------------------------------------------------------------------------

_FLAGS = {"ignorecase": regex.IGNORECASE, "multiline": regex.MULTILINE, "dotall": regex.DOTALL,
          "verbose": regex.VERBOSE}
Flag = Literal["ignorecase", "multiline", "dotall", "verbose"]


def _compile(pattern: str, flags: list[str]) -> regex.Pattern:
    bits = 0
    for f in flags:
        bits |= _FLAGS[f]
    try:
        return regex.compile(pattern, bits)
    except regex.error as exc:
        raise ValueError(f"invalid regular expression: {exc}") from None


class RegexFormatParams(ParamsModel):
    pattern: str = Field(min_length=1, description="Regular expression (Python `re` syntax, run by `regex`).")
    mode: Literal["full", "search", "count"] = Field(
        "full", description="`full`: the whole completion must match; `search`: a match anywhere; `count`: "
        "min(matches, target_count) / target_count.")
    flags: list[Flag] = Field(["dotall"], description="Regex flags.")
    target_count: int = Field(1, ge=1, le=100_000, description="Matches for full credit in `count` mode.")
    strip: bool = Field(False, description="Strip surrounding whitespace from the completion first.")
    timeout_s: float = Field(1.0, gt=0, le=60, description="Per-sample matching time limit; past it: None.")

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, pattern: str) -> str:
        _compile(pattern, [])
        return pattern


class RegexFormat(Scorer):
    """1 when the completion matches the user's regex (full, search), or count-based partial credit."""

    name = "regex_format"
    Params = RegexFormatParams
    value_range = (0.0, 1.0)

    def __init__(self, params: Any = None, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        self._pattern = _compile(self.params.pattern, self.params.flags)

    def score(self, samples: Sequence[Sample], results: Mapping[str, Sequence[Score]] | None = None) -> list[Score]:
        return [self._one(completion_text(s)) for s in samples]

    def _one(self, text: str) -> Score:
        p = self.params
        if p.strip:
            text = text.strip()
        try:
            if p.mode == "count":
                count = 0
                for _ in self._pattern.finditer(text, timeout=p.timeout_s):
                    count += 1
                    if count >= p.target_count:
                        break
                return Score(count / p.target_count, {"matches": count, "target_count": p.target_count})
            match = (self._pattern.fullmatch if p.mode == "full" else self._pattern.search)(text, timeout=p.timeout_s)
        except TimeoutError:
            return Score.unscorable(f"regex timed out after {p.timeout_s} s", mode=p.mode)
        if match is None:
            return Score(0.0, {"problem": f"no {p.mode} match", "mode": p.mode})
        return Score(1.0, {"mode": p.mode, "match_span": list(match.span())})


# ---------------------------------------------------------------------------------------------

# A generous cap for the step patterns: the defaults take milliseconds on 1 MB, a user pattern that
# backtracks catastrophically gets None instead of stalling the trainer.
STEP_PATTERN_TIMEOUT_S = 5.0

DEFAULT_STEP_PATTERNS = [
    r"\bStep\s*\d+\s*[:.]",
    r"^[ \t]*\d+[.)][ \t]",
    r"^[ \t]*[-*•][ \t]",
    r"\b(?:First|Second|Third|Next|Then|Finally|Lastly),",
]


class ReasoningStepsParams(ParamsModel):
    patterns: list[str] = Field(
        DEFAULT_STEP_PATTERNS, min_length=1,
        description="Step-marker regexes (multi-line mode: `^` is a line start); each match followed by a "
        "visible letter or digit before the next match is one step.")
    target_steps: int = Field(3, ge=1, le=10_000, description="Steps for full credit: min(steps, target) / target.")
    ignore_case: bool = Field(False, description="Match the patterns case-insensitively.")
    source: Literal["completion", "reasoning"] = Field(
        "completion", description="Count in the whole completion or only in its reasoning (`<think>` block).")

    @field_validator("patterns")
    @classmethod
    def _compiles(cls, patterns: list[str]) -> list[str]:
        _compile("|".join(f"(?:{p})" for p in patterns), ["multiline"])
        return patterns


class ReasoningSteps(Scorer):
    """Counts step markers (Step 1:, numbered lists, bullets, First,/Next,/Finally,) up to a cap."""

    name = "reasoning_steps"
    Params = ReasoningStepsParams
    value_range = (0.0, 1.0)

    def __init__(self, params: Any = None, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        flags = ["multiline"] + (["ignorecase"] if self.params.ignore_case else [])
        self._pattern = _compile("|".join(f"(?:{p})" for p in self.params.patterns), flags)

    def score(self, samples: Sequence[Sample], results: Mapping[str, Sequence[Score]] | None = None) -> list[Score]:
        return [self._one(completion_text(s)) for s in samples]

    def _one(self, text: str) -> Score:
        target = self.params.target_steps
        if self.params.source == "reasoning":
            text, _ = reasoning_text(text)
        markers: list[str] = []
        empty, previous = 0, None
        try:
            # A marker is a step when something visible follows it before the next marker.
            for m in self._pattern.finditer(text, timeout=STEP_PATTERN_TIMEOUT_S):
                if previous is not None:
                    empty += not _count_step(previous, text[previous.end() : m.start()], markers)
                    if len(markers) >= target:  # the cap is reached: no need to scan a 1 MB tail
                        break
                previous = m
            else:
                if previous is not None:
                    empty += not _count_step(previous, text[previous.end() :], markers)
        except TimeoutError:
            return Score.unscorable(f"step patterns timed out after {STEP_PATTERN_TIMEOUT_S:g} s")
        steps = min(len(markers), target)
        return Score(steps / target, {"steps": steps, "target_steps": target, "markers": markers[:10],
                                      **({"empty_markers": empty} if empty else {})})


def _count_step(marker: regex.Match, body: str, markers: list[str]) -> bool:
    if has_content(body):
        markers.append(marker.group(0).strip())
        return True
    return False
