"""`grpo-train CONFIG [--set key=value ...] [--resume]`, and
`grpo-train generate --model PATH_OR_ALIAS --data FILE --output completions.jsonl [--num-samples K]`
(batched generation for evaluation with `grpo-rewards score`; see grpo_core/generate.py), and
`grpo-train eval [CONFIG] [--model M] [--compare BASE.json]` (accuracy and pass@k with intervals;
see grpo_core/evaluate.py).

Exit codes: 0 done; 2 bad config or input (every problem listed, no traceback);
130 / 143 stopped by SIGINT / SIGTERM after saving a checkpoint (continue with --resume).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import sys

import grpo_rewards
from grpo_rewards.errors import UserError


COMMANDS = """commands:
  grpo-train CONFIG [--set KEY=VALUE ...] [--resume]   train (this page)
  grpo-train generate --model M --data FILE --output FILE
                                                        write completions for `grpo-rewards score`
                                                        (`grpo-train generate --help`)
  grpo-train eval [CONFIG] [--model M] [--compare BASE.json]
                                                        greedy accuracy and pass@k with 95% intervals
                                                        (`grpo-train eval --help`)"""
SUBCOMMANDS = {"generate": "grpo_core.generate", "eval": "grpo_core.evaluate"}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="grpo-train", description="Train a causal LM with GRPO.", epilog=COMMANDS,
        usage="%(prog)s [-h] [--version] [--verbose] CONFIG [--set KEY=VALUE ...] [--resume]\n"
              "       %(prog)s generate --model M --data FILE --output FILE [...]\n"
              "       %(prog)s eval [CONFIG] [--model M] [--output FILE] [...]",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {grpo_rewards.__version__}")
    parser.add_argument("config", help="training config (YAML, TOML or JSON)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value, e.g. --set max_steps=10 --set model.dtype=bfloat16 "
                             "--set rewards.scorers.0.weight=2 (a number picks a list item; values parsed as "
                             "YAML; repeatable)")
    parser.add_argument("--resume", action="store_true",
                        help="continue from the newest checkpoint in output_dir (starts afresh if none; a run "
                             "that already reached its last step is left as it is)")
    parser.add_argument("--verbose", action="store_true",
                        help="show transformers' and the hub's loading bars and warnings (quiet by default)")
    return parser.parse_args(argv)


def quiet_libraries() -> None:
    """transformers' and huggingface_hub's loading bars and warnings, off unless the user set them:
    set through their environment variables, before either library is imported."""
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # Each command imports its module (torch, transformers) only when it runs: `--help` and a bad
    # config answer without loading them, and `generate` never loads the trainer.
    if argv[:1] in (["generate"], ["eval"]):  # subcommands; a config file is never named exactly so
        if "--verbose" not in argv:
            quiet_libraries()
        try:
            module = importlib.import_module(SUBCOMMANDS[argv[0]])
            return module.main([a for a in argv[1:] if a != "--verbose"])
        except KeyboardInterrupt:  # while importing: each command says what an interrupt after that left
            print(f"grpo-train {argv[0]}: interrupted before it started; no output written", file=sys.stderr)
            return 130
    args = parse_args(argv)
    if not args.verbose:
        quiet_libraries()
    try:
        from grpo_core.config import load_config

        config = load_config(args.config, args.overrides)
        from grpo_core.trainer import train

        summary = train(config, resume=args.resume)
    except UserError as exc:
        print(f"grpo-train: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # before training started (loading); during training a checkpoint is saved
        print("grpo-train: interrupted before training started; nothing written", file=sys.stderr)
        return 130
    if summary.get("complete"):
        print(f"grpo-train: the run in {summary['output_dir']} is complete (step {summary['step']} of "
              f"{summary['total_steps']}); raise max_steps to train further", file=sys.stderr)
        return 0
    if summary.get("interrupted"):
        print(f"grpo-train: stopped by {summary['interrupted']} at step {summary['step']}; checkpoint saved in "
              f"{summary['output_dir']} (continue with --resume)", file=sys.stderr)
        return 128 + signal.Signals[summary["interrupted"]].value
    if os.environ.get("RANK", "0") == "0":  # one summary line, from the first process under torchrun
        keys = ("step", "eval", "final_model", "plot", "metrics_file")
        print(json.dumps({k: summary[k] for k in keys if k in summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
