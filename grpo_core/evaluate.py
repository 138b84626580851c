"""`grpo-train eval`: a model's greedy accuracy, pass@k and scorer means on held-out problems, with 95% intervals.

    grpo-train eval examples/smollm2_rg.yaml --size 512 --output base.json
    grpo-train eval examples/smollm2_rg.yaml --model outputs/smollm2_rg/final --compare base.json

The problems are a task's held-out split (from a training config, or `--task`/`--data`), the
completions come from grpo_core.generate (the trainer's prompt pipeline and decode loop), and the
scores from the reward spec. A problem counts as solved when the accuracy scorer (the spec's
`math_accuracy`, or `--accuracy-scorer`) gives it at least `--threshold`. Statistics: grpo_core/stats.py.
The JSON keeps every problem's outcome, so a later run compares with it (`--compare`) without
generating again; the comparison refuses results made on other problems.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_core import stats
from grpo_rewards.errors import UserError
from grpo_rewards.fileio import OutputFile, write_atomic

RESULT_FORMAT = "grpo-train-eval/1"


@dataclass
class Settings:
    """How completions are made and judged (everything but the model and the problems)."""

    max_new_tokens: int = 256
    max_prompt_length: int | None = None
    batch_size: int = 32
    num_samples: int = 8          # sampled completions per problem for pass@k; 0: greedy only
    ks: list[int] = field(default_factory=lambda: [1, 8])
    temperature: float = 1.0      # of the sampled completions (greedy ones have none)
    top_p: float = 1.0
    accuracy_scorer: str | None = None
    threshold: float = 1.0
    seed: int = 0
    bootstrap_rounds: int = 2000
    progress: bool = True

    def check(self) -> None:
        if self.num_samples < 0 or self.max_new_tokens < 1 or self.batch_size < 1 or self.bootstrap_rounds < 100:
            raise UserError("--num-samples must be >= 0, --max-new-tokens and --batch-size >= 1, "
                            "--bootstrap-rounds >= 100")
        bad = [k for k in self.ks if not 1 <= k <= max(self.num_samples, 1)]
        if self.num_samples and bad:
            raise UserError(f"--k {bad}: each k must be between 1 and --num-samples ({self.num_samples})")


def problem_digest(records: Sequence[Mapping[str, Any]]) -> str:
    """A fingerprint of the problems (prompts and reference fields) that a comparison must share."""
    text = json.dumps([dict(r) for r in records], sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def accuracy_alias(reward: Any, wanted: str | None) -> str:
    """The member whose value decides "solved": `wanted`, else the first `math_accuracy`, else the first."""
    aliases = reward.aliases
    if wanted is not None:
        if wanted not in aliases:
            raise UserError(f"--accuracy-scorer {wanted!r} is not in the reward spec (its scorers: {', '.join(aliases)})")
        return wanted
    by_scorer = [m.alias for m in reward.members if m.scorer.name == "math_accuracy"]
    return (by_scorer or aliases)[0]


def score_values(reward: Any, rows: Sequence[Mapping[str, Any]], group_size: int | None) -> dict[str, list[float | None]]:
    """Each scorer's value per completion row (None where it could not score)."""
    return reward.score(list(rows), group_size).values


def scorer_means(values: Mapping[str, Sequence[float | None]]) -> dict[str, dict[str, float | int | None]]:
    """Mean of each scorer over the values it gave, and how many it could not give."""
    out: dict[str, dict[str, float | int | None]] = {}
    for alias, column in values.items():
        given = [v for v in column if v is not None]
        out[alias] = {"mean": sum(given) / len(given) if given else None, "unscored": len(column) - len(given)}
    return out


def solved(values: Sequence[float | None], threshold: float) -> list[bool]:
    """An unscorable completion (None) does not count as solved; the result reports how many there were."""
    return [v is not None and v >= threshold for v in values]


