"""Bad input on the command line: exit 2, a message that names what and where, no traceback, no
half-written output. The console scripts run for real, in a subprocess."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reward_helpers import REPO, cli_path, subprocess_env

import grpo_rewards
from grpo_core.cli import main as train_main
from grpo_rewards.cli import main as rewards_main

CHEAP_SPEC = "scorers:\n  - scorer: think_format\n  - scorer: repetition\n"


def run(script: str, *args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess:
    exe = str(Path(sys.executable).with_name(script))
    return subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True, input=stdin,
                          env=subprocess_env(), timeout=180)


def assert_user_error(result: subprocess.CompletedProcess, *needles: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    for needle in needles:
        assert needle in result.stderr, result.stderr


@pytest.fixture
def files(tmp_path):
    (tmp_path / "spec.yaml").write_text(CHEAP_SPEC)
    (tmp_path / "in.jsonl").write_text('{"prompt": "q", "completion": "<think>a</think><answer>1</answer>"}\n')
    return tmp_path


@pytest.mark.parametrize("content", [b"scorers:\n  - scorer: think_format\n    weight: 1\xe9\n",
                                     bytes(range(128, 256)) * 3], ids=["latin-1", "binary"])
def test_a_spec_or_config_that_is_not_utf8_is_named_with_its_line(files, content):
    bad = files / "bad.yaml"
    bad.write_bytes(content)
    line = "3" if content.startswith(b"scorers") else "1"
    assert_user_error(run("grpo-rewards", "validate", str(bad), cwd=files), f"bad.yaml:{line}: not UTF-8 text")
    result = run("grpo-rewards", "score", "--spec", str(bad), "--input", "in.jsonl", "--output", "out.jsonl",
                 cwd=files)
    assert_user_error(result, "not UTF-8 text")
    assert not (files / "out.jsonl").exists()
    assert_user_error(run("grpo-train", str(bad), cwd=files), f"bad.yaml:{line}: not UTF-8 text")


def test_a_json_syntax_error_gives_its_line_and_column(files):
    bad = files / "bad.json"
    bad.write_text('{"scorers": [\n  {"scorer": "think_format", "weight": 1,}]}\n')
    assert_user_error(run("grpo-rewards", "validate", str(bad), cwd=files),
                      "bad.json:2: invalid JSON: Expecting property name enclosed in double quotes (column 42)")


@pytest.mark.parametrize("completion", ["null", "42", '{"text": "x"}', '[1, 2]'])
def test_a_completion_that_is_not_text_is_an_error_naming_its_line(files, completion):
    (files / "in.jsonl").write_text('{"prompt": "q", "completion": "fine"}\n'
                                    f'{{"prompt": "q", "completion": {completion}, "answer": "42"}}\n')
    result = run("grpo-rewards", "score", "--spec", "spec.yaml", "--input", "in.jsonl", "--output", "out.jsonl",
                 cwd=files)
    assert_user_error(result, "in.jsonl:2:", "'completion' must be a string or a list of chat messages")
    assert not (files / "out.jsonl").exists()


def test_both_clis_print_their_version(files):
    for script in ("grpo-rewards", "grpo-train"):
        result = run(script, "--version", cwd=files)
        assert result.returncode == 0 and result.stdout.strip() == f"{script} {grpo_rewards.__version__}"


def test_dash_reads_stdin_and_writes_stdout(files):
    rows = "".join(json.dumps({"prompt": "q", "completion": c}) + "\n"
                   for c in ("<think>a</think>\n<answer>1</answer>", "no tags"))
    result = run("grpo-rewards", "score", "--spec", "spec.yaml", "--input", "-", "--output", "-",
                 cwd=files, stdin=rows)
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]  # nothing but the results on stdout
    assert [r["index"] for r in lines] == [0, 1]
    assert lines[0]["scores"]["think_format"] == 1.0 and lines[1]["scores"]["think_format"] == 0.0
    assert "Summary" in result.stderr and "standard output" in result.stderr
    assert not (files / "-").exists()
    schema = run("grpo-rewards", "schema", "--output", "-", cwd=files)
    assert schema.returncode == 0 and json.loads(schema.stdout)["title"]


# ---------------------------------------------------------------------------------------------
# Property: whatever the bytes, exit 0 or 2 and never a traceback. In-process, so hundreds of
# inputs run in seconds; the subprocess tests above cover the console scripts themselves.


def _call(main, argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse
            code = exc.code
    return code, err.getvalue()


yaml_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["scorers", "scorer", "weight", "params", "name", "model", "rewards", "data",
                         "max_steps", "on_error", "prompt", "completion", "answer"]) | st.text(max_size=8),
        inner, max_size=5),
    max_leaves=20)

documents = st.one_of(
    st.binary(max_size=300),
    yaml_values.map(lambda v: yaml.safe_dump(v).encode()),
    yaml_values.map(lambda v: json.dumps(v).encode()),
    st.lists(yaml_values.map(json.dumps), max_size=5).map(lambda lines: "\n".join(lines).encode()),
)

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ
@given(document=documents, suffix=st.sampled_from([".yaml", ".json", ".toml"]))
def test_validate_and_grpo_train_never_show_a_traceback(tmp_path, document, suffix):
    path = tmp_path / f"doc{suffix}"
    path.write_bytes(document)
    code, err = _call(rewards_main, ["validate", str(path)])
    assert code in (0, 2) and "Traceback" not in err
    # Random documents never make a complete training config, so this stops at config loading.
    code, err = _call(train_main, [str(path)])
    assert code == 2 and "Traceback" not in err


@FUZZ
@given(document=documents)
def test_score_never_shows_a_traceback_whatever_the_input_lines(tmp_path, document):
    (tmp_path / "spec.yaml").write_text(CHEAP_SPEC)
    (tmp_path / "in.jsonl").write_bytes(document)
    out = tmp_path / "out.jsonl"
    out.unlink(missing_ok=True)
    code, err = _call(rewards_main, ["score", "--spec", str(tmp_path / "spec.yaml"), "--input",
                                     str(tmp_path / "in.jsonl"), "--output", str(out), "--no-progress"])
    assert code in (0, 2) and "Traceback" not in err
    assert out.exists() == (code == 0)


def test_the_cli_path_helper_is_the_console_script():
    assert Path(cli_path()).name == "grpo-rewards"
    assert REPO.joinpath("pyproject.toml").exists()
