"""Prompt datasets as lists of records, plus the registries of built-in tasks and tokenizers.

A record is a dict with a `prompt` (text or chat messages) and any reference fields
(`answer`, `tests`, ...) that the scorers read. Sources, chosen by the config's `data` section:

* `task: NAME` - a built-in task registered with `@register_task(NAME)` (see grpo_core/tasks.py;
  `arith_words`, arithmetic word problems as chat messages for instruction-tuned models, is below);
* `path: FILE` - JSON Lines (one record per line), or .json/.parquet/.csv through `datasets`;
* `dataset: NAME_OR_DIR` - any Hugging Face `datasets` source readable offline (`split`, `dataset_config`).

Extension points (grpo_core/tasks.py uses them; they live in grpo_core.task_registry):

    @register_task("arithmetic", params=ArithmeticParams)    # params: optional pydantic model of `data.options`
    def arithmetic(split: str, size: int | None, seed: int, **options) -> list[dict]: ...

    @register_tokenizer("chars")                             # config: `model.tokenizer: "builtin:chars"`
    def chars() -> transformers.PreTrainedTokenizerBase: ...  # eos_token and pad_token set; save_pretrained works
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from grpo_core import tasks  # noqa: F401 - registers the built-in tasks and tokenizers
from grpo_core.task_registry import (  # noqa: F401 - the extension points, re-exported
    Task, get_task, get_tokenizer_factory, register_task, register_tokenizer)
from grpo_rewards.errors import UserError
from grpo_rewards.fileio import jsonl_lines


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The records of a JSONL file; the first bad line stops with its line number."""
    records = []
    for lineno, record, error in jsonl_lines(path):
        if error is None and not isinstance(record, Mapping):
            error = f"a record must be a JSON object, got {type(record).__name__}"
        if error is not None:
            raise UserError(f"{path}:{lineno}: {error}")
        records.append(dict(record))
    return records


def _read_datasets(name: str, split: str, config_name: str | None = None, data_files: str | None = None) -> list[dict]:
    try:
        import datasets  # the optional `data` extra, and heavy: only for the sources that need it
    except ImportError:
        raise UserError("reading this data source needs the `datasets` package: pip install 'grpo-rewards[data]'") from None
    try:
        if data_files is not None:
            ds = datasets.load_dataset(name, data_files=data_files, split=split)
        else:
            ds = datasets.load_dataset(name, config_name, split=split)
    except Exception as exc:  # noqa: BLE001 - datasets raises many types; all are the user's source
        raise UserError(f"cannot load dataset {data_files or name!r} (split {split!r}): {exc}") from None
    return [dict(r) for r in ds]


def load_records(path: str | Path | None = None, dataset: str | None = None, split: str = "train",
                 dataset_config: str | None = None) -> list[dict[str, Any]]:
    """Records from a file (JSONL natively; json/parquet/csv via `datasets`) or a `datasets` source."""
    if path is not None:
        suffix = Path(path).suffix.lower()
        if suffix in (".jsonl", ".ndjson"):
            return read_jsonl(path)
        builder = {".json": "json", ".parquet": "parquet", ".csv": "csv"}.get(suffix)
        if builder is None:
            raise UserError(f"{path}: unsupported data file type {suffix!r} (use .jsonl, .json, .parquet or .csv)")
        return _read_datasets(builder, "train", data_files=str(path))
    assert dataset is not None
    return _read_datasets(dataset, split, dataset_config)


def check_prompts(records: list[dict[str, Any]], prompt_field: str, where: str) -> list[dict[str, Any]]:
    """Rename `prompt_field` to `prompt`; every record must have a text or chat-messages prompt."""
    out = []
    for i, record in enumerate(records):
        prompt = record.get(prompt_field)
        if not (isinstance(prompt, str) or (isinstance(prompt, list) and all(isinstance(m, Mapping) for m in prompt))):
            raise UserError(f"{where}: record {i + 1} (counting from 1) has no {prompt_field!r} text or chat messages (got {prompt!r:.80})")
        rest = {k: v for k, v in record.items() if k != prompt_field}
        out.append({"prompt": prompt, **rest})
    if not out:
        raise UserError(f"{where}: no records")
    return out