def summarize(greedy_solved: Sequence[bool], sample_correct: Sequence[int] | None, num_samples: int,
              ks: Sequence[int], seed: int, rounds: int) -> dict[str, Any]:
    """Greedy accuracy (Wilson) and pass@k (bootstrap over problems) from per-problem outcomes."""
    out: dict[str, Any] = {"greedy_accuracy": stats.proportion(greedy_solved).as_dict()}
    if sample_correct is not None and num_samples:
        for k in sorted(set(ks)):
            out[f"pass@{k}"] = stats.pass_at_k_estimate(sample_correct, num_samples, k, seed, rounds).as_dict()
    return out


def per_problem_pass_at_k(result: Mapping[str, Any], k: int) -> list[float]:
    n = result["settings"]["num_samples"]
    return [stats.pass_at_k(n, p["samples_solved"], k) for p in result["problems"]]


def compare(result: Mapping[str, Any], baseline: Mapping[str, Any], seed: int, rounds: int) -> dict[str, Any]:
    """`result` minus `baseline` on the same problems: greedy accuracy and each pass@k both have."""
    if baseline.get("problem_digest") != result["problem_digest"]:
        raise UserError(f"the baseline was evaluated on other problems (digest {baseline.get('problem_digest')} "
                        f"vs {result['problem_digest']}): evaluate both on the same task, split and --size")
    out: dict[str, Any] = {"baseline_model": baseline.get("model")}
    greedy = lambda r: [float(p["greedy_solved"]) for p in r["problems"]]  # noqa: E731
    out["greedy_accuracy"] = stats.paired_difference(greedy(baseline), greedy(result), seed, rounds).as_dict()
    for key in result["metrics"]:
        if key.startswith("pass@") and key in baseline["metrics"]:
            k = int(key.split("@")[1])
            diff = stats.paired_difference(per_problem_pass_at_k(baseline, k), per_problem_pass_at_k(result, k),
                                           seed, rounds)
            out[key] = diff.as_dict()
    return out


def evaluate(model: Any, tokenizer: Any, records: Sequence[Mapping[str, Any]], reward: Any,
             settings: Settings) -> dict[str, Any]:
    """Generate (greedy, then `num_samples` sampled per problem), score, and summarise one model."""
    from grpo_core.generate import generate_completions

    settings.check()
    alias = accuracy_alias(reward, settings.accuracy_scorer)
    common = dict(max_new_tokens=settings.max_new_tokens, batch_size=settings.batch_size, seed=settings.seed,
                  max_prompt_length=settings.max_prompt_length, progress=settings.progress)
    started = time.perf_counter()
    greedy_rows = generate_completions(model, tokenizer, records, **common)
    greedy = score_values(reward, greedy_rows, None)
    greedy_solved = solved(greedy[alias], settings.threshold)
    problems = [{"index": i, "greedy_solved": ok, "greedy": {a: greedy[a][i] for a in greedy}}
                for i, ok in enumerate(greedy_solved)]
    result: dict[str, Any] = {"greedy_scorers": scorer_means(greedy)}
    sample_correct = None
    if settings.num_samples:
        n = settings.num_samples
        sampled_rows = generate_completions(model, tokenizer, records, num_samples=n, temperature=settings.temperature,
                                            top_p=settings.top_p, **common)
        sampled = score_values(reward, sampled_rows, n)
        ok = solved(sampled[alias], settings.threshold)
        sample_correct = [sum(ok[i * n:(i + 1) * n]) for i in range(len(records))]
        for problem, c in zip(problems, sample_correct):
            problem["samples_solved"] = c
        result["sampled_scorers"] = scorer_means(sampled)
    result["metrics"] = summarize(greedy_solved, sample_correct, settings.num_samples, settings.ks,
                                  settings.seed, settings.bootstrap_rounds)
    result |= {"format": RESULT_FORMAT, "accuracy_scorer": alias, "problem_digest": problem_digest(records),
               "num_problems": len(records), "seconds": round(time.perf_counter() - started, 2),
               "settings": {k: v for k, v in settings.__dict__.items() if k != "progress"},
               "problems": problems}
    result["completions"] = {"greedy": greedy_rows, **({"sampled": sampled_rows} if settings.num_samples else {})}
    return result


