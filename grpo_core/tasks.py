"""Built-in demo pieces: an arithmetic task, a character tokenizer and tiny model presets.

They make a run that needs nothing downloaded and learns in minutes on a laptop CPU
(examples/quickstart.yaml):

* task `arithmetic`: prompts like `3+4=` with the gold `answer` ("7"). Every problem of the chosen
  operations whose answer has at most `max_answer_digits` digits is enumerated, then split once
  into train and held-out problems by `split_seed` (so train and eval never share a problem,
  whatever the run's seed). The training split repeats its problems to `data.train_size`.
* task `majority` (the quickstart's): prompts like `73777=` with the gold `answer` ("7"), the digit filling
  most places of the string; a fixed random set of strings is held out, so eval shows the rule was found.
* tokenizer `builtin:chars`: one token per character of a small alphabet (digits, operators,
  letters, a few punctuation marks), `<eos>` separate from `<pad>`. A `PreTrainedTokenizerFast`,
  so `save_pretrained` writes a directory that `AutoTokenizer` (and so TRL) loads back.
* tasks `reasoning_gym:<name>`: any generator of the reasoning-gym package (`chain_sum`,
  `basic_arithmetic`, `gsm_symbolic`, ...), its config fields as task options beside ours. A fixed
  held-out set (`eval_count` distinct questions from seeds above every training seed, the same for
  every run seed) is set aside; training draws from the run's own seeds and drops any question
  text that is held out, so the splits never share a problem.
* `MODEL_PRESETS`: HF config kwargs of small Llamas (`tiny` for the quickstart; `2m` and `20m`
  for bench/vs_trl.py); the trainer fills in vocab size and special token ids from the tokenizer.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
import typing
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
import transformers  # a lazy module: AutoConfig loads its mappings only when a preset is built
from transformers import PreTrainedTokenizerFast

from grpo_core.task_registry import Task, register_task, register_task_source, register_tokenizer
from grpo_rewards.errors import UnknownNameError, UserError

# ---------------------------------------------------------------------------------------------
# Tokenizer

# Small on purpose: a randomly initialised model then finds the digits among few tokens by sampling.
ALPHABET = list("0123456789+-*=() ")
SPECIAL_TOKENS = ["<pad>", "<eos>", "<unk>"]


def char_level_tokenizer(alphabet: list[str], specials: list[str] = SPECIAL_TOKENS) -> Any:
    """One token per character of `alphabet` after `specials` (`<pad>`, `<eos>`, `<unk>`), as a
    PreTrainedTokenizerFast, so it saves to a directory and loads back with AutoTokenizer (TRL too)."""
    vocab = {token: i for i, token in enumerate(specials + alphabet)}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")  # every character its own token
    core.decoder = decoders.Fuse()  # join characters back without spaces between them
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")


@register_tokenizer("chars")
def chars_tokenizer() -> Any:
    """A character-level tokenizer over `ALPHABET` (unknown characters become `<unk>`)."""
    return char_level_tokenizer(ALPHABET)


# ---------------------------------------------------------------------------------------------
# Model presets (LlamaConfig kwargs; vocab size and special ids come from the tokenizer)

MODEL_PRESETS: dict[str, dict[str, Any]] = {
    # ~0.17M parameters, the quickstart's model; a huge rope_theta leaves attention almost
    # position-free, so what it learns for 3+4 carries over to 4+3 (the mirrored held-out problems)
    "tiny": {"model_type": "llama", "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 1,
             "rope_theta": 1e16, "num_attention_heads": 4, "num_key_value_heads": 4,
             "max_position_embeddings": 128, "tie_word_embeddings": True},
    # ~1.8M parameters (bench/vs_trl.py, completion length 32)
    "2m": {"model_type": "llama", "hidden_size": 192, "intermediate_size": 512, "num_hidden_layers": 4,
           "num_attention_heads": 6, "num_key_value_heads": 6, "max_position_embeddings": 256,
           "tie_word_embeddings": True},
    # ~19M parameters (bench/vs_trl.py, completion length 64)
    "20m": {"model_type": "llama", "hidden_size": 384, "intermediate_size": 1536, "num_hidden_layers": 8,
            "num_attention_heads": 6, "num_key_value_heads": 6, "max_position_embeddings": 256,
            "tie_word_embeddings": True},
}


def model_config(preset: str, tokenizer: Any) -> Any:
    """A transformers config for `preset`, sized and wired to `tokenizer`'s vocabulary and specials."""
    kwargs = dict(MODEL_PRESETS[preset])
    kwargs.update(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                  eos_token_id=tokenizer.eos_token_id, bos_token_id=None)
    return transformers.AutoConfig.for_model(kwargs.pop("model_type"), **kwargs)