def load_splits(data: Any, seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(train records, eval records) for a validated `DataConfig`."""
    if data.task is not None:
        task = get_task(data.task)
        options = task.params.model_validate(data.options).model_dump() if task.params else dict(data.options)
        train = task.build("train", data.train_size, seed, **options)
        evals = task.build("eval", data.eval_size, seed + 1, **options) if data.eval_size else []
        where = f"task {data.task!r}"
        return check_prompts(train, "prompt", where), (check_prompts(evals, "prompt", where) if evals else [])
    where = data.path or data.dataset
    train = check_prompts(load_records(data.path, data.dataset, data.split, data.dataset_config), data.prompt_field, where)
    if data.eval_path or data.eval_split:
        eval_where = data.eval_path or f"{data.dataset} [{data.eval_split}]"
        evals = load_records(data.eval_path, None if data.eval_path else data.dataset, data.eval_split or "train",
                             data.dataset_config)
        evals = check_prompts(evals, data.prompt_field, eval_where)[: data.eval_size or None]
    elif data.eval_size:  # hold out a seeded random subset of the training records
        order = list(range(len(train)))
        random.Random(seed).shuffle(order)
        held = set(order[: data.eval_size])
        evals = [train[i] for i in sorted(held)]
        train = [r for i, r in enumerate(train) if i not in held]
    else:
        evals = []
    if data.train_size is not None:
        train = train[: data.train_size]
    if not train:
        raise UserError(f"{where}: no training records left after holding out {data.eval_size} for eval")
    return train, evals


class PromptSampler:
    """Seeded epoch order of prompt indices; each call hands this rank its slice of one global batch.

    Every rank draws the same permutation, takes consecutive whole prompts (so a group of G
    completions never spans ranks), and the tail of an epoch too short for a batch is dropped.
    `state()`/`load_state()` make resumption exact.
    """

    def __init__(self, size: int, prompts_per_rank: int, world_size: int, rank: int, seed: int,
                 shuffle: bool = True) -> None:
        self.size, self.per_rank, self.world, self.rank = size, prompts_per_rank, world_size, rank
        self.seed, self.shuffle = seed, shuffle
        self.global_batch = prompts_per_rank * world_size
        if self.global_batch > size:
            raise UserError(f"one step needs {self.global_batch} prompts ({prompts_per_rank} per rank x "
                            f"{world_size} ranks) but the training set has {size}")
        self.epoch, self.position = 0, 0
        self._order = self._permutation()

    @property
    def batches_per_epoch(self) -> int:
        return self.size // self.global_batch

    def _permutation(self) -> list[int]:
        order = list(range(self.size))
        if self.shuffle:
            random.Random(self.seed * 1_000_003 + self.epoch).shuffle(order)
        return order

    def next(self) -> list[int]:
        if self.position + self.global_batch > self.size:
            self.epoch, self.position = self.epoch + 1, 0
            self._order = self._permutation()
        start = self.position + self.rank * self.per_rank
        self.position += self.global_batch
        return self._order[start:start + self.per_rank]

    def state(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position}

    def load_state(self, state: dict[str, int]) -> None:
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self._order = self._permutation()


# ---------------------------------------------------------------------------------------------
# Built-in task `arith_words`: arithmetic word problems for instruction-tuned chat models


class ArithWordsParams(BaseModel):
    """Options of the `arith_words` task (`data.options`)."""

    model_config = ConfigDict(extra="forbid")

    max_operand: int = Field(20, ge=2, le=1000, description="Largest number appearing in a problem.")
    operations: list[Literal["add", "sub", "mul"]] = Field(
        default_factory=lambda: ["add", "sub"], min_length=1, description="Kinds of problems to generate.")
    system_prompt: bool = Field(True, description="Put the format instruction in a system message (else in the user turn).")
    shots: int = Field(2, ge=0, le=2, description="Worked examples given as earlier chat turns (few-shot); "
                       "a 135M model rarely follows the format without them.")
    mixed_shots: bool = Field(
        False, description="Training prompts get a seeded random 0 to `shots` worked examples each, so some are "
        "zero-shot: the examples give the first rewards, the zero-shot prompts carry the format over.")
    eval_shots: int | None = Field(None, ge=0, le=2, description="Worked examples in held-out prompts "
                                   "(default: `shots`); 0 measures the format without examples to copy.")


# Short on purpose: every prompt token is paid for in each forward of training.
ARITH_WORDS_INSTRUCTION = "Reply as <think>short reasoning</think><answer>number</answer>, e.g. <think>5+3=8</think><answer>8</answer>"
# Few-shot turns: hand-written problems in the format asked for (their texts differ from generated ones).
_SHOTS = [("Mia has 5 shells. Mia gets 3 more shells. How many shells does Mia have now?", "<think>5 + 3 = 8</think><answer>8</answer>"),
          ("There were 9 coins on the table. Leo took 4. How many coins are still on the table?",
           "<think>9 - 4 = 5</think><answer>5</answer>")]
_NAMES = ["Ana", "Ben", "Chloe", "Dev", "Emma", "Farid", "Grace", "Hugo", "Iris", "Jonas", "Kira", "Liam"]
_ITEMS = ["apples", "marbles", "books", "stickers", "coins", "pencils", "cookies", "stamps", "shells", "cards"]
# (operation, template, answer): templates name a person, an item and two numbers a, b.
_TEMPLATES = {
    "add": ["{n} has {a} {i}. {n} gets {b} more {i}. How many {i} does {n} have now?",
            "A box holds {a} {i} and another box holds {b} {i}. How many {i} are there in total?"],
    "sub": ["{n} has {a} {i} and gives away {b} of them. How many {i} does {n} have left?",
            "There were {a} {i} on the table. {n} took {b}. How many {i} are still on the table?"],
    "mul": ["{n} buys {a} bags with {b} {i} in each bag. How many {i} does {n} buy?",
            "There are {a} rows of {i} with {b} {i} in each row. How many {i} are there?"],
}


def _word_problem(rng: random.Random, op: str, max_operand: int) -> tuple[str, int]:
    a, b = rng.randint(1, max_operand), rng.randint(1, max_operand)
    if op == "sub" and b > a:  # answers stay non-negative
        a, b = b, a
    if op == "mul":
        a, b = rng.randint(2, min(max_operand, 12)), rng.randint(2, min(max_operand, 12))
    text = rng.choice(_TEMPLATES[op]).format(n=rng.choice(_NAMES), i=rng.choice(_ITEMS), a=a, b=b)
    return text, {"add": a + b, "sub": a - b, "mul": a * b}[op]


@register_task("arith_words", params=ArithWordsParams)
def arith_words(split: str, size: int | None, seed: int, max_operand: int = 20,
                operations: list[str] | None = None, system_prompt: bool = True, shots: int = 2,
                mixed_shots: bool = False,
                eval_shots: int | None = None) -> list[dict[str, Any]]:
    """Word problems as chat messages, with the gold `answer`; deterministic for (split, seed).

    Train and held-out problems are drawn from one fixed stream and split by a hash of the problem
    text, so the two splits never share a problem, whatever `seed` and `size` are.
    """
    operations = operations or ["add", "sub"]
    rng = random.Random(f"arith_words-{seed}-{split}")
    # A stream of its own, so the choice of shots never changes which problems are drawn.
    shot_rng = random.Random(f"arith_words-shots-{seed}-{split}")
    if split != "train" and eval_shots is not None:
        shots = eval_shots
    mixed = mixed_shots and split == "train"
    want = size or (1000 if split == "train" else 100)
    records, seen = [], set()
    for _ in range(want * 50):
        if len(records) == want:
            break
        text, answer = _word_problem(rng, rng.choice(operations), max_operand)
        held_out = zlib.crc32(text.encode()) % 5 == 0  # a fixed fifth of all problems is eval-only
        if text in seen or held_out != (split != "train"):
            continue
        seen.add(text)
        n_shots = shot_rng.randint(0, shots) if mixed else shots
        records.append({"prompt": _arith_words_messages(text, system_prompt, n_shots), "answer": str(answer)})
    return records


def _arith_words_messages(text: str, system_prompt: bool, shots: int) -> list[dict[str, str]]:
    turns = [(q, a) for q, a in _SHOTS[:shots]] + [(text, None)]
    if not system_prompt:  # the instruction opens the first user turn instead
        turns[0] = (f"{ARITH_WORDS_INSTRUCTION}\n\n{turns[0][0]}", turns[0][1])
    messages = [{"role": "system", "content": ARITH_WORDS_INSTRUCTION}] if system_prompt else []
    for question, reply in turns:
        messages.append({"role": "user", "content": question})
        if reply is not None:
            messages.append({"role": "assistant", "content": reply})
    return messages
