"""Metric sinks (rank 0 only): metrics.jsonl, a rich progress bar, optional TensorBoard, a PNG plot.

metrics.jsonl gets one JSON object per logged step (appended and flushed, so a killed run keeps
what it logged); on resume, lines after the checkpoint's step are dropped first, so every step
appears exactly once.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from grpo_rewards.fileio import atomic_path, write_atomic

METRICS_FILE = "metrics.jsonl"
PLOT_FILE = "metrics.png"


def average(window: list[dict[str, float]]) -> dict[str, float]:
    """Mean per key over the steps of a logging window (a key counts only where present and finite)."""
    sums: dict[str, list[float]] = {}
    for entry in window:
        for key, value in entry.items():
            if value is not None and math.isfinite(value):
                sums.setdefault(key, []).append(value)
    return {k: sum(v) / len(v) for k, v in sums.items()}


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    path = Path(path)
    if not path.exists():
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def truncate_after(path: Path, step: int) -> None:
    """Drop entries logged after `step` (the run died after them but before its next checkpoint)."""
    if not path.exists():
        return
    keep = [line for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip() and json.loads(line).get("step", 0) <= step]
    write_atomic(path, "".join(line + "\n" for line in keep))


class MetricsLog:
    def __init__(self, output_dir: Path, total_steps: int, tensorboard: bool, progress: bool, start_step: int = 0):
        self.path = output_dir / METRICS_FILE
        self.file = open(self.path, "a", encoding="utf-8")
        self.writer = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter  # needs the optional tensorboard package

            self.writer = SummaryWriter(str(output_dir / "tensorboard"))
        self.progress = self.task = None
        if progress:
            # rich's progress machinery only for a run that shows a bar (bench runs and torchrun ranks do not)
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.progress = Progress(TextColumn("[bold]GRPO"), BarColumn(), MofNCompleteColumn(),
                                     TimeRemainingColumn(), TextColumn("{task.description}"))
            self.progress.start()
            self.task = self.progress.add_task("", total=total_steps, completed=start_step)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        record = {"step": step, **{k: round(v, 6) if isinstance(v, float) else v for k, v in metrics.items()}}
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()
        if self.writer is not None:
            for key, value in metrics.items():
                self.writer.add_scalar(key, value, step)
        if self.progress is not None:
            shown = [f"{k}={metrics[k]:.3f}" for k in ("reward", "eval/reward", "kl") if k in metrics]
            self.progress.update(self.task, completed=step, description=" ".join(shown))

    def say(self, text: str) -> None:
        if self.progress is not None:
            self.progress.console.print(text)
        else:
            print(text, flush=True)

    def advance(self, step: int) -> None:
        if self.progress is not None:
            self.progress.update(self.task, completed=step)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
        if self.writer is not None:
            self.writer.close()
        self.file.close()


def plot_metrics(metrics_path: Path, out_path: Path) -> Path | None:
    """Reward curves (total and per scorer, train and eval) and KL, as a PNG (written atomically)."""
    records = read_metrics(metrics_path)
    if not records:
        return None
    import matplotlib  # heavy to import, and only a run that plots needs it

    matplotlib.use("Agg")  # before pyplot: no display needed
    import matplotlib.pyplot as plt

    def series(key: str) -> tuple[list[int], list[float]]:
        points = [(r["step"], r[key]) for r in records if isinstance(r.get(key), (int, float))]
        return [p[0] for p in points], [p[1] for p in points]

    keys = sorted({k for r in records for k in r})
    reward_keys = ["reward"] + [k for k in keys if k.startswith("reward/")]
    eval_keys = [k for k in keys if k.startswith("eval/") and k != "eval/completion_length"]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    for key in reward_keys + eval_keys:
        xs, ys = series(key)
        if xs:
            top.plot(xs, ys, marker="o" if key.startswith("eval/") else None, markersize=3,
                     linewidth=2 if key in ("reward", "eval/reward") else 1, label=key)
    top.set_ylabel("reward")
    top.legend(fontsize=8)
    top.grid(alpha=0.3)
    xs, ys = series("kl")
    bottom.plot(xs, ys, color="tab:red", label="kl")
    bottom.set_ylabel("KL to reference")
    bottom.set_xlabel("step")
    bottom.grid(alpha=0.3)
    fig.tight_layout()
    with atomic_path(out_path) as tmp:
        fig.savefig(tmp, dpi=100)
    plt.close(fig)
    return out_path
