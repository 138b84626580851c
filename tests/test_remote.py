"""The `remote` scorer against real servers on loopback: working, stopped, slow, answering 500.

A failure is None with the reason, in bounded time, and the same scorer recovers once the
server is back.
"""

from __future__ import annotations

import pickle
import socket
import time

import pytest

pytest.importorskip("fastapi")

from _serve_helpers import Server, get, math_expected, math_rows, math_server, write_plugin_site  # noqa: E402
from reward_helpers import subprocess_env  # noqa: E402

from grpo_rewards.compose import build  # noqa: E402
from grpo_rewards.errors import UserError  # noqa: E402
from grpo_rewards.registry import get_registry  # noqa: E402
from grpo_rewards.scorer import Sample  # noqa: E402
from grpo_rewards.scorers.remote import Remote  # noqa: E402

FAST_FAIL = {"retries": 2, "backoff_s": 0.05, "timeout_s": 5}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def nap_samples(*values: float, completion: str = "c") -> list[Sample]:
    return [Sample("p", f"{completion}{i}", {"value": v}) for i, v in enumerate(values)]


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory):
    return subprocess_env(write_plugin_site(tmp_path_factory.mktemp("site")))


@pytest.fixture(scope="module")
def nap_spec(tmp_path_factory):
    path = tmp_path_factory.mktemp("nap") / "nap.yaml"
    path.write_text("scorers:\n  - scorer: t_nap\n    params: {seconds: 0.3}\n")
    return path


def test_remote_native_and_openrlhf_equal_the_cli():
    rows, expected = math_rows(12), math_expected()[:12]
    samples = [Sample.from_record(r) for r in rows]
    server = math_server()
    composite = build({"scorers": [
        {"scorer": "remote", "name": "total", "params": {"url": server.url + "/score", "batch_size": 5}},
        {"scorer": "remote", "name": "correct", "params": {"url": server.url + "/score", "value": "correct"}},
        {"scorer": "remote", "name": "rlhf", "params": {"url": server.url + "/openrlhf", "api": "openrlhf"}},
    ]}, get_registry())
    with composite:
        batch = composite.score(samples)
    assert batch.values["total"] == [e["total"] for e in expected]
    assert batch.values["correct"] == [e["scores"]["correct"] for e in expected]
    # OpenRLHF's shape has no None: the server sends NaN and the scorer reads it back as None.
    assert batch.values["rlhf"] == [e["total"] for e in expected]
    unparseable = batch.scores["correct"][3]
    assert unparseable.value is None and unparseable.info["remote"]["correct"]["reason"]  # the server's reason


def test_stopped_server_gives_none_with_the_reason_then_recovers(nap_spec, plugin_env):
    port = free_port()
    scorer = Remote(url=f"http://127.0.0.1:{port}/score", **FAST_FAIL)
    start = time.monotonic()
    scores = scorer.score(nap_samples(0.25, 0.5))
    assert time.monotonic() - start < 3  # 3 attempts, 0.05 + 0.1 s of backoff
    assert [s.value for s in scores] == [None, None]
    assert scores[0].info["reason"] == "remote call failed"
    assert "unreachable" in scores[0].info["error"] and "attempt 3 of 3" in scores[0].info["error"]
    with Server(nap_spec, env=plugin_env, port=port):
        assert [s.value for s in scorer.score(nap_samples(0.25, 0.5))] == [0.25, 0.5]
    scorer.close()


def test_slow_server_times_out_in_bounded_time(tmp_path, plugin_env):
    spec = tmp_path / "slow.yaml"
    spec.write_text("scorers:\n  - scorer: t_nap\n    params: {seconds: 1.5}\n")
    with Server(spec, env=plugin_env) as server:
        scorer = Remote(url=server.url + "/score", timeout_s=0.3, retries=1, backoff_s=0.05)
        start = time.monotonic()
        scores = scorer.score(nap_samples(0.5))
        assert time.monotonic() - start < 2.0
        assert scores[0].value is None and "no answer within 0.3 s (attempt 2 of 2)" in scores[0].info["error"]
        patient = Remote(url=server.url + "/score", timeout_s=20)
        assert patient.score(nap_samples(0.75))[0].value == 0.75  # the same server, given the time


