"""Faults under a real server on loopback: nothing lost, nothing given to the wrong request.

Each test is bounded (timeouts on every call) and stops its server itself.
"""

from __future__ import annotations

import signal
import socket
import threading
import time

import psutil
import pytest

pytest.importorskip("fastapi")

from _serve_helpers import MATH_FORMAT_SPEC, Server, get, math_rows, post, write_plugin_site  # noqa: E402
from reward_helpers import subprocess_env, write_entry_point  # noqa: E402


@pytest.fixture
def plugin_env(tmp_path):
    return subprocess_env(write_plugin_site(tmp_path / "site"))


def concurrently(calls, timeout: float = 120) -> list:
    """Run each zero-argument call in its own thread; their results in order."""
    out: list = [None] * len(calls)

    def run(i: int) -> None:
        try:
            out[i] = calls[i]()
        except Exception as exc:  # noqa: BLE001 - a connection error is a result here
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    return out


def valued(tag: str, n: int) -> list[dict]:
    """Samples whose expected `t_nap` value is known: any mix-up between requests shows."""
    return [{"completion": f"{tag}-{j}", "value": round(hash((tag, j)) % 1000 / 1000, 3)} for j in range(n)]


@pytest.mark.parametrize("on_error", ["none", "raise"])
def test_a_scorer_that_raises_affects_only_its_own_request(tmp_path, plugin_env, on_error):
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"on_error: {on_error}\nscorers:\n  - scorer: t_nap\n    params: {{seconds: 0.3}}\n"
                    "  - scorer: t_boom\n    weight: 2\n")
    with Server(spec, env=plugin_env) as server:
        requests = [valued(f"ok{k}", 4) for k in range(6)]
        requests[3][2]["completion"] = "BOOM"
        answers = concurrently([lambda r=r: post(server.url + "/score", {"samples": r}) for r in requests])
        for k, (status, body, _) in enumerate(answers):
            if k == 3 and on_error == "raise":
                assert status == 500 and "BOOM in the batch" in body["error"]
                continue
            assert status == 200
            naps = [res["scores"]["t_nap"] for res in body["results"]]
            assert naps == [s["value"] for s in requests[k]]
            booms = [res["scores"]["t_boom"] for res in body["results"]]
            assert booms == ([None] * 4 if k == 3 else [1.0] * 4)  # only the request holding BOOM
        health = get(server.url + "/health")[1]
        assert health["errors"]["t_boom"] >= (4 if on_error == "none" else 0) and health["queued_samples"] == 0


def test_a_math_worker_killed_mid_request_loses_nothing(tmp_path):
    spec = tmp_path / "math.yaml"
    spec.write_text(MATH_FORMAT_SPEC)
    rows = math_rows(48)
    with Server(spec) as server:
        status, reference, _ = post(server.url + "/score", {"samples": rows})  # also starts the workers
        assert status == 200
        fresh = [dict(r, completion=r["completion"].replace("</answer>", " </answer>")) for r in rows]
        server_proc = psutil.Process(server.proc.pid)
        killed: list[int] = []

        def kill_a_worker() -> None:
            time.sleep(0.05)
            workers = [p for p in server_proc.children(recursive=True) if p.children() == []]
            if workers:
                workers[-1].kill()
                killed.append(workers[-1].pid)

        killer = threading.Thread(target=kill_a_worker)
        killer.start()
        status, body, _ = post(server.url + "/score", {"samples": fresh})
        killer.join(10)
        assert killed, "no math worker process to kill"
        assert status == 200 and len(body["results"]) == len(rows)
        for mine, ref in zip(body["results"], reference["results"], strict=True):
            if mine["scores"]["correct"] is None and ref["scores"]["correct"] is not None:
                pytest.fail(f"a killed worker turned a scorable sample into None: {mine}")
            assert mine == ref  # the same verdict, sample by sample, as before the kill
        status, again, _ = post(server.url + "/score", {"samples": rows})
        assert status == 200 and again["results"] == reference["results"]


def test_a_client_that_disconnects_mid_request_harms_nobody(tmp_path, plugin_env):
    spec = tmp_path / "spec.yaml"
    spec.write_text("scorers:\n  - scorer: t_nap\n    params: {seconds: 0.5}\n")
    with Server(spec, env=plugin_env) as server:
        body = b'{"samples": [{"completion": "gone", "value": 0.9}]}'
        request = (f"POST /score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n").encode() + body
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
                sock.sendall(request)
                time.sleep(0.1)  # queued or being scored, then the client leaves
        half = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        half.sendall(request[:-10])  # a body that never finishes
        half.close()
        mine = valued("stay", 5)
        status, answer, _ = post(server.url + "/score", {"samples": mine})
        assert status == 200 and [r["total"] for r in answer["results"]] == [s["value"] for s in mine]
        deadline = time.monotonic() + 10
        while (health := get(server.url + "/health")[1])["queued_samples"] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert health["queued_samples"] == 0 and health["requests"]["accepted"] == health["requests"]["answered"]
        code, err = server.stop()
        assert code == -signal.SIGTERM and "4 requests accepted, 4 answered" in err  # uvicorn re-raises the signal


def test_sigterm_under_load_answers_every_accepted_request(tmp_path, plugin_env):
    spec = tmp_path / "spec.yaml"
    spec.write_text("scorers:\n  - scorer: t_nap\n    params: {seconds: 0.2}\n")
    server = Server(spec, env=plugin_env)
    answers: list = []
    lock = threading.Lock()

    def client(k: int) -> None:
        for j in range(10):
            samples = valued(f"c{k}-{j}", 4)
            try:
                result = post(server.url + "/score", {"samples": samples}, timeout=60)
            except OSError as exc:  # refused or reset: the server had stopped accepting
                result = exc
            with lock:
                answers.append((samples, result))
            if isinstance(result, OSError):
                return

    threads = [threading.Thread(target=client, args=(k,)) for k in range(12)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    code, err = server.stop(signal.SIGTERM)
    for t in threads:
        t.join(60)
    assert code == -signal.SIGTERM, err  # after a graceful stop, uvicorn exits by the signal it got
    ok = [(s, r) for s, r in answers if not isinstance(r, OSError)]
    assert ok and len(ok) < 120  # the signal came mid-load
    for samples, (status, body, _) in ok:
        assert status == 200 and [r["total"] for r in body["results"]] == [s["value"] for s in samples]
    accepted = int(err.split(" requests accepted")[0].rsplit(" ", 1)[-1])
    assert f"{accepted} requests accepted, {accepted} answered" in err
    assert accepted == len(ok)  # every request the app took was answered in full


def test_a_scorer_raising_a_base_exception_fails_its_request_not_the_server(tmp_path):
    site = tmp_path / "site"
    write_entry_point(site, "reward-helpers", "helpers", "reward_helpers")
    spec = tmp_path / "spec.yaml"
    spec.write_text("scorers:\n  - scorer: t_interrupt\n    params: {after_batches: 1}\n")
    with Server(spec, env=subprocess_env(site)) as server:
        assert post(server.url + "/score", {"samples": [{"completion": "a"}]})[0] == 200
        status, body, _ = post(server.url + "/score", {"samples": [{"completion": "b"}]})
        assert status == 500 and "KeyboardInterrupt" in body["error"]  # raised in the scoring thread
        assert get(server.url + "/health")[0] == 200  # the batcher still runs
        assert post(server.url + "/score", {"samples": [{"completion": "c"}]})[0] == 500
