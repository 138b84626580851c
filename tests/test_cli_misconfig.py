"""No silent misconfiguration, driven through the real `grpo-rewards` console script in a subprocess:
a reference field the data lacks, outputs that would destroy the input, what an interrupt reports,
`explain` of one row, and the `list` table at 80 columns."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from reward_helpers import REPO, cli_path, subprocess_env, write_entry_point, write_jsonl

pytestmark = pytest.mark.timeout(300)

TOUR_SPEC = REPO / "examples" / "rewards.yaml"
TOUR_DATA = REPO / "examples" / "completions.jsonl"


def run(*args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([cli_path(), *args], capture_output=True, text=True, input=stdin,
                          env=env or subprocess_env(), timeout=240)


def tour_rows() -> list[dict]:
    return [json.loads(line) for line in TOUR_DATA.read_text().splitlines() if line.strip()]


@pytest.fixture
def solution_data(tmp_path):
    """The README tour's completions with the gold column named `solution`, as open-r1 and TRL name it."""
    rows = [{("solution" if k == "answer" else k): v for k, v in r.items()} for r in tour_rows()]
    return write_jsonl(tmp_path / "solution.jsonl", rows)


def assert_only(directory: Path, *names: str) -> None:
    """Nothing else was written there: no output, no temporary file left behind."""
    assert sorted(p.name for p in directory.iterdir()) == sorted(names)


def test_the_tour_with_a_solution_column_stops_with_the_fix(solution_data, tmp_path):
    out = tmp_path / "scores.jsonl"
    result = run("score", "--spec", str(TOUR_SPEC), "--input", str(solution_data), "--output", str(out),
                 "--no-progress")
    assert result.returncode == 2, result.stderr
    err = result.stderr
    assert "Traceback" not in err
    assert "scorer 'correct' (math_accuracy, scorers[0]) reads the field 'answer'" in err
    assert "did you mean 'solution'? Set `answer_field: solution` in scorers[0].params" in err
    assert "or rename the column 'solution' to 'answer'" in err
    assert "its columns: id, note, solution" in err  # the columns there are (prompt and completion aside)
    assert_only(tmp_path, "solution.jsonl")  # nothing was written
    explained = run("explain", "--spec", str(TOUR_SPEC), "--input", str(solution_data))
    assert explained.returncode == 2 and "Set `answer_field: solution`" in explained.stderr
    assert explained.stdout == "" and "Traceback" not in explained.stderr


def test_the_tour_with_answer_field_solution_scores_as_with_answer(solution_data, tmp_path):
    spec = tmp_path / "rewards.yaml"
    spec.write_text(TOUR_SPEC.read_text().replace("params: {timeout_s: 5}", "params: {timeout_s: 5, answer_field: solution}"))
    renamed, original = tmp_path / "renamed.jsonl", tmp_path / "original.jsonl"
    assert run("score", "--spec", str(spec), "--input", str(solution_data), "--output", str(renamed),
               "--no-progress").returncode == 0
    assert run("score", "--spec", str(TOUR_SPEC), "--input", str(TOUR_DATA), "--output", str(original),
               "--no-progress").returncode == 0
    got = [json.loads(line) for line in renamed.read_text().splitlines()]
    want = [json.loads(line) for line in original.read_text().splitlines()]
    assert got == want
    assert sum(r["scores"]["correct"] == 1.0 for r in got) >= 10  # correctness counted, not format alone


def test_a_field_empty_on_some_rows_scores_none_there_and_is_counted(tmp_path):
    rows = tour_rows()[:4]
    rows[1]["answer"] = None
    del rows[2]["answer"]
    src = write_jsonl(tmp_path / "in.jsonl", rows)
    out = tmp_path / "out.jsonl"
    result = run("score", "--spec", str(TOUR_SPEC), "--input", str(src), "--output", str(out), "--no-progress")
    assert result.returncode == 0, result.stderr
    scored = [json.loads(line)["scores"]["correct"] for line in out.read_text().splitlines()]
    assert scored[1] is None and scored[2] is None and scored[0] == 1.0
    assert "note: correct: 2 of 4 rows have no value in 'answer'; they score None" in result.stdout


