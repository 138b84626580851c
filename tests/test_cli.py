"""The `grpo-rewards` command line: list, validate, schema, score, explain, sandbox-check.

The helper scorers are found the way real plugins are: through a `grpo_rewards` entry point
(a .dist-info on sys.path), not by patching the registry.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from io import StringIO

import pytest
from reward_helpers import Slow, cli_path, subprocess_env, write_entry_point, write_jsonl
from rich.console import Console

from grpo_rewards import cli
from grpo_rewards.cli import atomic_output, main


@pytest.fixture
def helpers_site(tmp_path_factory, monkeypatch):
    site = tmp_path_factory.mktemp("site")
    write_entry_point(site, "reward-helpers", "helpers", "reward_helpers")
    monkeypatch.syspath_prepend(str(site))
    return site


@pytest.fixture
def spec_file(tmp_path, helpers_site):
    path = tmp_path / "spec.yaml"
    path.write_text(
        "scorers:\n"
        "  - scorer: t_answer\n"
        "    name: correct\n"
        "  - scorer: t_length\n"
        "    weight: 0.5\n"
        "    params: {max_chars: 10}\n"
    )
    return path


RECORDS = [
    {"id": "a", "prompt": "2+2?", "completion": "it is 4", "answer": 4},
    {"prompt": "3+3?", "completion": "5", "answer": 6},
    {"prompt": "no gold", "completion": "0123456789abc"},
    {"prompt": [{"role": "user", "content": "1+1?"}], "completion": [{"role": "assistant", "content": "2"}],
     "answer": "2"},
]


def run_cli(*args: str, env=None, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([cli_path(), *args], capture_output=True, text=True, env=env, timeout=timeout)


def test_list_shows_name_plugin_description_and_defaults(helpers_site, capsys):
    assert main(["list", "--json"]) == 0
    listed = {s["name"]: s for s in json.loads(capsys.readouterr().out)["scorers"]}
    entry = listed["t_length"]
    assert entry["plugin"] == "helpers"
    assert entry["description"] == "Completion length over `max_chars`, capped at 1."
    assert entry["params"]["max_chars"] == {"required": False, "default": 10,
                                            "description": "Length that earns the full reward."}
    assert listed["t_gated"]["params"]["of"]["required"] is True
    assert main(["list"]) == 0
    table = capsys.readouterr().out
    assert "t_length" in table and "max_chars = 10" in table and "of (required)" in table


def test_validate_ok_and_every_problem_with_exit_2(spec_file, tmp_path, capsys):
    assert main(["validate", str(spec_file)]) == 0
    out = capsys.readouterr().out
    assert "correct" in out and "t_length" in out and "valid" in out
    bad = tmp_path / "bad.yaml"
    bad.write_text("scorers:\n  - scorer: t_lenght\n  - scorer: t_length\n    params: {max_chars: 0}\n")
    assert main(["validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "error: invalid reward spec (2 problems)" in err
    assert f"{bad}:2: scorers[0].scorer: unknown scorer 't_lenght'; did you mean t_length" in err
    assert f"{bad}:4: scorers[1].params.max_chars" in err


def test_errors_in_a_subprocess_exit_2_without_traceback(tmp_path, helpers_site):
    env = subprocess_env(helpers_site)
    result = run_cli("validate", str(tmp_path / "missing.yaml"), env=env)
    assert result.returncode == 2 and "cannot read file" in result.stderr
    assert "Traceback" not in result.stderr
    result = run_cli("score", "--spec", str(tmp_path / "missing.yaml"), "--input", "x", "--output", "y", env=env)
    assert result.returncode == 2 and "Traceback" not in result.stderr


def test_schema_to_stdout_and_file(helpers_site, tmp_path, capsys):
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert "max_chars" in json.dumps(schema)
    assert main(["schema", "--output", str(tmp_path / "s.json")]) == 0
    assert json.loads((tmp_path / "s.json").read_text()) == schema


def test_score_shows_a_progress_bar_on_a_terminal_and_none_otherwise(spec_file, tmp_path, monkeypatch):
    src = write_jsonl(tmp_path / "in.jsonl", RECORDS)
    for terminal in (True, False):
        err = StringIO()
        monkeypatch.setattr(cli, "_stderr", lambda: Console(file=err, force_terminal=terminal, width=100))
        assert main(["score", "--spec", str(spec_file), "--input", str(src), "--output", str(tmp_path / "o.jsonl"),
                     "--batch-size", "2"]) == 0
        assert ("scoring" in err.getvalue() and "4/4" in err.getvalue()) is terminal


def test_score_with_an_unreadable_input_creates_nothing_and_registers_nothing_at_exit(spec_file, tmp_path,
                                                                                       monkeypatch, capsys):
    registered = []
    monkeypatch.setattr(cli.atexit, "register", lambda *a: registered.append(a))
    out = tmp_path / "outdir" / "sub" / "o.jsonl"
    assert main(["score", "--spec", str(spec_file), "--input", str(tmp_path / "nope.jsonl"), "--output", str(out)]) == 2
    assert "nope.jsonl" in capsys.readouterr().err and not (tmp_path / "outdir").exists()
    assert registered == []  # gc.freeze at exit only for the command itself, not a caller's process


def test_score_writes_one_line_per_input_and_a_summary(spec_file, tmp_path, capsys):
    src = write_jsonl(tmp_path / "in.jsonl", RECORDS)
    out = tmp_path / "deep" / "out.jsonl"
    assert main(["score", "--spec", str(spec_file), "--input", str(src), "--output", str(out),
                 "--no-progress", "--batch-size", "3"]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["index"] for line in lines] == [0, 1, 2, 3]
    assert lines[0]["id"] == "a" and "id" not in lines[1]
    assert [line["scores"]["correct"] for line in lines] == [1.0, 0.0, None, 1.0]
    assert lines[0]["total"] == pytest.approx(1.0 + 0.5 * 0.7)
    assert lines[2]["total"] == pytest.approx(0.5 * 1.0)
    assert "info" not in lines[0]
    summary = capsys.readouterr().out
    for word in ("Summary", "mean", "std", "None", "errors", "correct", "t_length", "total"):
        assert word in summary
    row = next(line for line in summary.splitlines() if "correct" in line)
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    # scorer, weight, mean, std, min, max, None, errors: mean of 1, 0, 1 and one None
    assert cells == ["correct", "1", "0.6667", "0.5774", "0", "1", "1", "0"]
    assert oct(out.stat().st_mode & 0o777) != oct(0o600)  # not the temp file's private mode


def test_score_with_info_and_parquet_input(spec_file, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"prompt": "p", "completion": "x 9", "answer": "9"}, {"prompt": "p", "completion": "y", "answer": "9"}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "in.parquet")
    out = tmp_path / "out.jsonl"
    assert main(["score", "--spec", str(spec_file), "--input", str(tmp_path / "in.parquet"),
                 "--output", str(out), "--with-info", "--no-progress"]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["scores"]["correct"] for line in lines] == [1.0, 0.0]
    assert lines[0]["info"]["correct"] == {"gold": "9"}


def test_scores_in_batches_of_the_given_size(helpers_site, tmp_path):
    spec = tmp_path / "slow.yaml"
    spec.write_text("scorers:\n  - scorer: t_slow\n    params: {seconds: 0}\n")
    src = write_jsonl(tmp_path / "in.jsonl", [{"completion": str(i)} for i in range(7)])
    Slow.batch_sizes.clear()
    assert main(["score", "--spec", str(spec), "--input", str(src), "--output", str(tmp_path / "o.jsonl"),
                 "--batch-size", "3", "--no-progress"]) == 0
    assert Slow.batch_sizes == [3, 3, 1]


@pytest.mark.parametrize("content, expected", [
    ('{"completion": "a"}\n{"completion": \n', "in.jsonl:2: invalid JSON"),
    ('{"completion": "a"}\n\n[1, 2]\n', "in.jsonl:3: the line must be a JSON object"),
    ('{"prompt": "a"}\n', "in.jsonl:1: the line has no 'completion' field"),
    (b'{"completion": "\xff"}\n', "in.jsonl:1: not valid UTF-8"),
    ("\n\n", "no records"),
])
def test_malformed_input_is_reported_with_its_line_and_nothing_written(spec_file, tmp_path, capsys,
                                                                      content, expected):
    src = tmp_path / "in.jsonl"
    src.write_bytes(content if isinstance(content, bytes) else content.encode())
    out = tmp_path / "out.jsonl"
    out.write_text("previous results\n")
    assert main(["score", "--spec", str(spec_file), "--input", str(src), "--output", str(out),
                 "--no-progress"]) == 2
    assert expected in capsys.readouterr().err
    assert out.read_text() == "previous results\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "out.jsonl", "spec.yaml"]


def test_interrupted_scoring_leaves_no_partial_output(helpers_site, tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text("scorers:\n  - scorer: t_interrupt\n    params: {after_batches: 1}\n")
    src = write_jsonl(tmp_path / "in.jsonl", [{"completion": str(i)} for i in range(5)])
    out = tmp_path / "out.jsonl"
    assert main(["score", "--spec", str(spec), "--input", str(src), "--output", str(out),
                 "--batch-size", "2", "--no-progress"]) == 130
    assert "interrupted" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "spec.yaml"]


@pytest.mark.timeout(120)
def test_real_ctrl_c_in_a_subprocess_leaves_no_partial_output(helpers_site, tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text("scorers:\n  - scorer: t_slow\n    params: {seconds: 0.2}\n")
    src = write_jsonl(tmp_path / "in.jsonl", [{"completion": str(i)} for i in range(200)])
    out = tmp_path / "out.jsonl"
    proc = subprocess.Popen([cli_path(), "score", "--spec", str(spec), "--input", str(src), "--output", str(out),
                             "--batch-size", "1", "--no-progress"], env=subprocess_env(helpers_site),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            # A suite started in the background (`cmd &`) inherits SIGINT ignored,
                            # and so would the CLI: give it the terminal's default.
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    while not any(p.name.endswith(".part") for p in tmp_path.iterdir()):  # scoring has begun
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    time.sleep(0.5)  # some lines are in the temp file by now
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "spec.yaml"]


def test_atomic_output_replaces_only_when_complete(tmp_path):
    target = tmp_path / "f.txt"
    target.write_text("old")
    with pytest.raises(ValueError), atomic_output(target) as fh:
        fh.write("half")
        raise ValueError("disk full")
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["f.txt"]
    with atomic_output(target) as fh:
        fh.write("new")
    assert target.read_text() == "new" and os.listdir(tmp_path) == ["f.txt"]


def test_unwritable_output_is_a_user_error(spec_file, tmp_path, capsys):
    src = write_jsonl(tmp_path / "in.jsonl", RECORDS)
    (tmp_path / "file").write_text("")
    assert main(["score", "--spec", str(spec_file), "--input", str(src), "--output",
                 str(tmp_path / "file" / "out.jsonl"), "--no-progress"]) == 2
    assert "cannot write here" in capsys.readouterr().err


def test_explain_shows_each_scorers_value_and_reason(spec_file, tmp_path, capsys):
    src = write_jsonl(tmp_path / "in.jsonl", RECORDS)
    assert main(["explain", "--spec", str(spec_file), "--input", str(src), "--limit", "3"]) == 0
    out = capsys.readouterr().out
    assert "row 1 (id a)" in out and "row 3" in out and "row 4" not in out
    assert "no gold answer" in out and '"gold": "4"' in out
    assert main(["explain", "--spec", str(spec_file), "--input", str(src), "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(lines) == 4
    assert lines[2]["info"]["correct"] == {"reason": "no gold answer"} and lines[2]["scores"]["correct"] is None


def test_unknown_scorer_in_score_suggests_and_exits_2(helpers_site, tmp_path, capsys):
    spec = tmp_path / "s.json"
    spec.write_text(json.dumps({"scorers": [{"scorer": "t_lenth"}]}))
    src = write_jsonl(tmp_path / "in.jsonl", RECORDS)
    assert main(["score", "--spec", str(spec), "--input", str(src), "--output", str(tmp_path / "o")]) == 2
    assert "did you mean t_length" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_bad_arguments_exit_2():
    with pytest.raises(SystemExit) as exc:
        main(["score", "--spec", "x", "--input", "y", "--output", "z", "--batch-size", "0"])
    assert exc.value.code == 2


@pytest.mark.timeout(300)
def test_sandbox_check_runs_the_sandbox_modules_main(capsys):
    if importlib.util.find_spec("grpo_rewards.sandbox.check") is None:  # module of the sandbox issue
        assert main(["sandbox-check", "--json"]) == 2
        assert "sandbox-check is not available" in capsys.readouterr().err
        return
    direct = subprocess.run([sys.executable, "-c", "import sys; from grpo_rewards.sandbox.check import main; "
                             "sys.exit(main([]))"], capture_output=True, text=True, timeout=120)
    via_cli = run_cli("sandbox-check")
    assert via_cli.returncode == direct.returncode
    assert "Traceback" not in via_cli.stderr


@pytest.mark.timeout(300)
def test_bundled_examples_score_as_their_notes_say(tmp_path, capsys):
    """The bundled example spec on the bundled completions (built-in scorers)."""
    from reward_helpers import REPO

    out = tmp_path / "scores.jsonl"
    assert main(["score", "--spec", str(REPO / "examples/rewards.yaml"), "--input",
                 str(REPO / "examples/completions.jsonl"), "--output", str(out), "--no-progress"]) == 0
    inputs = [json.loads(line) for line in (REPO / "examples/completions.jsonl").read_text().splitlines()]
    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(results) == len(inputs) >= 30
    for record, result in zip(inputs, results, strict=True):
        assert result["id"] == record["id"]
        if record["note"] in ("template, correct", "chat messages"):
            assert result["scores"]["correct"] == 1.0 and result["scores"]["format"] == 1.0, record
        if record["note"].startswith("template, wrong"):
            assert result["scores"]["correct"] == 0.0 and result["scores"]["format"] == 1.0, record
        if record["note"] in ("GSM8K style", "boxed, no template", "equivalent form 0.875"):
            assert result["scores"]["correct"] == 1.0, record
    summary = capsys.readouterr().out
    assert "correct" in summary and "brevity" in summary