def test_500_answers_are_retried_then_none_and_other_requests_unaffected(tmp_path, plugin_env):
    spec = tmp_path / "boom.yaml"
    spec.write_text("on_error: raise\nscorers:\n  - scorer: t_boom\n")
    with Server(spec, env=plugin_env) as server:
        scorer = Remote(url=server.url + "/score", batch_size=1, **FAST_FAIL)
        scores = scorer.score([Sample("p", "fine"), Sample("p", "BOOM"), Sample("p", "also fine")])
        assert [s.value for s in scores] == [1.0, None, 1.0]
        assert scores[1].info["error"].startswith("HTTP 500") and "attempt 3 of 3" in scores[1].info["error"]
        wrong_path = Remote(url=server.url + "/nope", **FAST_FAIL).score([Sample("p", "x")])[0]
        assert wrong_path.value is None and "HTTP 404" in wrong_path.info["error"]
        assert "attempt 1 of 3" in wrong_path.info["error"]  # a 4xx is not retried


def test_circuit_breaker_fails_fast_then_a_probe_closes_it(nap_spec, plugin_env):
    port = free_port()
    scorer = Remote(url=f"http://127.0.0.1:{port}/score", retries=0, batch_size=1, max_concurrency=1,
                    breaker_failures=2, breaker_reset_s=1.0)
    first = scorer.score(nap_samples(0.1, 0.2, 0.3))  # two failed requests open the circuit
    opened = time.monotonic()
    assert [s.info["reason"] for s in first] == ["remote call failed"] * 2 + ["remote circuit open"]
    while_open = scorer.score(nap_samples(0.4))
    assert while_open[0].info["reason"] == "remote circuit open" and time.monotonic() - opened < 0.5
    with Server(nap_spec, env=plugin_env, port=port):
        time.sleep(max(0.0, 1.0 - (time.monotonic() - opened)))
        assert [s.value for s in scorer.score(nap_samples(0.5, 0.6))] == [0.5, 0.6]  # probe ok: closed
    scorer.close()


def test_concurrency_limit_holds(nap_spec, plugin_env):
    with Server(nap_spec, env=plugin_env) as server:
        serial = Remote(url=server.url + "/score", batch_size=2, max_concurrency=1)
        before = get(server.url + "/health")[1]["batches"]
        start = time.monotonic()
        assert [s.value for s in serial.score(nap_samples(*[0.5] * 8))] == [0.5] * 8
        assert time.monotonic() - start >= 4 * 0.3  # one request at a time: four naps in a row
        assert get(server.url + "/health")[1]["batches"] - before == 4
        wide = Remote(url=server.url + "/score", batch_size=2, max_concurrency=4)
        values = [0.1 * i for i in range(8)]
        assert [s.value for s in wide.score(nap_samples(*values))] == values  # in order, none mixed up


def test_token_from_the_environment(nap_spec, plugin_env, tmp_path, monkeypatch):
    token_file = tmp_path / "token"
    token_file.write_text("tok-123")
    with Server(nap_spec, "--token-file", str(token_file), env=plugin_env) as server:
        monkeypatch.setenv("REWARD_TOKEN", "tok-123")
        assert Remote(url=server.url + "/score", token_env="REWARD_TOKEN").score(nap_samples(0.5))[0].value == 0.5
        refused = Remote(url=server.url + "/score", **FAST_FAIL).score(nap_samples(0.5))[0]
        assert refused.value is None and "HTTP 401" in refused.info["error"]
    monkeypatch.delenv("REWARD_TOKEN")
    with pytest.raises(UserError, match="REWARD_TOKEN"):
        Remote(url="http://127.0.0.1:1/score", token_env="REWARD_TOKEN")


def test_remote_scorer_pickles_without_its_threads():
    scorer = Remote(url="http://127.0.0.1:1/score", retries=0)
    clone = pickle.loads(pickle.dumps(scorer))
    assert clone.params == scorer.params and clone.caller._pool is not scorer.caller._pool
    assert clone.score(nap_samples(0.5))[0].info["reason"] == "remote call failed"
