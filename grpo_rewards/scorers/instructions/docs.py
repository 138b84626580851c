"""The docs table of instruction types, generated from their kwargs models."""

from __future__ import annotations

from grpo_rewards.docs import bounds_text, type_name
from grpo_rewards.scorers.instructions.checks import INSTRUCTION_TYPES


def _kwargs_cell(model) -> str:
    if not model.model_fields:
        return "none"
    parts = []
    for name, field in model.model_fields.items():
        bounds = bounds_text(field)
        parts.append(f"`{name}` (`{type_name(field.annotation)}`{', ' + bounds if bounds else ''}): "
                     f"{field.description or ''}")
    return "<br>".join(parts)


def instructions_table() -> str:
    """Every instruction type: id, what it asks, its kwargs (all required where listed)."""
    rows = ["| instruction id | asks for | kwargs |", "|---|---|---|"]
    for kind in INSTRUCTION_TYPES.values():
        cells = [f"`{kind.id}`", kind.description, _kwargs_cell(kind.kwargs)]
        rows.append("| " + " | ".join(" ".join(c.split()).replace("|", "\\|") for c in cells) + " |")
    return "Instruction types (the `instruction_id_list` entries) and their kwargs:\n\n" + "\n".join(rows) + "\n"
