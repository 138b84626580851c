"""None policy, gates and aggregation against hand-computed values, and TRL 1.16 parity of
`normalize_then_sum` (TRL's own trainer computing advantages on the same per-function rewards)."""

from __future__ import annotations

import math
import zlib

import pytest
from _compose_helpers import Column
from _compose_helpers import column as member
from pydantic import BaseModel, ConfigDict, Field

from grpo_rewards import ConfigError, Score, Scorer, build, hookimpl, load_registry, load_spec
from grpo_rewards.advantages import EPS as NORMALIZE_EPS
from grpo_rewards.advantages import advantages, standardize
from grpo_rewards.aggregate import combine
from grpo_rewards.group import groups_of
from grpo_rewards.spec import GateSpec, ScorerSpec


class BucketParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    modulus: int = Field(ge=1, description="Number of buckets.")
    scale: float = Field(1.0, description="Value of one bucket step.")
    none_every: int = Field(0, ge=0, description="None where the checksum is divisible by this (0: never).")


class Bucket(Scorer):
    """A deterministic function of the completion text: (crc32 % modulus) * scale, sometimes None."""

    name = "t_bucket"
    Params = BucketParams
    value_range = (0.0, 1000.0)
    seen: list[tuple[str, str]] = []

    def score(self, samples, results=None):
        out = []
        for s in samples:
            type(self).seen.append((s.prompt_text, s.completion_text))
            crc = zlib.crc32(s.completion_text.encode())
            none = self.params.none_every and crc % self.params.none_every == 0
            out.append(Score(None if none else (crc % self.params.modulus) * self.params.scale))
        return out


class Plugin:
    @hookimpl
    def grpo_rewards_scorers(self):
        return [Column, Bucket]


@pytest.fixture(scope="module")
def registry():
    return load_registry(extra_plugins=[Plugin()])


def batch_of(rows: list[dict], prompts: list[str]) -> list[dict]:
    return [{"prompt": p, "completion": f"c{i}", **row} for i, (p, row) in enumerate(zip(prompts, rows, strict=True))]


def totals(registry, spec: dict, rows: list[dict], prompts: list[str], group_size=None):
    with build(spec, registry) as reward:
        return reward.score(batch_of(rows, prompts), group_size)


Z1 = 1 / (1 + NORMALIZE_EPS)  # |x - mean| / (std + eps) for 1 and 3 among {1, 2, 3} (mean 2, std 1)


# ---------------------------------------------------------------------------------------------
# None policy


@pytest.mark.parametrize(("policy", "expected"), [
    ("skip", [1.5, 1.0, None]),        # b's None is left out; a sample with nothing has no total
    ("zero", [1.5, 1.0, 0.0]),         # b's None counts as 0, so the third sample has a total
    ("drop_sample", [1.5, None, None]),  # b's None takes the whole sample out
])
def test_none_policy_sum(registry, policy, expected):
    spec = {"scorers": [member("a"), member("b", 0.5, on_none=policy)]}
    rows = [{"a": 1.0, "b": 1.0}, {"a": 1.0}, {}]
    assert totals(registry, spec, rows, ["p", "p", "p"]).totals == expected


def test_none_everywhere_gives_none_totals_under_every_aggregation(registry):
    for aggregate in ("sum", "normalize_then_sum"):
        spec = {"aggregate": aggregate, "scorers": [member("a"), member("b", on_none="drop_sample")]}
        batch = totals(registry, spec, [{}] * 4, ["p", "p", "q", "q"])
        assert batch.totals == [None] * 4
        spec = {"aggregate": aggregate, "scorers": [member("a", on_none="zero")]}
        assert totals(registry, spec, [{}] * 4, ["p", "p", "q", "q"]).totals == [0.0] * 4


def test_dropped_sample_is_left_out_of_the_group_statistics(registry):
    spec = {"aggregate": "normalize_then_sum", "scorers": [member("a"), member("b", on_none="drop_sample")]}
    rows = [{"a": 1.0, "b": 0.0}, {"a": 2.0}, {"a": 3.0, "b": 0.0}]
    batch = totals(registry, spec, rows, ["p"] * 3)
    z = 1 / (math.sqrt(2) + NORMALIZE_EPS)  # a over {1, 3}: mean 2, std sqrt(2)
    assert batch.totals[1] is None
    assert batch.totals[0] == pytest.approx(-z, abs=1e-12) and batch.totals[2] == pytest.approx(z, abs=1e-12)
    assert batch.gated["a"] == [1.0, None, 3.0] and batch.gated["b"] == [0.0, None, 0.0]


