"""Real plugins: the keywords package pip-installed, broken plugins isolated, name clashes,
and the worked example of docs/plugins.md built, installed and run."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from reward_helpers import REPO, cli_path, subprocess_env, write_entry_point, write_jsonl

from grpo_rewards import ConfigError, Sample, build, load_registry

KEYWORDS_PLUGIN = REPO / "plugins" / "grpo-rewards-keywords"


def pip_install(project: Path, target: Path) -> Path:
    """A real, non-editable pip install of `project` into `target` (offline: no index, no deps).

    Built from a copy: setuptools leaves build/ and .egg-info in the source tree it builds.
    """
    source = target.with_name(target.name + "-src")
    shutil.copytree(project, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                    "--no-build-isolation", "--target", str(target), str(source)],
                   check=True, capture_output=True, text=True, timeout=300)
    return target


@pytest.fixture(scope="module")
def keywords_site(tmp_path_factory):
    return pip_install(KEYWORDS_PLUGIN, tmp_path_factory.mktemp("keywords-site"))


@pytest.fixture
def on_path(monkeypatch):
    def add(*sites: Path) -> None:
        for site in sites:
            monkeypatch.syspath_prepend(str(site))
    return add


def list_json(*sites: Path) -> tuple[subprocess.CompletedProcess, dict]:
    result = subprocess.run([cli_path(), "list", "--json"], capture_output=True, text=True,
                            env=subprocess_env(*sites), timeout=120)
    return result, (json.loads(result.stdout) if result.returncode == 0 else {})


@pytest.mark.timeout(300)
def test_installed_keywords_plugin_is_discovered_and_scores(keywords_site, on_path):
    on_path(keywords_site)
    registry = load_registry()
    entry = registry.scorers["keywords"]
    assert entry.plugin == "keywords"
    assert Path(sys.modules[entry.cls.__module__].__file__).is_relative_to(keywords_site)  # the installed copy
    reward = build({"scorers": [{"scorer": "keywords", "params": {"required": ["therefore", "apples"],
                                                                   "forbidden": ["as an AI"]}}]}, registry)
    batch = reward.score([Sample("q", "Therefore 3 apples."), Sample("q", "therefore, 2 pears"),
                          Sample("q", "As an AI, therefore apples")])
    assert batch.values["keywords"] == [1.0, 0.5, 0.0]
    assert batch.scores["keywords"][1].info == {"found": ["therefore"], "missing": ["apples"],
                                                "forbidden_found": []}


@pytest.mark.timeout(300)
def test_grpo_rewards_list_and_score_in_a_subprocess_see_the_plugin(keywords_site, tmp_path):
    result, listed = list_json(keywords_site)
    assert result.returncode == 0, result.stderr
    by_name = {s["name"]: s for s in listed["scorers"]}
    assert by_name["keywords"]["plugin"] == "keywords"
    assert by_name["keywords"]["params"]["word_boundary"]["default"] is True
    table = subprocess.run([cli_path(), "list"], capture_output=True, text=True,
                           env=subprocess_env(keywords_site), timeout=120)
    assert re.search(r"│ keywords\s+│[^\n]*\n│ keywords\s+│", table.stdout)  # the name, its plugin under it
    spec = tmp_path / "spec.yaml"
    spec.write_text("scorers:\n  - scorer: keywords\n    params: {required: [cat, dog]}\n")
    src = write_jsonl(tmp_path / "in.jsonl", [{"completion": "a cat"}, {"completion": "cat and dog"}])
    out = tmp_path / "out.jsonl"
    result = subprocess.run([cli_path(), "score", "--spec", str(spec), "--input", str(src), "--output", str(out),
                             "--no-progress"], capture_output=True, text=True, env=subprocess_env(keywords_site),
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert [json.loads(line)["total"] for line in out.read_text().splitlines()] == [0.5, 1.0]


BROKEN_MODULES = {
    "broken_import": "import a_module_that_does_not_exist\n",
    "broken_hook": ("from grpo_rewards import hookimpl\n\n@hookimpl\ndef grpo_rewards_scorers():\n"
                    "    raise RuntimeError('hook exploded')\n"),
    "broken_type": ("from grpo_rewards import hookimpl\n\n@hookimpl\ndef grpo_rewards_scorers():\n"
                    "    return ['not a scorer class']\n"),
    "broken_signature": ("from grpo_rewards import hookimpl\n\n@hookimpl\ndef grpo_rewards_scorers(config):\n"
                         "    return []\n"),
}


@pytest.fixture(scope="module")
def broken_site(tmp_path_factory):
    site = tmp_path_factory.mktemp("broken-site")
    for module, source in BROKEN_MODULES.items():
        (site / f"{module}.py").write_text(source)
        write_entry_point(site, module.replace("_", "-"), module, module)
    return site


@pytest.mark.timeout(300)
def test_broken_plugins_are_reported_by_name_and_the_rest_load(keywords_site, broken_site, on_path):
    on_path(keywords_site, broken_site)
    with pytest.warns(RuntimeWarning):
        registry = load_registry()
    failures = {f.plugin: f.error for f in registry.failures}
    assert set(BROKEN_MODULES) <= set(failures)
    assert "a_module_that_does_not_exist" in failures["broken_import"]
    assert "hook exploded" in failures["broken_hook"]
    assert "not a Scorer subclass" in failures["broken_type"]
    assert "config" in failures["broken_signature"]
    assert registry.scorers["keywords"].plugin == "keywords"
    assert registry.scorers["think_format"].plugin == "grpo_rewards.scorers.text"  # built-ins still load

    result, listed = list_json(keywords_site, broken_site)
    assert result.returncode == 0, result.stderr
    assert {f["plugin"] for f in listed["failures"]} >= set(BROKEN_MODULES)
    assert "keywords" in {s["name"] for s in listed["scorers"]}
    table = subprocess.run([cli_path(), "list"], capture_output=True, text=True,
                           env=subprocess_env(keywords_site, broken_site), timeout=120)
    for module in BROKEN_MODULES:
        assert f"plugin {module!r} failed to load" in table.stderr
    # other commands still work and warn about the broken plugins
    result = subprocess.run([cli_path(), "schema"], capture_output=True, text=True,
                            env=subprocess_env(keywords_site, broken_site), timeout=120)
    assert result.returncode == 0 and "warning: plugin 'broken_hook' failed to load" in result.stderr
    assert '"keywords"' in result.stdout


DUP_MODULE = """\
from grpo_rewards import Score, Scorer, hookimpl