# ---------------------------------------------------------------------------------------------
# Task: arithmetic on small numbers

OPERATIONS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


class ArithmeticParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    operations: list[Literal["+", "-", "*"]] = Field(["+"], min_length=1, description="Operators to draw from.")
    max_operand: int = Field(9, ge=1, le=99, description="Operands range over 0..max_operand.")
    max_answer_digits: int = Field(1, ge=1, le=4, description="Keep problems whose answer has at most this many "
                                   "digits (1: single-digit answers); negative answers are always left out.")
    eval_fraction: float = Field(0.2, gt=0, lt=1, description="Share of the problems held out for evaluation.")
    split_seed: int = Field(0, description="Seed of the fixed train/held-out partition of the problems.")
    held_out: Literal["mirrored", "random"] = Field(
        "mirrored", description="`mirrored`: held-out problems are operand-swapped twins of training ones (4+3 "
        "held out, 3+4 trained), so eval measures whether the learned answers ignore operand order; "
        "`random`: a random subset of the problems (needs far more training to generalise).")

    @model_validator(mode="after")
    def _enough_problems(self) -> ArithmeticParams:
        n = len(problems(self))
        if n < 4:
            raise ValueError(f"only {n} problems fit these options; allow more operations, operands or digits")
        return self


def problems(params: ArithmeticParams) -> list[tuple[int, str, int]]:
    """Every (a, op, b) problem allowed by `params`, in a fixed order."""
    out = []
    for op in params.operations:
        for a, b in itertools.product(range(params.max_operand + 1), repeat=2):
            value = OPERATIONS[op](a, b)
            if 0 <= value < 10 ** params.max_answer_digits:
                out.append((a, op, b))
    return out


def partition(params: ArithmeticParams) -> tuple[list[tuple[int, str, int]], list[tuple[int, str, int]]]:
    """(train problems, held-out problems): one seeded shuffle, independent of the run's seed."""
    every = problems(params)
    random.Random(params.split_seed).shuffle(every)
    want = max(1, round(len(every) * params.eval_fraction))
    if params.held_out == "random":
        return every[want:], every[:want]
    held: set[tuple[int, str, int]] = set()
    for a, op, b in every:  # hold out one order of a commutative pair whose other order stays in train
        if len(held) < want and a != b and op in "+*" and (b, op, a) not in held:
            held.add((a, op, b))
    return [p for p in every if p not in held], [p for p in every if p in held]


def record(a: int, op: str, b: int) -> dict[str, Any]:
    return {"prompt": f"{a}{op}{b}=", "answer": str(OPERATIONS[op](a, b))}


@register_task("arithmetic", params=ArithmeticParams)
def arithmetic(split: str, size: int | None, seed: int, **options: Any) -> list[dict[str, Any]]:
    """Train: the training problems shuffled by `seed`, repeated to `size`; eval: up to `size` held-out ones."""
    params = ArithmeticParams(**options)
    train, held = partition(params)
    if split != "train":
        return [record(*p) for p in held[:size or None]]
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    while len(out) < (size or len(train)):
        rng.shuffle(train)
        out.extend(record(*p) for p in train)
    return out[:size or len(train)]


# ---------------------------------------------------------------------------------------------
# Task: the majority digit of a digit string


class MajorityParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    length: int = Field(5, ge=3, le=9, description="Digits per prompt string (odd lengths give a clear majority).")
    eval_count: int = Field(500, ge=1, le=5000, description="Strings held out for evaluation, never trained on.")
    split_seed: int = Field(0, description="Seed of the fixed train/held-out partition of the strings.")


def majority_strings(params: MajorityParams) -> list[str]:
    """Every digit string of `params.length` in which one digit fills more than half the places."""
    need = params.length // 2 + 1
    out = []
    for digits in itertools.product("0123456789", repeat=params.length):
        if max(digits.count(d) for d in set(digits)) >= need:
            out.append("".join(digits))
    return out


def majority_record(digits: str) -> dict[str, Any]:
    return {"prompt": f"{digits}=", "answer": max(set(digits), key=digits.count)}


@register_task("majority", params=MajorityParams)
def majority(split: str, size: int | None, seed: int, **options: Any) -> list[dict[str, Any]]:
    """`73777=` -> `7`. Held-out strings are a fixed random subset (by `split_seed`), so eval measures the rule
    (an order-free count a near position-free model can find), not memorised prompts."""
    params = MajorityParams(**options)
    every = majority_strings(params)
    random.Random(params.split_seed).shuffle(every)
    held, train = every[:params.eval_count], every[params.eval_count:]
    if split != "train":
        return [majority_record(s) for s in held[:size or None]]
    rng = random.Random(seed)
    picks = train if size is None else [rng.choice(train) for _ in range(size)]
    return [majority_record(s) for s in picks]


# ---------------------------------------------------------------------------------------------
# Task source `reasoning_gym:<name>`: procedural generators of the reasoning-gym package

# Generator seeds: every held-out problem comes from seeds at or above EVAL_SEEDS, every training
# problem from seeds below it, and training drops any question text that is held out as well.
EVAL_SEEDS = 2**31
SEED_STRIDE = 2**16
RG_INSTRUCTION = "Solve the problem, then give only the final answer inside <answer></answer>, e.g. <answer>42</answer>."


class ReasoningGymOptions(BaseModel):
    """Our options of a `reasoning_gym:<name>` task; the generator's own config fields sit beside them."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    eval_count: int = Field(1000, ge=1, le=5000, description="Held-out problems (distinct questions) set aside; "
                            "an eval split takes the first `size` of them, whatever the run's seed.")
    split_seed: int = Field(0, ge=0, lt=SEED_STRIDE // 2, description="Seed of the held-out set.")
    instruction: str = Field(RG_INSTRUCTION, description="Format instruction opening the first user turn (or the "
                             "system message).")
    system_prompt: bool = Field(False, description="Put the instruction in a system message (else in the user turn).")
    shots: int = Field(1, ge=0, le=4, description="Worked examples (training-side questions, answered as "
                       "<answer>gold</answer>) given as earlier chat turns.")


def _reasoning_gym() -> Any:
    try:
        import reasoning_gym
    except ImportError:
        raise UserError("reasoning_gym:<name> tasks need the reasoning-gym package: "
                        "pip install -c constraints.txt 'grpo-rewards[reasoning-gym]'") from None
    return reasoning_gym


def _generator_fields(config_cls: type) -> dict[str, Any]:
    """The generator config's dataclass fields as pydantic field definitions (seed and size are ours)."""
    hints = typing.get_type_hints(config_cls)
    out = {}
    for f in dataclasses.fields(config_cls):
        if f.name in ("seed", "size"):
            continue
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else ...)
        # validate_default: a generator may default a list field to a tuple; pydantic makes it a list
        out[f.name] = (hints.get(f.name, Any), Field(default, validate_default=True))
    return out


