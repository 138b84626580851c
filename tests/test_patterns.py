"""`LazyPattern`: compiled at its first use, then the pattern itself; and a command's start compiles
none of the built-in scorers' patterns."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from grpo_rewards.patterns import LazyPattern


def test_a_lazy_pattern_compiles_once_at_its_first_use_and_answers_as_the_pattern():
    made = []

    def compile(*args):
        made.append(args)
        return re.compile(*args)

    lazy = LazyPattern(compile, r"(\d+)-(\d+)", re.ASCII)
    assert made == []
    eager = re.compile(r"(\d+)-(\d+)", re.ASCII)
    text = "pages 12-34 and 5-6"
    assert lazy.search(text).groups() == eager.search(text).groups() == ("12", "34")
    assert lazy.sub(r"\2-\1", text) == eager.sub(r"\2-\1", text)
    assert [m.span() for m in lazy.finditer(text)] == [m.span() for m in eager.finditer(text)]
    assert (lazy.pattern, lazy.flags) == (eager.pattern, eager.flags)
    assert made == [(r"(\d+)-(\d+)", re.ASCII)]


def test_a_lazy_patterns_private_names_are_never_the_patterns():
    lazy = LazyPattern(re.compile, "x")
    for name in ("_missing", "__deepcopy__", "__getstate__x"):
        try:
            getattr(lazy, name)
        except AttributeError:
            continue
        raise AssertionError(f"{name} was looked up on the pattern")
    assert "_compiled" not in vars(lazy)


def test_a_command_start_compiles_no_pattern_of_the_projects_and_imports_no_yaml_for_a_json_spec(tmp_path):
    """Importing the CLI, loading the registry (every built-in scorer's module) and building a spec."""
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"scorers": [{"scorer": "code_tests"}, {"scorer": "think_format"}]}))
    code = (
        "import gc, json, re, sys\n"
        "import regex\n"
        "callers = []\n"
        "def watched(compile):\n"
        "    def compile_and_note(*args, **kwargs):\n"
        "        callers.append(sys._getframe(1).f_globals.get('__name__', ''))\n"
        "        return compile(*args, **kwargs)\n"
        "    return compile_and_note\n"
        "re.compile, regex.compile = watched(re.compile), watched(regex.compile)\n"
        "import grpo_rewards.cli as cli\n"
        "from grpo_rewards.compose import build\n"
        "from grpo_rewards.patterns import LazyPattern\n"
        f"build({str(spec)!r}, cli._registry())\n"
        "lazy = sum(isinstance(o, LazyPattern) for o in gc.get_objects())\n"
        "ours = [c for c in callers if c.startswith('grpo_rewards')]\n"
        "print(json.dumps([lazy, len(callers), ours, 'yaml' in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    lazy, compiled, ours, yaml_imported = json.loads(out.stdout)
    assert lazy > 50 and compiled > 0  # the patterns exist and the watch sees compiles (not vacuous)
    assert ours == []
    assert not yaml_imported
