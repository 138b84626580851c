"""OpenRLHF's own remote reward client against a real `grpo-rewards serve` on loopback.

The client is `openrlhf.utils.agent.SingleTurnAgentExecutor._fetch_rewards_via_http` (OpenRLHF
0.11.2, installed with --no-deps by scripts/setup.sh; it imports aiohttp): it posts
`{query, prompts, labels}` and its caller reads `rewards`, `scores` and `extra_logs`.
"""

from __future__ import annotations

import asyncio
import json
import math

import pytest

pytest.importorskip("fastapi")
agent = pytest.importorskip("openrlhf.utils.agent", reason="openrlhf (pip install --no-deps openrlhf aiohttp)")

from _serve_helpers import MATH_FORMAT_SPEC, Server, math_expected, math_rows, math_server  # noqa: E402

from grpo_rewards.scorer import RewardBatch, Score  # noqa: E402
from grpo_rewards.serve.app import ServerSettings, openrlhf_response  # noqa: E402

EOS = "<|im_end|>"


def same(a: float, b: float | None) -> bool:
    return math.isnan(a) if b is None else a == b


def test_openrlhf_client_gets_what_the_cli_scores():
    rows, expected = math_rows(16), math_expected()[:16]
    # OpenRLHF decodes prompt + response with special tokens kept: the query ends with the EOS text.
    queries = [r["prompt"] + r["completion"] + EOS for r in rows]
    prompts = [r["prompt"] for r in rows]
    labels = [r["answer"] for r in rows]
    server = math_server()
    for path in ("/openrlhf", "/get_reward"):
        # Two endpoints: the client shards the batch across them, as with several reward servers.
        executor = agent.SingleTurnAgentExecutor(remote_rm_url=[server.url + path, server.url + path])
        replies = asyncio.run(executor._fetch_rewards_via_http(queries, prompts, labels))
        assert len(replies) == 2
        rewards = [x for reply in replies for x in reply["rewards"]]
        scores = [x for reply in replies for x in reply["scores"]]
        assert len(rewards) == len(rows)
        for got, score, exp in zip(rewards, scores, expected, strict=True):
            assert same(got, exp["total"]) and same(score, exp["total"])  # None -> NaN, never 0
        for alias in ("correct", "format"):
            logged = [x for reply in replies for x in reply["extra_logs"][alias]]
            assert all(same(g, e["scores"][alias]) for g, e in zip(logged, expected, strict=True))
        scored = [x for reply in replies for x in reply["extra_logs"]["scored"]]
        assert scored == [0.0 if e["total"] is None else 1.0 for e in expected]
        assert any(e["scores"]["correct"] is None for e in expected) and any(e["total"] == 1.2 for e in expected)


def test_openrlhf_one_query_shape_and_the_none_score(tmp_path):
    spec = tmp_path / "math.yaml"
    spec.write_text(MATH_FORMAT_SPEC.split("  - scorer: think_format")[0])  # math alone: None can reach the total
    right, _, _, bad_gold = math_rows(4)
    with Server(spec, "--none-score", "-1") as server:
        executor = agent.SingleTurnAgentExecutor(remote_rm_url=server.url + "/openrlhf")
        # execute() sends one query at a time and reads reply["rewards"], ["scores"], ["extra_logs"].
        for row, value, scored in ((right, 1.0, 1.0), (bad_gold, -1.0, 0.0)):
            (reply,) = asyncio.run(executor._fetch_rewards_via_http(
                [row["prompt"] + row["completion"]], [row["prompt"]], [row["answer"]]))
            assert reply["rewards"] == reply["scores"] == [value]
            assert reply["extra_logs"]["scored"] == [scored] and len(reply["extra_logs"]["correct"]) == 1


def test_unscorable_total_is_nan_by_default():
    batch = RewardBatch([None, 0.5], {"a": [Score(None, {"reason": "x"}), Score(0.5)]})
    reply = json.loads(json.dumps(openrlhf_response(batch, ServerSettings().none_score)))  # NaN survives JSON
    assert math.isnan(reply["rewards"][0]) and reply["rewards"][1] == 0.5
    assert math.isnan(reply["extra_logs"]["a"][0]) and reply["extra_logs"]["scored"] == [0.0, 1.0]
