"""Small real scorers and plugin plumbing shared by the framework tests.

They do not depend on the built-in scorer families (other issues), so the registry, spec,
composition, CLI and TRL tests exercise the framework alone.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from grpo_rewards import Sample, Score, Scorer, hookimpl

TESTS_DIR = Path(__file__).resolve().parent
REPO = TESTS_DIR.parent


class ContainsParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = Field("yes", min_length=1, description="Substring that earns 1.")


class Contains(Scorer):
    """1 when the completion contains `text`, else 0; None for an empty completion."""

    name = "t_contains"
    Params = ContainsParams

    def score(self, samples, results=None):
        out = []
        for s in samples:
            text = s.completion_text
            out.append(Score.unscorable("empty completion") if not text
                       else Score(float(self.params.text in text), {"looked_for": self.params.text}))
        return out


class LengthParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_chars: int = Field(10, gt=0, description="Length that earns the full reward.")
    timeout_s: float = Field(1.0, gt=0, description="Unused; a bounded float for the error tests.")


class Length(Scorer):
    """Completion length over `max_chars`, capped at 1."""

    name = "t_length"
    Params = LengthParams

    def score(self, samples, results=None):
        return [Score(min(1.0, len(s.completion_text) / self.params.max_chars)) for s in samples]


class AnswerParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    field: str = Field("answer", description="Reference field with the gold answer.")


class Answer(Scorer):
    """1 when the gold answer appears in the completion; None without a gold answer."""

    name = "t_answer"
    Params = AnswerParams
    calls = 0  # class-wide: how many batches were scored, to prove nothing runs twice
    seen_reference_keys: list[list[str]] = []

    def score(self, samples, results=None):
        type(self).calls += 1
        type(self).seen_reference_keys.append([sorted(s.reference) for s in samples])
        out = []
        for s in samples:
            gold = s.reference.get(self.params.field)
            if gold is None:
                out.append(Score.unscorable("no gold answer"))
            else:
                out.append(Score(float(str(gold) in s.completion_text), {"gold": str(gold)}))
        return out


class GatedParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    of: str = Field(description="Alias of the scorer whose result gates this one.")


class Gated(Scorer):
    """0.5 where the scorer `of` gave 1, else 0 (reads earlier results instead of recomputing)."""

    name = "t_gated"
    Params = GatedParams

    @classmethod
    def dependencies(cls, params):
        return [params.of]

    def score(self, samples, results=None):
        gate = results[self.params.of]
        return [Score(0.5 if g.value == 1.0 else 0.0, {"gate": g.value}) for g in gate]


class Exploding(Scorer):
    """Always raises: error isolation tests."""

    name = "t_explode"

    def score(self, samples, results=None):
        raise RuntimeError("boom")


class SlowParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    seconds: float = Field(0.1, ge=0, le=10, description="Sleep per batch.")


class Slow(Scorer):
    """Sleeps per batch, then scores 1: interruption and threading tests."""

    name = "t_slow"
    Params = SlowParams
    batch_sizes: list[int] = []
    lock = threading.Lock()

    def score(self, samples, results=None):
        with self.lock:
            type(self).batch_sizes.append(len(samples))
        time.sleep(self.params.seconds)
        return [Score(1.0) for _ in samples]


class InterruptParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    after_batches: int = Field(1, ge=0, description="Batches scored before Ctrl-C is simulated.")
    at_close: bool = Field(False, description="Send a real SIGINT when the scorer is closed instead: the "
                           "moment after the output has been written.")


class Interrupt(Scorer):
    """Raises KeyboardInterrupt (what Ctrl-C raises in the main thread) after some batches."""

    name = "t_interrupt"
    Params = InterruptParams

    def __init__(self, params=None, **kwargs):
        super().__init__(params, **kwargs)
        self.batches = 0

    def score(self, samples, results=None):
        if self.batches >= self.params.after_batches and not self.params.at_close:
            raise KeyboardInterrupt
        self.batches += 1
        return [Score(1.0) for _ in samples]

    def close(self):
        if self.params.at_close:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)  # the handler runs at the next bytecode; never return before it


ALL = [Contains, Length, Answer, Gated, Exploding, Slow, Interrupt]


class HelperPlugin:
    """A plugin object (pluggy accepts any object with hookimpls), named for the registry."""

    __name__ = "test-helpers"

    @hookimpl
    def grpo_rewards_scorers(self):
        return list(ALL)


# The module itself is a plugin too, for entry-point discovery (`reward_helpers` named by a .dist-info).
@hookimpl
def grpo_rewards_scorers():
    return list(ALL)


def write_entry_point(site: Path, dist: str, entry_name: str, module: str) -> None:
    """Advertise `module` as a `grpo_rewards` plugin from `site`, exactly as pip would (a .dist-info)."""
    info = site / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[grpo_rewards]\n{entry_name} = {module}\n")


def subprocess_env(*paths: Path) -> dict[str, str]:
    """Environment for a `grpo-rewards` subprocess that sees `paths` (and this tests dir) on sys.path."""
    import os

    env = dict(os.environ)
    entries = [str(p) for p in paths] + [str(TESTS_DIR)]
    if env.get("PYTHONPATH"):
        entries.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(entries)
    env["COLUMNS"] = "200"  # rich wraps tables to the terminal width; keep names on one line
    return env


def cli_path() -> str:
    return str(Path(sys.executable).with_name("grpo-rewards"))


def write_jsonl(path: Path, records: Sequence[Mapping[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def samples(*completions: str, **reference: Any) -> list[Sample]:
    return [Sample("q", c, dict(reference)) for c in completions]


def plugin(name: str, *, scorers=None, sandboxes=None, hook_error: Exception | None = None):
    """A plugin object named `name` whose hooks return the given classes (or raise)."""

    def grpo_rewards_scorers():
        if hook_error is not None:
            raise hook_error
        return list(scorers or [])

    ns = types.SimpleNamespace(__name__=name, grpo_rewards_scorers=hookimpl(grpo_rewards_scorers))
    if sandboxes is not None:
        ns.grpo_rewards_sandboxes = hookimpl(lambda: list(sandboxes))
    return ns
