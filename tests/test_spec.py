"""Reward specs: every format, every problem reported at once with its path and line, the schema."""

from __future__ import annotations

import json

import jsonschema
import pytest
import tomli_w
import yaml
from reward_helpers import HelperPlugin, plugin

from grpo_rewards import ConfigError, RewardSpec, load_registry, load_spec
from grpo_rewards.spec import read_structured_file, spec_json_schema, validate_spec


@pytest.fixture(scope="module")
def registry():
    return load_registry(extra_plugins=[HelperPlugin()])


GOOD = {
    "scorers": [
        {"scorer": "t_answer", "weight": 1.0},
        {"scorer": "t_length", "name": "len", "weight": 0.2, "params": {"max_chars": 40}},
        {"scorer": "t_gated", "params": {"of": "t_answer"}, "on_error": "raise"},
    ]
}


def test_yaml_toml_json_dict_and_model_load_the_same_spec(tmp_path, registry):
    paths = {
        "spec.yaml": yaml.safe_dump(GOOD),
        "spec.yml": yaml.safe_dump(GOOD),
        "spec.json": json.dumps(GOOD),
        "spec.toml": tomli_w.dumps(GOOD),
    }
    specs = []
    for name, text in paths.items():
        (tmp_path / name).write_text(text)
        specs.append(load_spec(tmp_path / name, registry))
    specs.append(load_spec(GOOD, registry))
    specs.append(load_spec(specs[0], registry))
    specs.append(RewardSpec.load(str(tmp_path / "spec.yaml"), registry))
    assert all(s == specs[0] for s in specs)
    spec = specs[0]
    assert spec.aliases == ["t_answer", "len", "t_gated"]
    # params are validated and completed with defaults
    assert spec.scorers[1].params == {"max_chars": 40, "timeout_s": 1.0}
    assert spec.scorers[0].params == {"field": "answer"}
    assert spec.scorers[2].on_error == "raise" and spec.on_error == "none"


def test_every_problem_is_listed_with_path_and_line(tmp_path, registry):
    text = """\
scorers:
  - scorer: t_answerr
  - scorer: t_length
    weight: .nan
    params:
      max_chars: -3
      timeout_s: 0
      colour: red
  - scorer: t_length
on_eror: raise
"""
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_spec(path, registry)
    by_path = {p.path: p for p in exc.value.problems}
    assert "did you mean t_answer" in by_path["scorers[0].scorer"].message
    assert by_path["scorers[0].scorer"].line == 2
    assert by_path["scorers[1].weight"].line == 4
    assert "greater than 0" in by_path["scorers[1].params.max_chars"].message
    assert "-3" in by_path["scorers[1].params.max_chars"].message
    assert by_path["scorers[1].params.max_chars"].line == 6
    assert "scorers[1].params.timeout_s" in by_path
    assert by_path["scorers[1].params.colour"].message == "unknown field"
    assert "duplicate scorer name 't_length'" in by_path["scorers[2].scorer"].message
    assert by_path["on_eror"].message == "unknown field; did you mean on_error?"
    message = str(exc.value)
    assert message.startswith("invalid reward spec (7 problems):")
    assert f"{path}:6: scorers[1].params.max_chars:" in message


@pytest.mark.parametrize("weight", [float("inf"), float("-inf"), float("nan")])
def test_non_finite_weights_are_rejected(weight, registry):
    with pytest.raises(ConfigError, match=r"scorers\[0\]\.weight"):
        load_spec({"scorers": [{"scorer": "t_length", "weight": weight}]}, registry)


@pytest.mark.parametrize("data, expected", [
    ({"scorers": []}, "scorers: List should have at least 1 item"),
    ({}, "scorers: Field required"),
    ([1, 2], "must be a mapping"),
    ({"scorers": [{"weight": 1}]}, "scorers[0].scorer: Field required"),
    ({"scorers": [{"scorer": "t_length", "params": [1]}]}, "scorers[0].params: Input should be a valid dictionary"),
    ({"scorers": [{"scorer": "t_length", "on_error": "ignore"}]}, "scorers[0].on_error"),
    ({"scorers": [{"scorer": "t_length", "name": ""}]}, "scorers[0].name"),
    ({"scorers": [{"scorer": "t_gated"}]}, "scorers[0].params.of: Field required"),
])
def test_structural_problems(data, expected, registry):
    with pytest.raises(ConfigError) as exc:
        load_spec(data, registry)
    assert expected in str(exc.value)


