"""The plugin contract: the pluggy hooks a plugin implements to add scorers or sandboxes.

A plugin is a module (or object) with functions marked `@hookimpl`, advertised by an entry
point in the group ``grpo_rewards``::

    # pyproject.toml of the plugin
    [project.entry-points.grpo_rewards]
    keywords = "grpo_rewards_keywords.plugin"

Built-in scorers are registered through these same hooks (see `registry.BUILTIN_PLUGINS`),
so a third-party plugin has exactly the powers a built-in has.
"""

from __future__ import annotations

import pluggy

PROJECT_NAME = "grpo_rewards"
ENTRY_POINT_GROUP = "grpo_rewards"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def grpo_rewards_scorers() -> list[type]:
    """Return the scorer classes this plugin provides.

    Receives: nothing.
    Returns:  a list of `grpo_rewards.Scorer` subclasses, each with a unique class attribute
              `name`, a pydantic `Params` model and a `score(samples, results)` method; or
              `grpo_rewards.GroupScorer` subclasses, which implement `score_groups(groups, results)`
              and see one prompt's samples together.
    Guarantees expected of the plugin: the call is cheap and side-effect free (import heavy
    dependencies lazily, inside `score`); `score` returns one `Score` per sample and uses
    `Score(None, {"reason": ...})` for a sample it cannot score, never a silent 0.
    The registry guarantees: the hook is called once per registry; a plugin whose hook raises
    or returns something else than scorer classes is reported by name and skipped, the other
    plugins still load; two scorers with one name are an error naming both plugins.
    """


@hookspec
def grpo_rewards_sandboxes() -> list[type]:
    """Return the code-execution backends this plugin provides.

    Receives: nothing.
    Returns:  a list of `grpo_rewards.sandbox.SandboxBackend` subclasses, each with a unique
              `name` (used as `sandbox: <name>` or `sandbox: {backend: <name>, params: {...}}` in
              the `code_tests` params), a pydantic `Params` model (validated from the spec, shown
              by `list` and `schema`) and a `run(code, stdin, limits) -> ExecResult` method.
    Guarantees expected of the plugin: `run` never raises for anything the executed code does;
    a failure of the backend itself is `ExecResult(status="infra")`, which scorers turn into
    `None`. Same isolation and name rules as `grpo_rewards_scorers`.
    """