@register_task_source("reasoning_gym")
def reasoning_gym_task(name: str) -> Task:
    """The Task of reasoning-gym's generator `name`; its options are ours plus the generator's config fields."""
    rg = _reasoning_gym()
    if name not in rg.factory.DATASETS:
        raise UnknownNameError("reasoning-gym dataset", name, sorted(rg.factory.DATASETS))
    config_cls = rg.factory.DATASETS[name][1]
    ours = set(ReasoningGymOptions.model_fields)

    def check_generator(self: BaseModel) -> BaseModel:  # the generator's own cross-field checks (asserts)
        try:
            config_cls(**{k: v for k, v in self.model_dump().items() if k not in ours}).validate()
        except (AssertionError, ValueError, TypeError) as exc:
            raise ValueError(f"reasoning-gym {name}: {exc or 'invalid options'}") from None
        return self

    params = create_model(f"ReasoningGym_{name}", __base__=ReasoningGymOptions,
                          __validators__={"generator": model_validator(mode="after")(check_generator)},
                          **_generator_fields(config_cls))

    def build(split: str, size: int | None, seed: int, **options: Any) -> list[dict[str, Any]]:
        mine = {k: options.pop(k) for k in list(options) if k in ours}
        return reasoning_gym_records(name, split, size, seed, ReasoningGymOptions(**mine), options)

    return Task(f"reasoning_gym:{name}", build, params)


def _items(name: str, seed: int, count: int, generator: dict[str, Any]) -> list[dict[str, Any]]:
    return list(_reasoning_gym().create_dataset(name, seed=seed, size=count, **generator))


def held_out_items(name: str, options: ReasoningGymOptions, generator: dict[str, Any]) -> list[dict[str, Any]]:
    """The held-out set: the first `eval_count` distinct questions from the held-out seeds."""
    seed = EVAL_SEEDS + options.split_seed * SEED_STRIDE
    items, seen = [], set()
    for item in _items(name, seed, options.eval_count * 10, generator):
        if item["question"] not in seen:
            seen.add(item["question"])
            items.append(item)
            if len(items) == options.eval_count:
                return items
    raise UserError(f"reasoning_gym:{name}: only {len(items)} distinct questions in {options.eval_count * 10} "
                    f"draws, fewer than eval_count {options.eval_count}; widen the generator's options or lower it")


def reasoning_gym_records(name: str, split: str, size: int | None, seed: int, options: ReasoningGymOptions,
                          generator: dict[str, Any]) -> list[dict[str, Any]]:
    """Chat-message records with the gold `answer` and the generator's `question`."""
    held = held_out_items(name, options, generator)
    if split != "train":
        if size and size > len(held):
            raise UserError(f"reasoning_gym:{name}: {size} held-out problems asked, eval_count is {len(held)}")
        items = held[:size or None]
    else:
        want, banned = size or 1000, {item["question"] for item in held}
        # run seeds map to disjoint ranges below EVAL_SEEDS (a generator seeds item i with seed + i)
        start = (seed % (EVAL_SEEDS // SEED_STRIDE - 1) + 1) * SEED_STRIDE
        items = [it for it in _items(name, start, want * 4, generator) if it["question"] not in banned][:want]
        if len(items) < want:
            raise UserError(f"reasoning_gym:{name}: only {len(items)} training questions outside the held-out set "
                            f"in {want * 4} draws; widen the generator's options or ask for fewer")
    shots = [it for it in _items(name, SEED_STRIDE - 64, 64, generator) if it["question"] not in
             {h["question"] for h in held}][:options.shots]
    return [{"prompt": _rg_messages(it["question"], shots, options), "answer": str(it["answer"]),
             "question": it["question"]} for it in items]


def _rg_messages(question: str, shots: list[dict[str, Any]], options: ReasoningGymOptions) -> list[dict[str, str]]:
    turns = [(s["question"], f"<answer>{s['answer']}</answer>") for s in shots] + [(question, None)]
    if not options.system_prompt:
        turns[0] = (f"{options.instruction}\n\n{turns[0][0]}", turns[0][1])
    messages = [{"role": "system", "content": options.instruction}] if options.system_prompt else []
    for text, reply in turns:
        messages.append({"role": "user", "content": text})
        if reply is not None:
            messages.append({"role": "assistant", "content": reply})
    return messages