def test_aliases_make_duplicate_scorers_legal(registry):
    spec = load_spec({"scorers": [{"scorer": "t_length"}, {"scorer": "t_length", "name": "long",
                                                           "params": {"max_chars": 100}}]}, registry)
    assert spec.aliases == ["t_length", "long"]


@pytest.mark.parametrize("scorers, expected", [
    ([{"scorer": "t_gated", "params": {"of": "t_answer"}}, {"scorer": "t_answer"}],
     "which must be listed before it (it is scorers[1], which comes later)"),
    ([{"scorer": "t_answer"}, {"scorer": "t_gated", "params": {"of": "t_answr"}}], "no scorer has that name"),
    ([{"scorer": "t_gated", "params": {"of": "t_gated"}}], "cannot read its own results"),
])
def test_dependencies_must_come_earlier(scorers, expected, registry):
    with pytest.raises(ConfigError) as exc:
        load_spec({"scorers": scorers}, registry)
    assert expected in str(exc.value)


def test_embedding_in_a_larger_config_prefixes_paths(registry):
    spec, problems = validate_spec({"scorers": [{"scorer": "t_length", "params": {"max_chars": 0}}]}, registry,
                                   path_prefix="rewards", loc_prefix=("rewards",), source="train.yaml")
    assert spec is None
    assert [p.path for p in problems] == ["rewards.scorers[0].params.max_chars"]
    assert str(problems[0]).startswith("train.yaml: rewards.scorers[0].params.max_chars:")
    _, problems = validate_spec({"scorers": [{"scorer": "t_length", "params": {"max_chars": 0}}]}, registry,
                                path_prefix="rewards")
    assert [p.path for p in problems] == ["rewards.scorers[0].params.max_chars"]


@pytest.mark.parametrize("name, text, line", [
    ("bad.yaml", "scorers:\n  - scorer: [unclosed\n", 3),
    ("bad.json", '{"scorers": [\n  {"scorer": }\n]}', 2),
    ("bad.toml", "scorers = [", None),
])
def test_syntax_errors_are_config_errors_with_line(tmp_path, name, text, line):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError) as exc:
        read_structured_file(path)
    [problem] = exc.value.problems
    assert problem.source == str(path) and problem.line == line
    assert "invalid" in problem.message


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read file"):
        load_spec(tmp_path / "nope.yaml")


def test_model_round_trip_keeps_params_explicitly_none(registry):
    from pydantic import BaseModel, ConfigDict, Field

    from grpo_rewards import Score, Scorer

    class CapParams(BaseModel):
        model_config = ConfigDict(extra="forbid")
        cap: int | None = Field(5, description="None: no cap.")

    class Cap(Scorer):
        """Cap."""

        name = "t_cap"
        Params = CapParams

        def score(self, samples, results=None):
            return [Score(0.0) for _ in samples]

    reg = load_registry(extra_plugins=[plugin("cap", scorers=[Cap])])
    spec = load_spec({"scorers": [{"scorer": "t_cap", "params": {"cap": None}}]}, reg)
    assert load_spec(spec, reg).scorers[0].params == {"cap": None}


def test_json_schema_has_every_scorers_params_and_validates_specs(registry):
    schema = spec_json_schema(registry)
    jsonschema.Draft202012Validator.check_schema(schema)
    text = json.dumps(schema)
    for field in ("max_chars", "timeout_s", "text", "of"):
        assert f'"{field}"' in text
    validator = jsonschema.Draft202012Validator(schema)
    assert not list(validator.iter_errors(GOOD))
    bad = {"scorers": [{"scorer": "t_length", "params": {"max_chars": "ten"}}]}
    assert list(validator.iter_errors(bad))
    unknown_param = {"scorers": [{"scorer": "t_length", "params": {"colour": 1}}]}
    assert list(validator.iter_errors(unknown_param))


def test_a_scorer_whose_dependencies_raise_is_a_problem_not_a_crash():
    from reward_helpers import Gated

    class BadDeps(Gated):
        """Its dependencies() is broken."""

        name = "t_bad_deps"

        @classmethod
        def dependencies(cls, params):
            raise KeyError("oops")

    registry = load_registry(extra_plugins=[plugin("bad-deps", scorers=[BadDeps])])
    with pytest.raises(ConfigError, match=r"scorers\[0\]\.params: scorer 't_bad_deps' failed to name its "
                                          r"dependencies: KeyError"):
        load_spec({"scorers": [{"scorer": "t_bad_deps", "params": {"of": "x"}}]}, registry)