def test_output_equal_to_the_input_is_refused_and_the_input_kept(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", tour_rows()[:3])
    before = src.read_bytes()
    link = tmp_path / "hardlink.jsonl"
    os.link(src, link)
    for output in (str(src), os.path.relpath(src), str(link)):
        result = run("score", "--spec", str(TOUR_SPEC), "--input", str(src), "--output", output, "--no-progress")
        assert result.returncode == 2
        assert "is the input file; it would be overwritten with the results" in result.stderr
        assert "Traceback" not in result.stderr
        assert src.read_bytes() == before
    assert_only(tmp_path, "in.jsonl", "hardlink.jsonl")


def test_output_naming_a_directory_is_refused_before_any_work(tmp_path):
    target = tmp_path / "results"
    target.mkdir()
    # The input does not even exist: the output is checked first, before anything is read or scored.
    result = run("score", "--spec", str(TOUR_SPEC), "--input", str(tmp_path / "absent.jsonl"),
                 "--output", str(target), "--no-progress")
    assert result.returncode == 2
    assert f"--output {target}: is a directory; name a file to write" in result.stderr
    assert "Traceback" not in result.stderr and list(target.iterdir()) == []
    schema = run("schema", "--output", str(target))
    assert schema.returncode == 2 and "is a directory" in schema.stderr and list(target.iterdir()) == []


@pytest.fixture
def helpers_env(tmp_path_factory):
    site = tmp_path_factory.mktemp("site")
    write_entry_point(site, "reward-helpers", "helpers", "reward_helpers")
    return subprocess_env(site)


def interrupted_score(tmp_path: Path, env: dict[str, str], params: str, previous: str | None):
    """`score` with a scorer that is interrupted as `params` say, over an output holding `previous` (None:
    absent); (the result, the output path)."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"scorers:\n  - scorer: t_interrupt\n    params: {params}\n")
    src = write_jsonl(tmp_path / "in.jsonl", [{"completion": str(i)} for i in range(5)])
    out = tmp_path / "out.jsonl"
    if previous is not None:
        out.write_text(previous)
    return run("score", "--spec", str(spec), "--input", str(src), "--output", str(out), "--no-progress",
               "--batch-size", "2", env=env), out


def test_a_ctrl_c_after_the_output_was_replaced_says_it_was_written(helpers_env, tmp_path):
    """The race of a Ctrl-C landing after the rename: a real SIGINT as the scorers are closed."""
    result, out = interrupted_score(tmp_path, helpers_env, "{at_close: true}", "previous results\n")
    assert result.returncode == 130
    assert f"interrupted; {out} was already written in full" in result.stderr
    assert "no output written" not in result.stderr
    assert len(out.read_text().splitlines()) == 5
    assert_only(tmp_path, "spec.yaml", "in.jsonl", "out.jsonl")


def test_a_ctrl_c_before_the_output_was_replaced_says_it_is_unchanged(helpers_env, tmp_path):
    result, out = interrupted_score(tmp_path, helpers_env, "{after_batches: 1}", "previous results\n")
    assert result.returncode == 130
    assert f"interrupted; no output written ({out} unchanged)" in result.stderr
    assert out.read_text() == "previous results\n"
    out.unlink()
    result, out = interrupted_score(tmp_path, helpers_env, "{after_batches: 1}", None)
    assert f"interrupted; no output written ({out} not created)" in result.stderr
    assert_only(tmp_path, "spec.yaml", "in.jsonl")


def test_explain_one_row_by_index_or_id_labelled_with_its_own_number(tmp_path):
    rows = tour_rows()
    result = run("explain", "--spec", str(TOUR_SPEC), "--input", str(TOUR_DATA), "--index", "7")
    assert result.returncode == 0, result.stderr
    assert f"row 7 (id {rows[6]['id']}): total" in result.stdout
    assert result.stdout.count("row ") == 1 and "sample 0" not in result.stdout
    by_id = run("explain", "--spec", str(TOUR_SPEC), "--input", str(TOUR_DATA), "--id", rows[6]["id"], "--json")
    assert by_id.returncode == 0
    [line] = by_id.stdout.splitlines()
    assert json.loads(line)["row"] == 7 and json.loads(line)["id"] == rows[6]["id"]
    # A row piped in alone keeps the number it has in its own input: 1.
    piped = run("explain", "--spec", str(TOUR_SPEC), "--input", "-", stdin=json.dumps(rows[6]) + "\n")
    assert f"row 1 (id {rows[6]['id']})" in piped.stdout
    for args, message in ((("--index", "99"), f"--index 99: {TOUR_DATA} has {len(rows)} rows"),
                          (("--id", "nope"), "--id nope: no row of"), (("--index", "0"), "must be >= 1")):
        bad = run("explain", "--spec", str(TOUR_SPEC), "--input", str(TOUR_DATA), *args)
        assert bad.returncode == 2 and message in bad.stderr and "Traceback" not in bad.stderr


def test_list_at_80_columns_never_breaks_a_parameter_name():
    env = {**subprocess_env(), "COLUMNS": "80"}
    listed = json.loads(run("list", "--json", env=env).stdout)
    names = {p for entry in listed["scorers"] + listed["sandboxes"] for p in entry["params"]}
    table = run("list", env=env)
    assert table.returncode == 0
    assert max(len(line) for line in table.stdout.splitlines()) <= 80
    broken = sorted(n for n in names if n not in table.stdout)
    assert not broken, f"parameter names broken across lines at 80 columns: {broken}"


def test_the_readme_tour_command_runs_on_its_own_data(tmp_path):
    """The control for the tests above: the unchanged tour scores (exit 0) and writes every row."""
    out = tmp_path / "scores.jsonl"
    result = run("score", "--spec", str(TOUR_SPEC), "--input", str(TOUR_DATA), "--output", str(out), "--no-progress")
    assert result.returncode == 0, result.stderr
    assert len(out.read_text().splitlines()) == len(tour_rows())
    assert "note:" not in result.stdout
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_grpo_train_refuses_data_without_the_gold_column_at_load(tmp_path):
    pytest.importorskip("torch")
    from _grpo_core_helpers import write_config

    data = write_jsonl(tmp_path / "solution.jsonl", [{"prompt": f"{a}+{a}=", "solution": str(2 * a)} for a in range(16)])
    spec = {"scorers": [{"scorer": "math_accuracy", "name": "correct", "params": {"workers": 1}}]}
    config = write_config(tmp_path, rewards=spec, **{"data.path": str(data), "data.eval_size": 0})
    train = str(Path(cli_path()).with_name("grpo-train"))
    result = subprocess.run([train, str(config)], capture_output=True, text=True, env=subprocess_env(), timeout=240)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert f"data {data} lacks a field the reward reads (its columns: prompt, solution)" in result.stderr
    assert "Set `answer_field: solution` in scorers[0].params" in result.stderr
    run_dir = tmp_path / "run"
    assert not (run_dir / "metrics.jsonl").exists() and not list(run_dir.glob("checkpoint-*"))
