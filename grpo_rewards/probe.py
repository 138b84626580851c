"""`grpo-rewards probe --spec SPEC`: the known reward hacks that apply to a spec, scored by the spec.

Each hack (grpo_rewards.redteam) whose target is one of the spec's scorers, or any scorer, is
scored by the spec itself, with the user's params, aliases and dependencies (a `cosine_length`
reads the spec's own correctness scorer), so what is checked is exactly what will train. A hack
pays when its value exceeds what the hack must get (see `redteam.pays`). A plugin adds hacks for
its scorers with a `redteam_hacks` class attribute on the scorer class.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rich.table import Table
from rich.text import Text

from grpo_rewards.compose import CompositeReward, build
from grpo_rewards.redteam import Hack, all_hacks, applies, pays
from grpo_rewards.registry import Registry
from grpo_rewards.scorer import Sample
from grpo_rewards.spec import RewardSpec


@dataclass(frozen=True)
class Finding:
    """One hack scored by one member of the spec."""

    hack: Hack
    alias: str
    scorer: str
    value: float | None
    reason: str
    pays: bool


def hacks_for(reward: CompositeReward) -> list[Hack]:
    """The built-in hacks and the plugins' (`redteam_hacks` on a scorer class) that apply to at
    least one member of `reward`, each once."""
    names = {m.scorer.name for m in reward.members}
    plugin_hacks = [h for m in reward.members for h in getattr(type(m.scorer), "redteam_hacks", ())]
    found: dict[str, Hack] = {}
    for hack in [*all_hacks(), *plugin_hacks]:
        if any(applies(hack, name) for name in names):
            found.setdefault(hack.id, hack)
    return list(found.values())


def probe(spec: RewardSpec | Mapping[str, Any] | str, registry: Registry | None = None) -> list[Finding]:
    """Every (hack, member) pair that applies, with the member's score and whether it pays."""
    with build(spec, registry) as reward:
        hacks = hacks_for(reward)
        batch = reward.score([Sample.from_record(h.sample) for h in hacks])
        findings = []
        for i, hack in enumerate(hacks):
            for member in reward.members:
                if applies(hack, member.scorer.name):
                    score = batch.scores[member.alias][i]
                    # What the spec pays, after the member's gate: an instruction_following hack that follows
                    # the letter is refused only by a content reward it is gated on.
                    paid = batch.gated[member.alias][i] if member.alias in batch.gated else score.value
                    findings.append(Finding(
                        hack, member.alias, member.scorer.name, paid, str(score.info.get("reason", "")),
                        pays(paid, hack.expect, member.scorer.value_range)))
    return findings


def _required(hack: Hack) -> str:
    if hack.expect is None:
        return "None"
    return "<= 0" if hack.scorer == "*" else f"{hack.expect:.4g}"


def findings_table(findings: list[Finding], title: str, only_paying: bool = True) -> Table:
    table = Table(title=title, title_justify="left")
    for column in ("hack", "scorer", "value", "required", "pays", "why"):
        table.add_column(column, overflow="fold")
    for f in findings:
        if f.pays or not only_paying:
            value = "None" if f.value is None else f"{f.value:.4g}"
            table.add_row(Text(f.hack.id), Text(f.alias if f.alias == f.scorer else f"{f.alias} ({f.scorer})"),
                          value, _required(f.hack), "yes" if f.pays else "no", Text(f.hack.why))
    return table


def summary(findings: list[Finding]) -> str:
    hacks = len({f.hack.id for f in findings})
    members = len({f.alias for f in findings})
    paying = [f for f in findings if f.pays]
    verdict = "no hack pays" if not paying else f"{len(paying)} pay ({len({f.hack.id for f in paying})} hacks)"
    return f"probe: {hacks} hacks, {len(findings)} checks against {members} scorers: {verdict}"