# ---------------------------------------------------------------------------------------------
# Gates


def test_gate_with_zero_and_none_otherwise(registry):
    rows = [{"f": 1.0, "c": 1.0}, {"f": 0.0, "c": 1.0}, {"c": 1.0}, {"f": 1.0, "c": 0.0}]
    prompts = ["p"] * 4
    spec = {"scorers": [member("f", 0.2), member("c", gate={"on": "f", "min": 1.0})]}
    batch = totals(registry, spec, rows, prompts)
    assert batch.gated["c"] == [1.0, 0.0, None, 0.0]   # shut where f < 1; unknown where f is None
    assert batch.totals[0] == pytest.approx(1.2) and batch.totals[1] == 0.0
    assert batch.totals[2] is None and batch.totals[3] == pytest.approx(0.2)
    spec["scorers"][1]["gate"]["otherwise"] = None
    batch = totals(registry, spec, rows, prompts)
    assert batch.gated["c"] == [1.0, None, None, 0.0]
    assert batch.totals[1] == 0.0  # f's own 0 * 0.2; c left out


def test_gate_reads_the_gating_members_policy_and_max_bound(registry):
    # f's None policy `zero` runs before the gate: a missing format counts as failing it.
    spec = {"scorers": [member("f", 0.0, on_none="zero"), member("c", gate={"on": "f", "min": 0.5, "max": 0.8,
                                                                              "otherwise": -1.0})]}
    rows = [{"c": 1.0}, {"f": 0.6, "c": 1.0}, {"f": 0.9, "c": 1.0}]
    assert totals(registry, spec, rows, ["p"] * 3).gated["c"] == [-1.0, 1.0, -1.0]


def test_gates_chain_in_dependency_order_whatever_the_listing_order(registry):
    # g is gated on c, which is gated on f: a sample failing f fails g too.
    spec = {"scorers": [member("g", gate={"on": "c", "min": 1.0}), member("c", gate={"on": "f", "min": 1.0}),
                        member("f")]}
    rows = [{"f": 1.0, "c": 1.0, "g": 1.0}, {"f": 0.0, "c": 1.0, "g": 1.0}]
    batch = totals(registry, spec, rows, ["p", "p"])
    assert batch.gated == {"g": [1.0, 0.0], "c": [1.0, 0.0], "f": [1.0, 0.0]}
    assert batch.totals == [3.0, 0.0]


