"""Registry: discovery through pluggy hooks, isolation of broken plugins, name rules."""

from __future__ import annotations

import pytest
from reward_helpers import ALL, Contains, HelperPlugin, plugin

from grpo_rewards import Score, Scorer, load_registry
from grpo_rewards.errors import UnknownNameError, UserError
from grpo_rewards.registry import BUILTIN_PLUGINS, DuplicateNameError, get_registry


class OtherContains(Scorer):
    """Another scorer claiming the name t_contains."""

    name = "t_contains"

    def score(self, samples, results=None):
        return [Score(0.0) for _ in samples]


def test_extra_plugin_scorers_are_registered_with_their_plugin_name():
    registry = load_registry(extra_plugins=[HelperPlugin()])
    for cls in ALL:
        assert registry.scorer(cls.name) is cls
        assert registry.scorers[cls.name].plugin == "test-helpers"
    assert "test-helpers" in registry.plugins
    # Built-in families are plugins through the same hooks.
    assert set(BUILTIN_PLUGINS) <= set(registry.plugins)
    assert registry.failures == [] or all(f.plugin not in BUILTIN_PLUGINS for f in registry.failures)


def test_unknown_name_suggests_close_matches():
    registry = load_registry(extra_plugins=[HelperPlugin()])
    with pytest.raises(UnknownNameError) as exc:
        registry.scorer("t_contain")
    assert "did you mean t_contains" in str(exc.value)
    assert exc.value.suggestions[0] == "t_contains"
    assert isinstance(exc.value, UserError)
    with pytest.raises(UnknownNameError, match="known scorers: .*t_length"):
        registry.scorer("zzzzzz")


def test_duplicate_scorer_name_names_both_plugins():
    with pytest.raises(DuplicateNameError) as exc:
        load_registry(extra_plugins=[plugin("alpha", scorers=[Contains]), plugin("beta", scorers=[OtherContains])])
    message = str(exc.value)
    assert "'t_contains'" in message and "'alpha'" in message and "'beta'" in message
    assert "OtherContains" in message
    assert isinstance(exc.value, UserError)  # the CLI reports it without a traceback


def test_hook_that_raises_is_reported_by_name_and_the_rest_load():
    with pytest.warns(RuntimeWarning, match="flaky"):
        registry = load_registry(extra_plugins=[
            plugin("flaky", hook_error=RuntimeError("database unreachable")),
            plugin("good", scorers=[Contains]),
        ])
    assert registry.scorer("t_contains") is Contains
    [failure] = [f for f in registry.failures if f.plugin == "flaky"]
    assert "database unreachable" in failure.error and "grpo_rewards_scorers" in failure.error


@pytest.mark.parametrize("bad, expected", [
    ("not a class", "not a Scorer subclass"),
    (int, "not a Scorer subclass"),
    (type("Nameless", (Contains,), {"name": ""}), "no string attribute 'name'"),
])
def test_hook_returning_non_scorers_is_a_failure_not_a_crash(bad, expected):
    with pytest.warns(RuntimeWarning):
        registry = load_registry(extra_plugins=[plugin("odd", scorers=[Contains, bad])])
    [failure] = [f for f in registry.failures if f.plugin == "odd"]
    assert expected in failure.error
    # Nothing of a failing plugin is half-registered.
    assert "t_contains" not in registry.scorers


def test_sandbox_hook_is_checked_against_the_backend_base_class():
    with pytest.warns(RuntimeWarning, match="SandboxBackend"):
        registry = load_registry(extra_plugins=[plugin("sb", scorers=[Contains], sandboxes=[Contains])])
    assert "t_contains" in registry.scorers  # the scorer hook of the same plugin still counts
    assert any(f.plugin == "sb" and "grpo_rewards_sandboxes" in f.error for f in registry.failures)


def test_duplicate_sandbox_message_says_sandbox():
    from grpo_rewards.sandbox.base import SandboxBackend

    class Box(SandboxBackend):
        name = "t_box"

        def run(self, code, stdin="", limits=None):
            raise RuntimeError("unused")

    with pytest.raises(DuplicateNameError, match=r"^sandbox name 't_box'"):
        load_registry(extra_plugins=[plugin("a", sandboxes=[Box]), plugin("b", sandboxes=[Box])])


def test_extra_plugins_with_one_name_both_register():
    registry = load_registry(extra_plugins=[plugin("same", scorers=[Contains]), plugin("same", scorers=[])])
    assert registry.scorers["t_contains"].plugin == "same"
    assert sum(1 for name in registry.plugins if name.startswith("same")) == 2


def test_get_registry_is_cached_until_refreshed():
    first = get_registry()
    assert get_registry() is first
    assert get_registry(refresh=True) is not first
