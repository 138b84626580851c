"""The README and the user docs: their code runs and their reference tables match the models.

(The plugin guide's worked example is built and installed in test_plugins.py.)
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from reward_helpers import REPO, subprocess_env

from grpo_rewards import load_spec
from grpo_rewards.spec import RewardSpec, ScorerSpec


def blocks(path, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", path.read_text(), flags=re.S)


def run_python(code: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True,
                          env=subprocess_env(), timeout=240)


def test_readme_starts_with_exactly_the_two_setup_commands():
    text = (REPO / "README.md").read_text()
    first = re.search(r"```bash\n(.*?)```", text, flags=re.S)
    assert text.index(first.group(0)) < text.index("\n## ")  # at the very top, before any section
    commands = [line.split("#")[0].strip() for line in first.group(1).splitlines() if line.strip()]
    assert commands == ["bash scripts/quickstart.sh", "bash scripts/test.sh"]
    assert (REPO / ".ci/run").read_text().strip().endswith("exec bash scripts/test.sh")


@pytest.mark.timeout(300)
def test_readme_python_example_gives_the_values_it_shows():
    code = blocks(REPO / "README.md", "python")[0]
    check = code + "\nassert batch.totals == [1.2, 0.0], batch.totals\n" \
                   "assert batch.values == {'correct': [1.0, 0.0], 'format': [1.0, 0.0]}, batch.values\n"
    result = run_python(check, REPO)
    assert result.returncode == 0, result.stderr


@pytest.mark.timeout(300)
def test_getting_started_python_example_runs():
    code = blocks(REPO / "docs" / "getting-started.md", "python")[0]
    result = run_python(code, REPO)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0].startswith("[")


def test_spec_reference_lists_every_field():
    text = (REPO / "docs" / "spec.md").read_text()
    for model in (RewardSpec, ScorerSpec):
        for name in model.model_fields:
            assert re.search(rf"^\| `{name}` \|", text, flags=re.M), f"docs/spec.md does not document {name}"
    documented = set(re.findall(r"^\| `(\w+)` \|", text, flags=re.M))
    assert documented == set(RewardSpec.model_fields) | set(ScorerSpec.model_fields)


@pytest.mark.timeout(300)
def test_spec_reference_examples_load_and_run(tmp_path):
    doc = REPO / "docs" / "spec.md"
    for language in ("yaml", "toml"):
        for body in blocks(doc, language):
            first = body.partition("\n")[0]
            if first.startswith("# file: "):
                (tmp_path / first.removeprefix("# file: ")).write_text(body)
    yaml_spec = load_spec(tmp_path / "rewards.yaml")
    assert yaml_spec.aliases == ["correct", "format", "cosine_length"]
    assert load_spec(tmp_path / "rewards.toml").aliases == ["correct", "think_format"]
    [code] = blocks(doc, "python")
    result = run_python(code, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "['correct', 'format', 'cosine_length']" in result.stdout
    assert result.stdout.strip().endswith("scorers[0].weight")


def test_spec_reference_error_example_matches_the_real_messages(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("scorers:\n  - scorer: math_acuracy\n  - scorer: think_format\n    name: format\n"
                   "    weight: .nan\n  - scorer: math_accuracy\n    params: {timeout_s: 0.0}\n")
    result = subprocess.run([sys.executable, "-m", "grpo_rewards.cli", "validate", str(bad)], cwd=tmp_path,
                            capture_output=True, text=True, env=subprocess_env(), timeout=120)
    assert result.returncode == 2
    [shown] = blocks(REPO / "docs" / "spec.md", "text")
    real = result.stderr.replace(str(bad), "bad.yaml")
    assert real.strip() == shown.strip()


@pytest.mark.parametrize("doc", ["README.md", "docs/getting-started.md", "docs/spec.md", "docs/plugins.md"])
def test_relative_links_resolve(doc):
    path = REPO / doc
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text()):
        if "://" not in target:
            assert (path.parent / target).exists(), f"{doc} links to missing {target}"
