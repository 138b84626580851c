"""The `instruction_following` scorer: IFEval's verifiable instructions, strict or loose.

The reference names the instructions in IFEval's layout (`instruction_id_list` plus `kwargs`, a
list of dicts in which unused keys are None) or open-instruct's (`ground_truth`: a JSON or Python
literal holding `{"instruction_id": [...], "kwargs": [...]}`, possibly inside a one-item list).
"""

from __future__ import annotations

import ast
import difflib
import importlib.util
import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from grpo_rewards.scorer import ParamsModel, ReferenceFields, Sample, Score, Scorer
from grpo_rewards.scorers.instructions.checks import INSTRUCTION_TYPES, InstructionType
from grpo_rewards.scorers.instructions.docs import instructions_table
from grpo_rewards.scorers.textutil import completion_text, reference_of, visible_text


class InstructionFollowingParams(ParamsModel):
    mode: Literal["strict", "loose"] = Field(
        "strict", description="`strict`: the response as is; `loose`: an instruction is also followed when it "
        "holds for the response without its first line, its last line, or both, each with and without `*` "
        "(IFEval's loose accuracy).")
    reward: Literal["all", "fraction"] = Field(
        "all", description="`all`: 1 when every instruction is followed, else 0; `fraction`: the share followed.")
    after_think: bool = Field(
        True, description="Check only the text after the last `</think>` (a completion that opens `<think>` "
        "and never closes it has no response).")


class InstructionsError(ValueError):
    """The reference's instructions cannot be checked: the reason goes into Score.info."""


def _literal(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        try:
            return ast.literal_eval(value)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            raise InstructionsError("ground_truth is neither JSON nor a Python literal") from None


def _open_instruct(ground_truth: Any) -> tuple[Any, Any]:
    value = _literal(ground_truth)
    if isinstance(value, list) and len(value) == 1:
        value = _literal(value[0])
    if not isinstance(value, Mapping) or "instruction_id" not in value:
        raise InstructionsError("ground_truth holds no {'instruction_id': [...], 'kwargs': [...]}")
    return value["instruction_id"], value.get("kwargs")


def instructions_of(reference: Mapping[str, Any]) -> list[tuple[InstructionType, BaseModel]]:
    """The reference's instructions, each with its validated kwargs; InstructionsError naming the
    first that is unknown or whose kwargs do not fit."""
    if "instruction_id_list" in reference:
        ids, kwargs = reference["instruction_id_list"], _literal(reference.get("kwargs"))
    elif "ground_truth" in reference:
        ids, kwargs = _open_instruct(reference["ground_truth"])
    else:
        raise InstructionsError("the reference has neither `instruction_id_list` (IFEval) nor `ground_truth` "
                                "(open-instruct)")
    if isinstance(ids, str) or not isinstance(ids, Sequence) or not ids:
        raise InstructionsError("the instruction ids are not a non-empty list")
    kwargs = [{}] * len(ids) if kwargs is None else kwargs
    if isinstance(kwargs, str) or not isinstance(kwargs, Sequence) or len(kwargs) != len(ids):
        raise InstructionsError(f"kwargs is not a list of {len(ids)} dicts, one per instruction")
    return [_instruction(i, id_, kw) for i, (id_, kw) in enumerate(zip(ids, kwargs, strict=True))]


def _instruction(index: int, id_: Any, kwargs: Any) -> tuple[InstructionType, BaseModel]:
    kind = INSTRUCTION_TYPES.get(id_) if isinstance(id_, str) else None
    if kind is None:
        close = difflib.get_close_matches(str(id_), INSTRUCTION_TYPES, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise InstructionsError(f"instruction {index}: unknown instruction id {id_!r}{hint}")
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise InstructionsError(f"instruction {index} ({id_}): kwargs is not a dict")
    given = {k: v for k, v in (kwargs or {}).items() if v is not None}  # the dataset fills unused keys with None
    try:
        return kind, kind.kwargs.model_validate(given)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "kwargs"
        raise InstructionsError(f"instruction {index} ({id_}): kwargs.{where}: {first['msg']}") from None


def response_text(text: str, after_think: bool) -> str:
    if not after_think:
        return text
    close = text.rfind("</think>")
    if close >= 0:
        return text[close + len("</think>"):]
    return "" if "<think>" in text else text


def candidates(text: str, mode: str) -> list[tuple[str, str]]:
    """The named texts an instruction may hold for: the response, and in loose mode IFEval's variants
    (without the first line, the last line or both, each also with every `*` removed), each once. One
    with nothing visible follows nothing (the reference skips only blank ones, so zero-width characters
    would pass `no_comma`)."""
    named = [("as is", text)]
    if mode == "loose":
        lines = text.split("\n")
        cuts = [("as is", text), ("first line removed", "\n".join(lines[1:]).strip()),
                ("last line removed", "\n".join(lines[:-1]).strip()),
                ("first and last lines removed", "\n".join(lines[1:-1]).strip())]
        named = cuts + [(f"{name}, * removed", cut.replace("*", "")) for name, cut in cuts]
    unique: dict[str, str] = {}
    for name, candidate in named:
        if visible_text(candidate).strip():
            unique.setdefault(candidate, name)
    return [(name, candidate) for candidate, name in unique.items()]


def check(kind: InstructionType, kwargs: BaseModel, texts: list[tuple[str, str]]) -> dict[str, Any]:
    """The verdict on one instruction: followed when some candidate text follows it."""
    first_why = "empty response"
    for name, text in texts:
        followed, why = kind.check(text, kwargs)
        if followed:
            return {"id": kind.id, "followed": True, "why": why, **({"variant": name} if name != "as is" else {})}
        if first_why == "empty response":
            first_why = why
    return {"id": kind.id, "followed": False, "why": first_why}


class InstructionFollowing(Scorer):
    """IFEval's verifiable instructions (keywords, length, format, case, ...): all followed, or the share followed."""

    name = "instruction_following"
    Params = InstructionFollowingParams
    reads = ReferenceFields(any_of=("instruction_id_list", "ground_truth"))  # IFEval's layout, open-instruct's
    value_range = (0.0, 1.0)

    def __init__(self, params: Any = None, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        missing = [m for m in ("punkt", "nltk", "langdetect_rs") if importlib.util.find_spec(m) is None]
        if missing:
            raise ImportError(f"instruction_following needs {', '.join(missing)}: pip install 'grpo-rewards[ifeval]'")

    def score(self, samples: Sequence[Sample], results: Mapping[str, Sequence[Score]] | None = None) -> list[Score]:
        return [self._one(s) for s in samples]

    def _one(self, sample: Sample) -> Score:
        try:
            instructions = instructions_of(reference_of(sample))
        except InstructionsError as exc:
            return Score.unscorable(str(exc))
        text = response_text(completion_text(sample), self.params.after_think)
        texts = candidates(text, self.params.mode)
        verdicts = [check(kind, kwargs, texts) for kind, kwargs in instructions]
        followed = sum(v["followed"] for v in verdicts)
        value = followed / len(verdicts) if self.params.reward == "fraction" else float(followed == len(verdicts))
        return Score(value, {"instructions": verdicts, "followed": followed, "of": len(verdicts),
                             "mode": self.params.mode})

    @classmethod
    def docs_extra(cls) -> str:
        return instructions_table()
