"""A scorer whose values the test chooses (a reference field), for the composition tests."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from grpo_rewards import Score, Scorer


class ColumnParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    field: str = Field(description="Reference field whose value is the score (None when absent); 'boom' raises.")


class Column(Scorer):
    """The value of a reference field: scores are chosen by the test, not computed."""

    name = "t_column"
    Params = ColumnParams
    value_range = (-100.0, 100.0)

    def score(self, samples, results=None):
        if any(s.reference.get(self.params.field) == "boom" for s in samples):
            raise RuntimeError("boom")
        return [Score(s.reference.get(self.params.field)) for s in samples]


def column(alias: str, weight: float = 1.0, **extra) -> dict:
    """A spec member named `alias` whose values are the reference field `alias`."""
    return {"scorer": "t_column", "name": alias, "weight": weight, "params": {"field": alias}, **extra}