@pytest.mark.parametrize(("gate", "message"), [
    ({"on": "nope", "min": 1}, "scorers[1].gate.on: gate on unknown scorer 'nope'"),
    ({"on": "c", "min": 1}, "scorers[1].gate.on: scorer 'c' cannot be gated on itself"),
    ({"on": "f"}, "scorers[1].gate: a gate needs 'min', 'max' or both"),
    ({"on": "f", "min": 2, "max": 1}, "could never open"),
    ({"on": "f", "min": 1, "else": 0}, "scorers[1].gate.else: unknown field"),
])
def test_bad_gates_are_reported_with_their_path(registry, gate, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")):
        load_spec({"scorers": [member("f"), member("c", gate=gate)]}, registry)


def test_gate_cycle_is_reported_once_with_the_loop(tmp_path, registry):
    path = tmp_path / "spec.yaml"
    path.write_text("scorers:\n"
                    "  - {scorer: t_column, name: a, params: {field: a}, gate: {on: c, min: 1}}\n"
                    "  - {scorer: t_column, name: b, params: {field: b}, gate: {on: a, min: 1}}\n"
                    "  - {scorer: t_column, name: c, params: {field: c}, gate: {on: b, min: 1}}\n")
    with pytest.raises(ConfigError) as info:
        load_spec(path, registry)
    assert [str(p) for p in info.value.problems] == [
        f"{path}:2: scorers[0].gate.on: gates form a cycle: a -> c -> b -> a"]


# ---------------------------------------------------------------------------------------------
# Aggregation


def test_normalize_then_sum_by_hand(registry):
    # group p: a = 1, 2, 3 (mean 2, std 1); b = 10, 10, 10 (no spread)
    # group q: a = 4, None (one value: contributes 0); b = 0, 8 (mean 4, std sqrt(32))
    spec = {"aggregate": "normalize_then_sum", "scorers": [member("a", 2.0), member("b", 0.5)]}
    rows = [{"a": 1.0, "b": 10.0}, {"a": 2.0, "b": 10.0}, {"a": 3.0, "b": 10.0}, {"a": 4.0, "b": 0.0}, {"b": 8.0}]
    batch = totals(registry, spec, rows, ["p", "p", "p", "q", "q"])
    zq = 4 / (math.sqrt(32) + NORMALIZE_EPS)
    assert batch.totals == pytest.approx([-2 * Z1, 0.0, 2 * Z1, -0.5 * zq, 0.5 * zq], abs=1e-12)
    assert batch.contributions["a"][3:] == [0.0, None]
    assert batch.groups == [[0, 1, 2], [3, 4]]
    assert batch.weighted_sums == [2 + 5.0, 4 + 5.0, 6 + 5.0, 8 + 0.0, 4.0]  # the scale the totals hide
    spec["aggregate"] = "sum"
    as_sum = totals(registry, spec, rows, ["p", "p", "p", "q", "q"])
    assert as_sum.totals == as_sum.weighted_sums == batch.weighted_sums


def test_all_equal_groups_and_groups_of_one(registry):
    spec = {"aggregate": "normalize_then_sum", "scorers": [member("a")]}
    batch = totals(registry, spec, [{"a": 5.0}, {"a": 5.0}, {"a": 7.0}], ["p", "p", "q"])
    assert batch.totals == [0.0, 0.0, 0.0]  # equal values: no spread; a group of one: fewer than two values
    spec["aggregate"] = "sum"
    assert totals(registry, spec, [{"a": 5.0}, {"a": 5.0}, {"a": 7.0}], ["p", "p", "q"]).totals == [5.0, 5.0, 7.0]


def test_group_size_cuts_consecutive_groups_and_checks_the_batch(registry):
    spec = {"aggregate": "normalize_then_sum", "scorers": [member("a")]}
    rows = [{"a": 0.0}, {"a": 2.0}, {"a": 0.0}, {"a": 2.0}]
    by_size = totals(registry, spec, rows, ["p"] * 4, group_size=2)
    assert by_size.groups == [[0, 1], [2, 3]]
    z = 1 / (math.sqrt(2) + NORMALIZE_EPS)
    assert by_size.totals == pytest.approx([-z, z, -z, z], abs=1e-12)
    with pytest.raises(ValueError, match="cannot be cut into groups of 3"):
        totals(registry, spec, rows, ["p"] * 4, group_size=3)


def test_groups_by_prompt_need_not_be_consecutive_and_chat_prompts_group_by_content():
    from grpo_rewards import Sample

    chat = [{"role": "user", "content": "hi"}]
    samples = [Sample("x"), Sample(chat), Sample("x"), Sample([dict(chat[0])])]
    assert groups_of(samples) == [[0, 2], [1, 3]]


def test_combine_is_the_whole_pipeline_in_order():
    # policy (zero) -> gate (shut -> otherwise 0.5) -> normalise -> weight
    rules = [ScorerSpec(scorer="f"),
             ScorerSpec(scorer="c", weight=3.0, on_none="zero", gate=GateSpec(on="f", min=1.0, otherwise=0.5))]
    values = {"f": [1.0, 0.0, 1.0], "c": [None, 1.0, 1.0]}
    out, gated, contributions, sums = combine(values, rules, "normalize_then_sum", [[0, 1, 2]])
    assert gated["c"] == [0.0, 0.5, 1.0]
    assert contributions["c"] == pytest.approx([3 * v for v in standardize([0.0, 0.5, 1.0], [[0, 1, 2]], "group")[0]])
    assert contributions["c"] == pytest.approx([-3 / (0.5 + NORMALIZE_EPS) * 0.5, 0.0, 3 * 0.5 / (0.5 + NORMALIZE_EPS)])
    assert sums == [1.0 + 0.0, 0.0 + 3 * 0.5, 1.0 + 3 * 1.0]  # weighted, gated, not normalised


# ---------------------------------------------------------------------------------------------
# TRL 1.16 parity


def _trl_advantages_of_totals(values: list[float | None]) -> list[float]:
    """TRL's last step after aggregation: (r - nanmean) / (nanstd + 1e-4) over the batch, NaN -> 0."""
    present = [v for v in values if v is not None]
    mean = math.fsum(present) / len(present)
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in present) / (len(present) - 1))
    return [0.0 if v is None else (v - mean) / (std + 1e-4) for v in values]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("aggregate,scale", [("normalize_then_sum", "batch"), ("sum", "group"), ("sum", "batch"),
                                             ("sum", "none")])
