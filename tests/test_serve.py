"""`grpo-rewards serve` as users run it: a real server process on loopback, real math and format scorers.

Every answer is compared with `grpo-rewards score` on the same rows.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

from _serve_helpers import Server, get, math_expected, math_rows, post, spec_file, write_plugin_site  # noqa: E402
from _serve_helpers import math_server as shared_math_server  # noqa: E402
from reward_helpers import subprocess_env  # noqa: E402

from grpo_rewards.cli import main  # noqa: E402


@pytest.fixture(scope="module")
def math_spec(tmp_path_factory) -> Path:
    return spec_file(tmp_path_factory.mktemp("spec"))


@pytest.fixture
def math_server():
    return shared_math_server()


@pytest.fixture
def expected() -> dict[str, dict]:
    return {r["id"]: res for r, res in zip(math_rows(64), math_expected(64), strict=True)}


def test_score_equals_the_cli_and_info_comes_on_request(math_server, expected):
    rows = math_rows(12)
    status, body, _ = post(math_server.url + "/score", {"samples": rows})
    assert status == 200, body
    assert body["aliases"] == ["correct", "format"] and body["weights"] == [1.0, 0.2]
    assert body["results"] == [expected[r["id"]] for r in rows]
    assert {r["scores"]["correct"] for r in body["results"]} == {1.0, 0.0, None}  # right, wrong, unparseable
    assert "info" not in body["results"][0]
    status, body, _ = post(math_server.url + "/score", {"samples": rows[3:4], "info": True})
    assert status == 200 and body["results"][0]["info"]["correct"]["reason"]  # why \frac{ is unscorable
    status, spec = get(math_server.url + "/spec")
    assert status == 200 and [s["scorer"] for s in spec["scorers"]] == ["math_accuracy", "think_format"]


def test_concurrent_requests_are_coalesced_and_each_gets_its_own_answer(math_server, expected):
    rows = math_rows(64)
    before = get(math_server.url + "/health")[1]["batches"]
    answers: dict[int, list] = {}

    def client(k: int) -> None:
        for j in range(4):  # 8 clients x 4 requests x 8 samples, each request different rows
            chunk = rows[(k * 8 + j * 3) % 56:][:8]
            status, body, _ = post(math_server.url + "/score", {"samples": chunk})
            answers[k * 4 + j] = [status, chunk, body]

    threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(answers) == 32
    for status, chunk, body in answers.values():
        assert status == 200 and body["results"] == [expected[r["id"]] for r in chunk]
    health = get(math_server.url + "/health")[1]
    assert health["batches"] - before < 32  # some requests shared a scorer call
    assert health["queued_samples"] == 0


def test_bad_requests_name_the_field_and_oversized_bodies_are_refused(math_spec):
    with Server(math_spec, "--max-body-mb", "1") as server:
        status, body, _ = post(server.url + "/score", None, raw=b'{"samples": [')
        assert status == 422 and "JSON" in body["error"]
        status, body, _ = post(server.url + "/score", {"samples": [{"completion": "x"}, {"prompt": "p"}]})
        assert status == 422 and "samples[1].completion: Field required" in body["error"]
        status, body, _ = post(server.url + "/score", {"samples": [{"completion": 3}]})
        assert status == 422 and body["error"].startswith("samples[0].completion")
        status, body, _ = post(server.url + "/openrlhf", {"query": ["a", "b"], "prompts": ["a"]})
        assert status == 422 and "prompts" in body["error"]
        big = {"samples": [{"completion": "x" * (1 << 20), "answer": "1"}]}
        status, body, _ = post(server.url + "/score", big)
        assert status == 413 and "limit" in body["error"]
        status, body, _ = post(server.url + "/score", {"samples": [{"completion": "<answer>4</answer>", "answer": "4"}]})
        assert status == 200 and body["results"][0]["scores"]["correct"] == 1.0  # nothing left behind
        assert get(server.url + "/health")[1]["queued_samples"] == 0


def test_full_queue_answers_503_with_retry_after(tmp_path):
    spec = tmp_path / "nap.yaml"
    spec.write_text("scorers:\n  - scorer: t_nap\n    params: {seconds: 1.5}\n")
    env = _plugin_env(tmp_path)
    with Server(spec, "--max-queue", "8", env=env) as server:
        first: list = []
        t = threading.Thread(target=lambda: first.append(post(server.url + "/score", {"samples": [{"completion": "a"}] * 8})))
        t.start()
        _wait_for(lambda: get(server.url + "/health")[1]["queued_samples"] == 8)
        status, body, headers = post(server.url + "/score", {"samples": [{"completion": "b"}]})
        assert status == 503 and headers["retry-after"] == "1" and "busy" in body["error"]
        t.join(30)
        assert first[0][0] == 200 and len(first[0][1]["results"]) == 8
        assert post(server.url + "/score", {"samples": [{"completion": "b", "value": 0.5}]})[1]["results"][0]["total"] == 0.5


def test_token_is_required_when_given(math_spec, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token\n")
    with Server(math_spec, "--token-file", str(token_file)) as server:
        one = {"samples": [{"completion": "<answer>4</answer>", "answer": "4"}]}
        assert post(server.url + "/score", one)[0] == 401
        assert post(server.url + "/score", one, token="wrong")[0] == 401
        assert get(server.url + "/spec")[0] == 401
        assert post(server.url + "/score", one, token="s3cret-token")[0] == 200
        assert get(server.url + "/health")[0] == 200  # liveness probes carry no token


def test_serve_refuses_to_start_on_user_mistakes(math_spec, tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("scorers:\n  - scorer: math_acuracy\n")
    assert main(["serve", "--spec", str(bad)]) == 2
    assert "math_accuracy" in capsys.readouterr().err  # the did-you-mean
    assert main(["serve", "--spec", str(math_spec), "--host", "0.0.0.0"]) == 2
    assert "token" in capsys.readouterr().err
    assert main(["serve", "--spec", str(math_spec), "--token-file", str(tmp_path / "none")]) == 2
    assert "no such file" in capsys.readouterr().err
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        assert main(["serve", "--spec", str(math_spec), "--port", str(taken.getsockname()[1])]) == 2
        err = capsys.readouterr().err
        assert "in use" in err and "Traceback" not in err


def _plugin_env(tmp_path: Path) -> dict[str, str]:
    return subprocess_env(write_plugin_site(tmp_path / "site"))


def _wait_for(condition, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.05)


def test_workers_each_answer_and_all_stop_on_sigterm(math_spec, expected):
    rows = math_rows(8)
    server = Server(math_spec, "--workers", "2")
    for _ in range(4):  # the kernel spreads connections over both processes
        status, body, _ = post(server.url + "/score", {"samples": rows})
        assert status == 200 and body["results"] == [expected[r["id"]] for r in rows]
    code, err = server.stop()
    assert err.count("reward server stopped") == 2, err