class Dup{n}(Scorer):
    \"\"\"A scorer named dup.\"\"\"

    name = "dup"

    def score(self, samples, results=None):
        return [Score(0.0) for _ in samples]


@hookimpl
def grpo_rewards_scorers():
    return [Dup{n}]
"""


@pytest.mark.timeout(300)
def test_two_plugins_with_one_scorer_name_is_an_error_naming_both(tmp_path, on_path):
    for n in ("a", "b"):
        (tmp_path / f"dup_{n}.py").write_text(DUP_MODULE.format(n=n))
        write_entry_point(tmp_path, f"dup-{n}", f"dup_{n}", f"dup_{n}")
    result = subprocess.run([cli_path(), "list"], capture_output=True, text=True,
                            env=subprocess_env(tmp_path), timeout=120)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert re.search(r"scorer name 'dup' is registered by plugin 'dup_[ab]' \(dup_[ab]\.Dup[ab]\) "
                     r"and by plugin 'dup_[ab]'", result.stderr), result.stderr
    assert "'dup_a'" in result.stderr and "'dup_b'" in result.stderr


# ---------------------------------------------------------------------------------------------
# The keywords scorer itself


@pytest.fixture(scope="module")
def keywords(keywords_site):
    sys.path.insert(0, str(keywords_site))
    try:
        from grpo_rewards_keywords import KeywordsScorer
    finally:
        sys.path.remove(str(keywords_site))
    return lambda **params: (lambda *texts, **ref: [s.value for s in KeywordsScorer(params).score(
        [Sample("q", t, ref) for t in texts])])


def test_keywords_partial_credit_case_and_word_boundaries(keywords):
    score = keywords(required=["Cat", "C++"])
    assert score("cat and c++", "concatenate C++x", "CAT", "") == [1.0, 0.0, 0.5, 0.0]
    assert keywords(required=["Cat"], case_sensitive=True)("cat", "Cat") == [0.0, 1.0]
    assert keywords(required=["cat"], word_boundary=False)("concatenate") == [1.0]
    assert keywords(required=["a", "b"], partial_credit=False)("a", "a b") == [0.0, 1.0]
    assert keywords(required=["ok"], min_count=2)("ok", "ok, ok") == [0.0, 1.0]


def test_keywords_forbidden_penalty_and_regex(keywords):
    score = keywords(required=["yes"], forbidden=["sorry", "as an ai"], forbidden_penalty=0.25)
    assert score("yes", "yes, sorry", "Sorry, as an AI: yes", "sorry") == [1.0, 0.75, 0.5, 0.0]
    assert keywords(forbidden=["bad"])("good", "bad") == [1.0, 0.0]
    regex = keywords(required=[r"\d+ apples?", r"total:\s*\d+"], regex=True)
    assert regex("3 apples, total: 3", "1 apple", "apples") == [1.0, 0.5, 0.0]


def test_keywords_scope_and_per_sample_keywords(keywords):
    after = keywords(required=["42"], scope="after_think")
    assert after("<think>42?</think> 41", "<think>x</think> 42") == [0.0, 1.0]
    answer = keywords(required=["42"], scope="answer")
    assert answer("<answer>42</answer>", "42 but no tags") == [1.0, 0.0]
    per_sample = keywords(required_field="must")
    assert per_sample("red fox", must=["red", "fox", "dog"]) == [pytest.approx(2 / 3)]
    assert per_sample("red fox", must="fox") == [1.0]
    assert per_sample("red fox") == [None]
    assert per_sample("red", must=[]) == [None]
    assert keywords(required_field="must", regex=True)("x", must=["("]) == [None]


def test_keywords_never_raise_on_odd_input(keywords):
    score = keywords(required=["a"], forbidden=["z"])
    odd = ["", "\ud800 lone surrogate a", "a" * 1_000_000, "\x00\x01", "日本語 a"]
    values = score(*odd)
    assert all(v is not None and 0.0 <= v <= 1.0 for v in values)
    from grpo_rewards_keywords import KeywordsScorer

    scorer = KeywordsScorer(required=["hi"])
    chat = [Sample([{"role": "user", "content": "hi"}], [{"role": "assistant", "content": "hi there"}]),
            Sample(None, None), Sample("q", [{"role": "assistant", "content": [{"type": "text", "text": "hi"}]}])]
    assert [s.value for s in scorer.score(chat)] == [1.0, 0.0, 1.0]


def test_keywords_values_stay_in_range_on_arbitrary_text(keywords):
    from hypothesis import given, settings
    from hypothesis import strategies as st

    words = st.text(min_size=1, max_size=8)

    @settings(max_examples=150, deadline=None)
    @given(text=st.text(max_size=300), required=st.lists(words, max_size=4), forbidden=st.lists(words, max_size=3),
           boundary=st.booleans(), case=st.booleans(), penalty=st.floats(0, 1))
    def check(text, required, forbidden, boundary, case, penalty):
        if not (required or forbidden):
            required = ["x"]
        [value] = keywords(required=required, forbidden=forbidden, word_boundary=boundary, case_sensitive=case,
                           forbidden_penalty=penalty)(text)
        assert value is not None and 0.0 <= value <= 1.0

    check()


@pytest.mark.parametrize("params, expected", [
    ({}, "give at least one of"),
    ({"required": ["("], "regex": True}, "required[0] is not a valid regex"),
    ({"required": [""]}, "scorers[0].params.required[0]"),
    ({"required": ["a"], "forbidden_penalty": 2}, "scorers[0].params.forbidden_penalty"),
    ({"required": ["a"], "scope": "title"}, "scorers[0].params.scope"),
])
def test_keywords_bad_params_are_spec_errors(keywords_site, on_path, params, expected):
    on_path(keywords_site)
    with pytest.raises(ConfigError) as exc:
        build({"scorers": [{"scorer": "keywords", "params": params}]}, load_registry())
    assert expected in str(exc.value)


# ---------------------------------------------------------------------------------------------
# docs/plugins.md: the worked example is built, installed and run


def doc_blocks(markdown: str) -> list[tuple[str, str]]:
    return re.findall(r"```(\w+)\n(.*?)```", markdown, flags=re.S)


@pytest.mark.timeout(300)
def test_plugin_guide_example_builds_installs_and_runs(tmp_path):
    project, site, workdir = tmp_path / "project", tmp_path / "site", tmp_path / "work"
    workdir.mkdir()
    runs = []
    for language, body in doc_blocks((REPO / "docs" / "plugins.md").read_text()):
        first, _, rest = body.partition("\n")
        if first.startswith("# file: "):
            name = first.removeprefix("# file: ").strip()
            dest = (project if "/" in name or name == "pyproject.toml" else workdir) / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(body)
        elif first == "# run":
            runs.append(body)
    assert (project / "pyproject.toml").exists() and len(runs) >= 3
    pip_install(project, site)
    result, listed = list_json(site)
    assert result.returncode == 0, result.stderr
    entry = next(s for s in listed["scorers"] if s["name"] == "word_budget")
    assert entry["plugin"] == "word_budget"
    assert entry["description"] == "1 within the word budget, falling linearly to 0 at twice the budget."
    assert entry["params"]["limit"]["default"] == 50
    for code in runs:
        result = subprocess.run([sys.executable, "-c", code], cwd=workdir, capture_output=True, text=True,
                                env=subprocess_env(site, workdir), timeout=120)
        assert result.returncode == 0, f"{code}\n{result.stderr}"
