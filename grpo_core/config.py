"""TrainConfig: the whole training run, validated completely before any model is loaded.

Names follow TRL's `GRPOConfig` where the concept is the same. `load_config` reads YAML/TOML/JSON,
applies `--set a.b.0.c=value` overrides (values parsed as YAML; a number picks a list item), builds
the run's registry once (entry points plus `plugins:`), and validates the whole config in one
pass with the registry and the config's directory in the validation context: the `rewards`
section with the spec's own validators, the model and data sections with theirs (files, task,
model type). It raises one `ConfigError` that lists every problem with its file, line and path (or
the `--set` argument that caused it). The config keeps the validated spec and the registry; the
reward is built from both without revalidation.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, ValidationInfo, field_validator,
    model_validator,
)

from grpo_core.lora import LoraSettings
from grpo_core.loss import LOSS_TYPES
from grpo_rewards.advantages import SCALES, scale_problem
from grpo_rewards.errors import ConfigError, Problem, UnknownNameError, format_loc
from grpo_rewards.registry import Registry, get_registry, load_registry
from grpo_rewards.spec import RewardSpec, validate_spec
from grpo_rewards.structured import Found, LineOf, messages, no_lines, raise_problems, read_structured_file, validate


class _Section(BaseModel):
    # strict: a quoted number in a file is a mistake, not a number (as in reward specs)
    model_config = ConfigDict(extra="forbid", protected_namespaces=(), strict=True)


class ModelConfig(_Section):
    name_or_path: str | None = Field(
        None, description="A local model directory, a `.gguf` file, a hub id (`owner/name`; needs the hub or its "
        "local cache) or an alias such as `smollm2-135m-instruct` (offline copy; see grpo_core/hub.py).")
    config: dict[str, Any] | None = Field(
        None, description="HF config kwargs (with `model_type`) to build a model from scratch instead.")
    tokenizer: str | None = Field(
        None, description="Tokenizer directory/name, or `builtin:NAME`; defaults to `name_or_path`.")
    dtype: Literal["float32", "bfloat16", "float16"] = Field("float32", description="Parameter dtype.")
    gradient_checkpointing: bool = Field(False, description="Recompute activations in backward to save memory.")
    trust_remote_code: bool = Field(False, description="Allow model code shipped with the checkpoint.")
    implementation: Literal["auto", "grpo_core", "transformers"] = Field(
        "auto", description="auto: grpo_core's compact module (grpo_core/llama.py: the same weights and logits, "
        "less memory and start-up) for Llama/Qwen2/Qwen3 without LoRA, transformers' class otherwise; "
        "grpo_core: require it; transformers: always transformers'.")

    @model_validator(mode="after")
    def _one_source(self) -> ModelConfig:
        if (self.name_or_path is None) == (self.config is None):
            raise ValueError("give exactly one of `name_or_path` or `config`")
        if self.config is not None and self.tokenizer is None:
            raise ValueError("a model built from `config` needs a `tokenizer`")
        return self

    @model_validator(mode="after")
    def _resolvable(self, info: ValidationInfo) -> ModelConfig:
        """For a run (`validate_config`'s context): a source that can never load, found without loading."""
        if _for_a_run(info):
            raise_problems(_model_problems(self))
        return self


class LoraConfig(LoraSettings):
    """The `lora:` section: train a LoRA adapter (peft) instead of every weight.

    The reference policy of the KL term is then the same model with the adapter disabled.
    """

    model_config = ConfigDict(extra="forbid", protected_namespaces=(), strict=True)

    save: Literal["merged", "adapter"] | None = Field(
        None, description="Final model: `merged` (a plain checkpoint) or `adapter` (the adapter alone, a few MB; "
        "needs the base to load). Default: `merge_on_save`.")

    @model_validator(mode="after")
    def _save_mode(self) -> LoraConfig:
        if self.save is not None:
            if "merge_on_save" in self.model_fields_set and self.merge_on_save != (self.save == "merged"):
                raise ValueError("`save` and `merge_on_save` disagree; give one of them")
            self.merge_on_save = self.save == "merged"
        return self


class DataConfig(_Section):
    task: str | None = Field(None, description="A built-in task name (see grpo_core/tasks.py).")
    path: str | None = Field(None, description="A .jsonl (or .json/.parquet/.csv) file of records.")
    dataset: str | None = Field(None, description="A Hugging Face `datasets` name or directory, read offline.")
    dataset_config: str | None = Field(None, description="The `datasets` configuration name.")
    split: str = Field("train", description="Training split of `dataset`.")
    eval_path: str | None = Field(None, description="A separate file of held-out eval records.")
    eval_split: str | None = Field(None, description="Held-out split of `dataset` for eval.")
    eval_size: int = Field(0, ge=0, description="Eval prompts (held out from train when no eval source is given).")
    train_size: int | None = Field(None, ge=1, description="Use at most this many training records.")
    prompt_field: str = Field("prompt", description="Column holding the prompt (text or chat messages).")
    options: dict[str, Any] = Field(default_factory=dict, description="Options of the built-in task.")
    shuffle: bool = Field(True, description="Shuffle prompts every epoch (seeded).")

    @model_validator(mode="after")
    def _one_source(self) -> DataConfig:
        if sum(x is not None for x in (self.task, self.path, self.dataset)) != 1:
            raise ValueError("give exactly one of `task`, `path` or `dataset`")
        return self

    @model_validator(mode="after")
    def _sources_exist(self, info: ValidationInfo) -> DataConfig:
        """For a run: the task and its options, and the files (made absolute against the config's directory)."""
        if _for_a_run(info):
            raise_problems(_data_problems(self, info.context["base"]))
        return self


def _for_a_run(info: ValidationInfo) -> bool:
    return isinstance(info.context, dict) and "base" in info.context


class TrainConfig(_Section):
    model: ModelConfig
    data: DataConfig
    lora: LoraConfig | None = Field(None, description="Train a LoRA adapter; absent: full fine-tuning.")
    rewards: RewardSpec = Field(description="The reward spec (inline, or a path to a spec file).")
    plugins: list[str] = Field(default_factory=list, description="Extra scorer plugin modules to import.")
    # GRPO
    num_generations: int = Field(8, ge=2, description="Completions per prompt (G).")
    beta: float = Field(0.04, ge=0, description="KL coefficient; 0 means no reference model is loaded.")
    epsilon: float = Field(0.2, gt=0, lt=1, description="Lower clip range of the ratio.")
    epsilon_high: float | None = Field(None, gt=0, description="Upper clip range; defaults to `epsilon`.")
    num_iterations: int = Field(1, ge=1, description="Optimizer steps per generation batch (mu).")
    loss_type: Literal[tuple(LOSS_TYPES)] = Field("dapo", description="Loss normalisation.")  # type: ignore[valid-type]
    importance_sampling_level: Literal["token", "sequence"] = Field("token", description="`sequence` is GSPO.")
    scale_rewards: Literal[SCALES] = Field(  # type: ignore[valid-type]
        "group", description="Advantage scaling for a spec with `aggregate: sum`; none: Dr. GRPO. With "
        "`normalize_then_sum` the totals are scaled over the batch, as TRL does (any other value is an error).")
    # Generation
    temperature: float = Field(0.9, gt=0, description="Sampling temperature (also divides logits in the loss).")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling.")
    top_k: int = Field(0, ge=0, description="Top-k sampling; 0 disables it.")
    max_prompt_length: int = Field(512, ge=1, description="Prompts are truncated on the left to this many tokens.")
    max_completion_length: int = Field(256, ge=1, description="Most tokens generated per completion.")
    generation_backend: Literal["auto", "hf"] = Field(
        "auto", description="auto: grpo_core's lean decode loop for Llama/Qwen2/Qwen3, else HF generate; hf: always HF.")
    mask_truncated_completions: bool = Field(False, description="Leave completions without EOS out of the loss.")
    # Optimisation
    learning_rate: float = Field(1e-6, gt=0, description="Peak learning rate (AdamW).")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    adam_beta1: float = Field(0.9, ge=0, lt=1, description="AdamW beta1.")
    adam_beta2: float = Field(0.999, ge=0, lt=1, description="AdamW beta2.")
    max_grad_norm: float = Field(1.0, ge=0, description="Gradient clipping; 0 disables it.")
    lr_scheduler_type: Literal["constant", "linear", "cosine", "constant_with_warmup"] = Field(
        "linear", description="Learning-rate schedule (transformers.get_scheduler).")
    warmup_steps: int = Field(0, ge=0, description="Warm-up steps of the schedule.")
    per_device_train_batch_size: int = Field(8, ge=1, description="Completions per micro-batch per device.")
    gradient_accumulation_steps: int = Field(1, ge=1, description="Micro-batches per optimizer step.")
    max_steps: int | None = Field(None, ge=1, description="Optimizer steps; overrides `num_train_epochs`.")
    num_train_epochs: float = Field(1.0, gt=0, description="Passes over the prompts when `max_steps` is unset.")
    seed: int = Field(42, description="Seed of model init, data order and sampling.")
    # Runtime
    device: Literal["auto", "cpu", "cuda", "mps"] = Field("auto", description="auto: cuda > mps > cpu.")
    bf16: bool | None = Field(None, description="bf16 autocast; null: on for CUDA with bf16 support, off elsewhere.")
    torch_threads: int | None = Field(
        None, ge=1, description="CPU threads for torch; null: torch's default. 1 is fastest on a busy machine.")
    logprob_chunk_mib: int = Field(64, ge=1, description="Memory budget of one chunk of lm_head logits.")
    output_dir: str = Field("outputs/grpo", description="Where metrics, checkpoints and the plot go.")
    overwrite_output_dir: bool = Field(False, description="Start afresh even if output_dir has checkpoints.")
    disable_dropout: bool = Field(True, description="Zero dropout so training log-probs match sampling.")
    logging_steps: int = Field(1, ge=1, description="Log metrics every N steps.")
    save_steps: int = Field(0, ge=0, description="Checkpoint every N steps; 0: only at the end and on a signal.")
    save_total_limit: int | None = Field(2, ge=1, description="Keep at most this many checkpoints.")
    report_to: list[Literal["tensorboard"]] = Field(default_factory=list, description="Extra metric sinks.")
    plot: bool = Field(True, description="Write metrics.png at the end.")
    progress: bool = Field(True, description="Show a live progress bar (rank 0).")
    # Evaluation
    eval_steps: int = Field(0, ge=0, description="Evaluate every N steps (and at start and end); 0 disables it.")
    eval_do_sample: bool = Field(False, description="Sample at eval (with `temperature`) instead of greedy.")
    eval_batch_size: int = Field(64, ge=1, description="Prompts per eval generate call.")

    # The run's registry (built-ins, entry points and `plugins`), built once by `validate_config`.
    _registry: Registry | None = PrivateAttr(None)

    @property
    def registry(self) -> Registry:
        """The one registry of this run: the rewards were validated against it and are built from it."""
        if self._registry is None:  # a config made without validate_config (e.g. TrainConfig(...))
            registry, problems = _plugin_registry(self.plugins, no_lines, None)
            if problems:
                raise ConfigError(problems, "training config")
            self._registry = registry
        return self._registry

    @field_validator("scale_rewards")
    @classmethod
    def _scale_fits_aggregate(cls, value: str, info: ValidationInfo) -> str:
        """Given explicitly (a default is not validated), it must mean something under the spec's `aggregate`."""
        rewards = info.data.get("rewards")
        problem = scale_problem(rewards.aggregate, value) if isinstance(rewards, RewardSpec) else None
        if problem:
            raise ValueError(problem)
        return value

    @property
    def clip_high(self) -> float:
        return self.epsilon if self.epsilon_high is None else self.epsilon_high

    @property
    def generation_batch_size(self) -> int:
        """Completions generated per rank per generation (one optimizer step's worth, as in TRL)."""
        return self.per_device_train_batch_size * self.gradient_accumulation_steps


# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Override:
    """One `--set KEY=VALUE` that was applied: where it went, so problems there are blamed on it."""

    arg: str
    loc: tuple[str | int, ...]

    def blame(self, problem: Problem) -> Problem:
        """`problem` attributed to this override when it lies at or below the overridden path."""
        here = format_loc(self.loc)
        if problem.path != here and not problem.path.startswith((here + ".", here + "[")):
            return problem
        return replace(problem, path="" if problem.path == here else problem.path, source=f"--set {self.arg}",
                       line=None)


def _set_path(data: dict[str, Any], parts: list[str], value: Any) -> tuple[tuple[str | int, ...], str | None]:
    """Set `value` at the dotted path; a list is entered by index. Returns the location and an error."""
    node: Any = data
    loc: list[str | int] = []
    for depth, part in enumerate(parts):
        key: str | int = part
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                where = format_loc(loc)
                return tuple(loc), f"{where} is a list of {len(node)} items: address one by its index (0 to " \
                    f"{len(node) - 1}), got {part!r}"
            key = int(part)
        elif not isinstance(node, dict):
            return tuple(loc), f"cannot set inside {format_loc(loc)}: it is a {type(node).__name__} ({node!r}), " \
                "not a mapping or a list"
        loc.append(key)
        if depth == len(parts) - 1:
            node[key] = value
        else:
            if isinstance(node, dict) and node.get(key) is None:  # a new (or empty) section
                node[key] = {}
            node = node[key]
    return tuple(loc), None


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> tuple[list[Override], list[Problem]]:
    """Apply each `a.b.0.c=value` (value parsed as YAML; a number addresses a list item) in place.

    Returns the overrides applied (to blame later problems on them) and the problems of the others.
    """
    applied, problems = [], []
    for item in overrides:
        key, sep, raw = item.partition("=")
        parts = key.strip().split(".")
        if not sep or not all(parts):
            problems.append(Problem("", "an override must look like key.path=value", f"--set {item}"))
            continue
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError:
            value = raw
        loc, error = _set_path(data, parts, value)
        if error:
            problems.append(Problem("", error, f"--set {item}"))
        else:
            applied.append(Override(item, loc))
    return applied, problems


def _plugin_registry(names: Any, line_of: LineOf, source: str | None) -> tuple[Registry, list[Problem]]:
    if not names:
        return get_registry(), []
    problems, modules = [], []
    for i, name in enumerate(names if isinstance(names, list) else []):
        try:
            modules.append(importlib.import_module(str(name)))
        except Exception as exc:  # noqa: BLE001 - any import failure is the user's plugin
            problems.append(Problem(f"plugins[{i}]", f"cannot import {name!r}: {exc}", source, line_of(("plugins", i))))
    return load_registry(extra_plugins=modules), problems


# Stands in for a rewards section that is missing or whose file is invalid (reported with its own
# locations) so that the rest of the config is still validated and every problem is listed at once.
_PLACEHOLDER_SPEC = RewardSpec.model_construct(scorers=[], on_error="none")


def _rewards(data: dict[str, Any], base: Path, registry: Registry, source: str | None,
             line_of: LineOf) -> tuple[Any, list[Problem]]:
    """The `rewards` to validate with the config: inline data as it is (the config's validation
    validates it as a `RewardSpec`), a path's spec validated with its own file and lines."""
    rewards = data.get("rewards")
    if rewards is None:
        return _PLACEHOLDER_SPEC, [Problem("rewards", "missing: a reward spec inline or a path to one", source,
                                           line_of(()))]
    if not isinstance(rewards, str):
        return rewards, []
    path = Path(rewards) if Path(rewards).is_absolute() else base / rewards  # relative to the config file
    try:
        spec_data, spec_lines = read_structured_file(path, "reward spec")
    except ConfigError as exc:
        return _PLACEHOLDER_SPEC, exc.problems
    spec, problems = validate_spec(spec_data, registry, source=str(path), line_of=spec_lines)
    return spec or _PLACEHOLDER_SPEC, problems


def _data_problems(data: DataConfig, base: Path) -> Found:
    from grpo_core.data import get_task

    found: Found = []
    if data.task is not None:
        try:
            task = get_task(data.task)
        except UnknownNameError as exc:
            return [(("task",), str(exc))]
        if task.params is not None:
            try:
                task.params.model_validate(data.options)
            except ValidationError as exc:
                found += [(("options", *loc), message) for loc, message in messages(exc, task.params)]
    for key in ("path", "eval_path"):
        value = getattr(data, key)
        if value is not None:
            full = Path(value) if Path(value).is_absolute() else base / value
            if not full.is_file():
                found.append(((key,), f"no such file: {full}"))
            else:
                setattr(data, key, str(full))
    return found


def _model_source_problems(name: str) -> Found:
    """Names that can never resolve (no such directory or file, unknown alias), found without loading
    or touching the network; an offline hub id is reported when the model is loaded."""
    from grpo_core.hub import ALIASES, _looks_like_hub_id

    path = Path(name).expanduser()
    if path.is_dir() or name.lower() in ALIASES or (path.suffix == ".gguf" and path.is_file()):
        return []
    if path.suffix == ".gguf":
        message = f"no such model file: {path}"
    elif _looks_like_hub_id(name):
        return []
    elif os.sep in name or name.startswith((".", "~")):
        message = f"no such model directory: {path}"
    else:
        message = f"unknown model {name!r}: not a directory, a hub id (owner/name) or an alias ({', '.join(ALIASES)})"
    return [(("name_or_path",), message)]


def _lora_problems(data: dict[str, Any], source: str | None, line_of: LineOf) -> list[Problem]:
    if data.get("lora") is None or importlib.util.find_spec("peft") is not None:
        return []
    return [Problem("lora", "LoRA needs the `peft` package: pip install 'grpo-rewards[lora]'", source,
                    line_of(("lora",)))]


def _model_problems(model: ModelConfig) -> Found:
    if model.config is None:
        return _model_source_problems(model.name_or_path)
    from transformers import AutoConfig

    kwargs = dict(model.config)
    model_type = kwargs.pop("model_type", None)
    if not isinstance(model_type, str):
        return [(("config", "model_type"), "missing: the HF model type (llama, qwen2, gpt2, ...)")]
    try:
        AutoConfig.for_model(model_type, **kwargs)
    except Exception as exc:  # noqa: BLE001 - transformers raises ValueError/KeyError for unknown types
        return [(("config", "model_type"), f"cannot build a config: {exc}")]
    return []


def _batch_problems(data: dict[str, Any], source: str | None, line_of: LineOf) -> list[Problem]:
    """Groups must be whole: checked on the raw values so it is reported alongside everything else."""
    fields = TrainConfig.model_fields
    keys = ("per_device_train_batch_size", "gradient_accumulation_steps", "num_generations")
    values = [data.get(k, fields[k].default) for k in keys]
    if not all(isinstance(v, int) and v > 0 for v in values):
        return []  # reported by field validation
    batch, accumulation, groups = values
    if (batch * accumulation) % groups:
        loc = ("num_generations",) if "num_generations" in data else ("per_device_train_batch_size",)
        return [Problem(loc[0], f"per_device_train_batch_size * gradient_accumulation_steps ({batch * accumulation}) "
                        f"must be divisible by num_generations ({groups}), so groups are whole", source, line_of(loc))]
    return []


# TRL GRPOConfig (and transformers TrainingArguments) names that users bring along, with where the
# concept lives here: a pointer beats a bare "unknown field".
TRL_NAMES = {
    "gradient_checkpointing": "here it is `model.gradient_checkpointing`",
    "per_device_eval_batch_size": "here it is `eval_batch_size`",
    "eval_strategy": "evaluation is on when `eval_steps` > 0",
    "evaluation_strategy": "evaluation is on when `eval_steps` > 0",
    "save_strategy": "checkpoints are on when `save_steps` > 0",
    "logging_strategy": "use `logging_steps`",
    "model_name_or_path": "here it is `model.name_or_path`",
    "torch_dtype": "here it is `model.dtype`",
    "dtype": "here it is `model.dtype`",
    "fp16": "only bf16 autocast is supported: `bf16`",
    "warmup_ratio": "use `warmup_steps`",
    "reward_weights": "weights live in the reward spec: `rewards.scorers[i].weight`",
    "reward_funcs": "rewards are a spec: `rewards`",
    "dataset_name": "here it is `data.dataset`",
    "use_cpu": "use `device: cpu`",
    "use_vllm": "generation runs in-process (grpo_core.decode or HF generate); vLLM is not supported",
}

# Config keys holding a file or directory: written in the file, relative to the file's directory.
PATH_KEYS = (("output_dir",), ("data", "path"), ("data", "eval_path"), ("rewards",), ("model", "name_or_path"),
             ("model", "tokenizer"))


def resolve_paths(data: dict[str, Any], base: Path, overridden: list[tuple[str | int, ...]]) -> None:
    """Make relative paths absolute in place: those written in the config file against its directory,
    those given with `--set` against the current directory (as a shell user expects).

    A model name or tokenizer is a path only when that directory or file exists there: otherwise
    it stays a hub id, an alias or `builtin:NAME`.
    """
    for keys in PATH_KEYS:
        *parents, last = keys
        node: Any = data
        for key in parents:
            node = node.get(key) if isinstance(node, dict) else None
        if not isinstance(node, dict) or not isinstance(node.get(last), str) or not node[last]:
            continue
        value = Path(node[last]).expanduser()
        if value.is_absolute():
            continue
        root = Path.cwd() if any(keys[:len(o)] == o or o[:len(keys)] == keys for o in overridden) else base
        if keys[0] == "model" and not (root / value).exists():
            continue
        node[last] = os.path.normpath(root / value)  # no `examples/../outputs` in what users see


def _output_dir_problems(output_dir: Any, source: str | None, line_of: LineOf) -> list[Problem]:
    if not isinstance(output_dir, str):
        return []
    for path in (Path(output_dir), *Path(output_dir).parents):
        if path.exists():
            if path.is_dir():
                return []
            what = "is an existing file" if path == Path(output_dir) else f"is inside {path}, an existing file"
            return [Problem("output_dir", f"{output_dir} {what}, not a directory", source, line_of(("output_dir",)))]
    return []


def validate_config(data: Any, source: str | None = None, line_of: LineOf | None = None,
                    base: Path | None = None) -> TrainConfig:
    """Validate plain config data; raises one `ConfigError` listing every problem."""
    line_of = line_of or no_lines
    base = base or Path.cwd()
    if not isinstance(data, dict):
        raise ConfigError([Problem("", f"a training config must be a mapping, got {type(data).__name__}", source)],
                          "training config")
    registry, problems = _plugin_registry(data.get("plugins"), line_of, source)
    rewards, reward_problems = _rewards(data, base, registry, source, line_of)
    # Inline rewards are validated here, with the spec's own validators (the registry in the
    # context); a spec read from its file is a model instance, which pydantic keeps as it is.
    # `base` in the context: the sections also check what pydantic alone cannot (files, task, model type).
    config, config_problems = validate(TrainConfig, {**data, "rewards": rewards}, source=source, line_of=line_of,
                                       context={"registry": registry, "base": base}, hints=TRL_NAMES)
    problems += reward_problems + config_problems
    problems += _output_dir_problems(data.get("output_dir"), source, line_of)
    problems += _batch_problems(data, source, line_of) + _lora_problems(data, source, line_of)
    if problems:
        raise ConfigError(problems, "training config")
    assert config is not None
    config._registry = registry
    return config


def load_config(path: str | Path, overrides: list[str] | None = None) -> TrainConfig:
    """Read, override and validate a training config file."""
    data, line_of = read_structured_file(path, "training config")
    data = data if data is not None else {}
    if not isinstance(data, dict):  # reported by validate_config
        return validate_config(data, str(path), line_of)
    applied, problems = apply_overrides(data, list(overrides or []))
    if problems:
        raise ConfigError(problems, "training config")
    base = Path(path).resolve().parent
    resolve_paths(data, base, [o.loc for o in applied])
    try:
        return validate_config(data, str(path), line_of, base)
    except ConfigError as exc:
        blamed = []
        for problem in exc.problems:
            for override in reversed(applied):  # the last override of a path is the one that counts
                if (moved := override.blame(problem)) is not problem:
                    problem = moved
                    break
            blamed.append(problem)
        raise ConfigError(blamed, "training config") from None