def read_result(path: str | Path) -> dict[str, Any]:
    """A JSON file written by `grpo-train eval` (for `--compare`)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"--compare {path}: no such file") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"--compare {path}: not a JSON result of grpo-train eval ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != RESULT_FORMAT:
        raise UserError(f"--compare {path}: not a result of grpo-train eval (no \"format\": \"{RESULT_FORMAT}\")")
    return data


def write_result(path: str | Path, result: Mapping[str, Any]) -> None:
    write_atomic(path, json.dumps(result, indent=1, ensure_ascii=False) + "\n")


# ---------------------------------------------------------------------------------------------
# The command


def eval_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="grpo-train eval",
        description="Greedy accuracy, pass@k and scorer means of a model on held-out problems, with 95% intervals.",
        epilog="Problems and rewards come from CONFIG (its held-out split and `rewards`), or from --task/--data "
               "and --spec. Intervals: Wilson for greedy accuracy, a seeded bootstrap over problems for pass@k, "
               "a paired bootstrap over problems for --compare.")
    parser.add_argument("config", nargs="?", help="a training config: its data (held-out split), rewards, "
                        "lengths, temperature and model are the defaults")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value, as `grpo-train CONFIG --set` does")
    parser.add_argument("--model", help="directory, alias, .gguf or hub id (default: the config's model); an "
                        "adapter directory is applied on top of its base model")
    parser.add_argument("--adapter", help="a LoRA adapter directory to apply on top of --model")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--task", help="a task name (e.g. arith_words, reasoning_gym:chain_sum): its held-out split")
    source.add_argument("--data", help="a JSONL file of held-out problems, each with a 'prompt'")
    parser.add_argument("--task-options", default="{}", help="the task's options as YAML/JSON, e.g. '{shots: 1}'")
    parser.add_argument("--task-seed", type=int, default=43, help="seed of --task's held-out split (default 43: "
                        "what a training run with seed 42 holds out)")
    parser.add_argument("--spec", help="a reward spec file (default: the config's rewards)")
    parser.add_argument("--size", type=int, help="number of held-out problems (default: the config's eval_size, "
                        "else all of --data, else 512)")
    parser.add_argument("--num-samples", type=int, default=8, help="sampled completions per problem for pass@k; "
                        "0 for greedy only (default 8)")
    parser.add_argument("--k", type=int, nargs="+", help="the k of pass@k (default: 1 and --num-samples)")
    parser.add_argument("--temperature", type=float, help="of the sampled completions (default: the config's, else 1.0)")
    parser.add_argument("--top-p", type=float, help="default: the config's, else 1.0")
    parser.add_argument("--max-new-tokens", type=int, help="default: the config's max_completion_length, else 256")
    parser.add_argument("--batch-size", type=int, help="sequences per generate call (default: the config's "
                        "eval_batch_size, else 32)")
    parser.add_argument("--accuracy-scorer", help="the spec member (alias) whose value decides 'solved' "
                        "(default: the first math_accuracy, else the first member)")
    parser.add_argument("--threshold", type=float, default=1.0, help="solved: accuracy scorer value >= this (default 1)")
    parser.add_argument("--compare", help="a result JSON of an earlier `grpo-train eval` on the same problems: "
                        "report this model minus that one, with paired 95%% intervals")
    parser.add_argument("--output", help="write the result JSON here (atomically)")
    parser.add_argument("--completions", help="also write every completion with its prompt as JSONL")
    parser.add_argument("--seed", type=int, default=0, help="sampling and bootstrap seed (default 0)")
    parser.add_argument("--bootstrap-rounds", type=int, default=2000)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--threads", type=int, help="torch CPU threads")
    parser.add_argument("--no-progress", action="store_true")
    return parser


@dataclass
class Inputs:
    records: list[dict[str, Any]]
    where: str                 # where the problems came from, for the result
    spec: Any                  # a RewardSpec or a spec file path
    registry: Any = None
    model: str | None = None
    defaults: dict[str, Any] = field(default_factory=dict)


def load_inputs(args: argparse.Namespace) -> Inputs:
    """The held-out problems, the reward spec and the generation defaults, from a config or the flags."""
    from grpo_core.data import get_task, load_splits

    if args.config:
        from grpo_core.config import load_config

        cfg = load_config(args.config, args.overrides)
        size = args.size or cfg.data.eval_size
        if not size:
            raise UserError(f"{args.config}: data.eval_size is 0; give --size N")
        records = load_splits(cfg.data.model_copy(update={"eval_size": size}), cfg.seed)[1]
        defaults = {"max_new_tokens": cfg.max_completion_length, "max_prompt_length": cfg.max_prompt_length,
                    "temperature": cfg.temperature, "top_p": cfg.top_p, "batch_size": cfg.eval_batch_size}
        where = cfg.data.task or cfg.data.eval_path or cfg.data.path or cfg.data.dataset
        return Inputs(records, f"{where} (held-out, {args.config})", args.spec or cfg.rewards, cfg.registry,
                      cfg.model.name_or_path, defaults)
    if args.spec is None or not (args.task or args.data):
        raise UserError("give a training CONFIG, or --task NAME (or --data FILE) and --spec FILE")
    if args.data:
        from grpo_core.generate import read_prompt_records

        return Inputs(read_prompt_records(args.data, args.size), args.data, args.spec)
    task = get_task(args.task)
    options = _task_options(task, args.task_options)
    records = task.build("eval", args.size or 512, args.task_seed, **options)
    return Inputs(records, f"{args.task} (held-out, seed {args.task_seed})", args.spec)


def _task_options(task: Any, text: str) -> dict[str, Any]:
    import yaml
    from pydantic import ValidationError

    try:
        options = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise UserError(f"--task-options is not YAML/JSON: {exc}") from None
    if not isinstance(options, dict):
        raise UserError(f"--task-options must be a mapping, e.g. '{{shots: 1}}', not {options!r:.60}")
    if task.params is None:
        return options
    try:
        return task.params.model_validate(options).model_dump()
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'options'}: {e['msg']}" for e in exc.errors())
        raise UserError(f"--task-options for task {task.name!r}: {problems}") from None


def load_model(name: str | None, adapter: str | None, dtype: str, device: str) -> tuple[Any, Any, str]:
    """(model, tokenizer, description); an adapter directory given as the model loads on its base model."""
    from grpo_core.hub import load_pretrained
    from grpo_core.lora import is_adapter_dir, load_adapter

    if name is None:
        raise UserError("no model: give --model (the config builds its model from scratch)")
    if adapter is None and Path(name).is_dir() and is_adapter_dir(name):
        adapter = name
        name = json.loads((Path(name) / "adapter_config.json").read_text()).get("base_model_name_or_path")
        if not name:
            raise UserError(f"{adapter}: an adapter without base_model_name_or_path; give --model BASE --adapter DIR")
    model, tokenizer = load_pretrained(name, dtype=dtype, device=device)
    if adapter:
        model = load_adapter(model, adapter)
    return model.eval(), tokenizer, f"{name} + adapter {adapter}" if adapter else str(name)


def settings_from(args: argparse.Namespace, defaults: Mapping[str, Any]) -> Settings:
    pick = lambda flag, key, fallback: flag if flag is not None else defaults.get(key, fallback)  # noqa: E731
    return Settings(
        max_new_tokens=pick(args.max_new_tokens, "max_new_tokens", 256), max_prompt_length=defaults.get("max_prompt_length"),
        batch_size=pick(args.batch_size, "batch_size", 32), num_samples=args.num_samples,
        ks=args.k or sorted({1, max(args.num_samples, 1)}), temperature=pick(args.temperature, "temperature", 1.0),
        top_p=pick(args.top_p, "top_p", 1.0), accuracy_scorer=args.accuracy_scorer, threshold=args.threshold,
        seed=args.seed, bootstrap_rounds=args.bootstrap_rounds, progress=not args.no_progress)


def _interval(entry: Mapping[str, Any], signed: bool = False) -> str:
    fmt = "{:+.3f}" if signed else "{:.3f}"
    return f"{fmt.format(entry['value'])}  [{fmt.format(entry['low'])}, {fmt.format(entry['high'])}]"


def render_table(result: Mapping[str, Any]) -> Any:
    """A rich table: each metric with its interval, the scorer means, and the comparison when there is one."""
    from rich.table import Table

    n = result["num_problems"]
    table = Table(title=f"{result['model']} on {n} problems of {result['problems_from']}")
    for column in ("metric", "value  [95% interval]", "how"):
        table.add_column(column)
    for key, entry in result["metrics"].items():
        how = entry["method"] if key != "greedy_accuracy" else f"Wilson ({round(entry['value'] * n)}/{n})"
        table.add_row(key.replace("_", " "), _interval(entry), how)
    for label, key in (("greedy", "greedy_scorers"), ("sampled", "sampled_scorers")):
        for alias, mean in result.get(key, {}).items():
            value = "n/a" if mean["mean"] is None else f"{mean['mean']:.3f}"
            table.add_row(f"{alias} mean ({label})", value, f"{mean['unscored']} unscored")
    for key, entry in result.get("comparison", {}).items():
        if isinstance(entry, Mapping):
            table.add_row(f"{key.replace('_', ' ')} - baseline", _interval(entry, signed=True),
                          f"paired bootstrap; better on {entry['better']}, worse on {entry['worse']}")
    return table


def main(argv: Sequence[str] | None = None) -> int:
    """`grpo-train eval ...`; returns the exit status (2 for a user error, printed without traceback)."""
    from rich.console import Console

    args = eval_parser().parse_args(argv)
    outputs: list[OutputFile] = []
    try:
        outputs = [OutputFile(path, flag=flag) for path, flag in ((args.output, "--output"),
                                                                  (args.completions, "--completions")) if path]
        baseline = read_result(args.compare) if args.compare else None
        if args.threads:
            import torch

            torch.set_num_threads(args.threads)
        inputs = load_inputs(args)
        settings = settings_from(args, inputs.defaults)
        settings.check()
        from grpo_core.generate import write_jsonl_atomic
        from grpo_rewards.compose import build

        reward = build(inputs.spec, inputs.registry)
        accuracy_alias(reward, settings.accuracy_scorer)  # a wrong alias fails before the model loads
        with reward:  # its workers start while the model loads
            model, tokenizer, described = load_model(args.model or inputs.model, args.adapter, args.dtype,
                                                     args.device)
            result = {"model": described, "problems_from": inputs.where,
                      **evaluate(model, tokenizer, inputs.records, reward, settings)}
        completions = result.pop("completions")
        if baseline is not None:
            result["comparison"] = compare(result, baseline, settings.seed, settings.bootstrap_rounds)
        if args.completions:
            write_jsonl_atomic(args.completions, completions["greedy"] + completions.get("sampled", []))
        if args.output:
            write_result(args.output, result)
    except UserError as exc:
        print(f"grpo-train eval: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # an output directory that cannot be written, a model file that cannot be read
        print(f"grpo-train eval: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        said = "; ".join(o.outcome() for o in outputs) or "no output was asked for"
        print(f"grpo-train eval: interrupted; {said}", file=sys.stderr)
        return 130
    Console().print(render_table(result))
    if args.output:
        print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