def test_advantages_match_trl(tmp_path, registry, aggregate, scale):
    """Every combination TRL 1.16 defines: its trainer's advantages from the adapter's values are
    `advantages` of our totals (what grpo-train computes)."""
    import torch
    from _tiny_models import build_tiny_llama
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from grpo_rewards.integrations.trl import trl_config_kwargs

    # Values on multiples of 1/2: sums of them are exact in TRL's float32 too, so all-equal groups
    # normalise to exactly 0 on both sides instead of to float32 rounding / 1e-4.
    spec = {"aggregate": aggregate, "scorers": [
        {"scorer": "t_bucket", "name": "small", "weight": 1.0, "params": {"modulus": 3, "scale": 0.5}},
        {"scorer": "t_bucket", "name": "large", "weight": 0.5, "params": {"modulus": 5, "scale": 4.0, "none_every": 4}},
        {"scorer": "t_bucket", "name": "gated", "weight": 2.0, "params": {"modulus": 2, "none_every": 3},
         "on_none": "zero", "gate": {"on": "small", "min": 0.5}},
    ]}
    model_dir = build_tiny_llama(tmp_path / "model")
    reward = build(spec, registry)
    funcs, _ = reward.as_trl(group_size=4)
    args = GRPOConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=16, num_generations=4,
                      max_completion_length=6, use_cpu=True, bf16=False, beta=0.0, report_to=[], seed=0,
                      scale_rewards=scale, **trl_config_kwargs(reward))
    trainer = GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(model_dir), reward_funcs=funcs, args=args,
                          processing_class=AutoTokenizer.from_pretrained(model_dir),
                          train_dataset=Dataset.from_list([{"prompt": "x"}]))
    trainer.model.train()
    inputs = [{"prompt": p} for p in ("What is 2 + 3?", "The answer is", "Solve the problem", "user assistant")
              for _ in range(4)]
    Bucket.seen.clear()
    torch.manual_seed(0)
    trl_advantages = trainer._generate_and_score_completions(inputs)["advantages"].tolist()
    prompts_and_completions = Bucket.seen[:16]
    samples = [{"prompt": p, "completion": c} for p, c in prompts_and_completions]
    ours = build(spec, registry).score(samples, group_size=4)
    values = ours.gated
    assert any(v is None for v in values["large"]) and len(set(values["small"])) > 1  # the case is not trivial
    assert len({round(a, 3) for a in trl_advantages}) > 4  # and neither are the advantages
    core, _ = advantages(ours.totals, ours.groups, aggregate, scale)
    assert trl_advantages == pytest.approx(core, abs=1e-5)
    if aggregate == "normalize_then_sum":  # by hand: TRL's last step over the batch
        assert trl_advantages == pytest.approx(_trl_advantages_of_totals(ours.totals), abs=1e-6)


# ---------------------------------------------------------------------------------------------
# docs/spec.md: every example spec gives the totals shown under it


@pytest.mark.timeout(300)
def test_spec_doc_examples_give_the_totals_they_show():
    import json
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "spec.md").read_text()
    batch = [json.loads(line) for line in re.search(r"```jsonl\n(.*?)```", text, re.S).group(1).splitlines()]
    marker = r"(?:<!--[^>]*-->\n)?"  # the line that says which test checks a block (test_doc_blocks.py)
    examples = re.findall(rf"```yaml\n# example: ([\w-]+)\n(.*?)```\s*{marker}```output\ntotals: (.*?)\n```", text, re.S)
    assert [name for name, _, _ in examples] == ["sum", "normalize_then_sum", "gate", "drop_sample",
                                                  "group_duplicates"]
    for name, body, shown in examples:
        import yaml

        with build(yaml.safe_load(body)) as reward:
            got = [None if t is None else round(t, 4) for t in reward.score(batch).totals]
        assert got == json.loads(shown), name
