"""`grpo-rewards`: list scorers, validate specs, print the schema, score, explain and probe completions.

Exit codes: 0 success, 1 `probe` found a hack that pays, 2 a mistake in the user's input (message on
stderr, no traceback), 130 interrupted. Results go to stdout (or the `--output` file); progress and warnings to stderr.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import importlib
import json
import statistics
import sys
import warnings
from collections.abc import Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from grpo_rewards import __version__
from grpo_rewards.columns import columns_of, empty_counts
from grpo_rewards.compose import CompositeReward, RewardBatch, build
from grpo_rewards.diagnostics import RewardDiagnostics
from grpo_rewards.errors import ConfigError, Problem, UserError
from grpo_rewards.fileio import STDIO, OutputFile, atomic_file, jsonl_lines
from grpo_rewards.group import groups_of
from grpo_rewards.probe import findings_table, probe, summary
from grpo_rewards.progress import counting_bar
from grpo_rewards.registry import BUILTIN_PLUGINS, Entry, Registry, load_registry
from grpo_rewards.scorer import Sample
from grpo_rewards.spec import spec_json_schema

MAX_REPORTED_PROBLEMS = 20
PARQUET_SUFFIXES = (".parquet", ".pq")


def _stdout() -> Console:
    return Console(highlight=False)


def _stderr() -> Console:
    return Console(stderr=True, highlight=False)


def _registry(report_failures: bool = True) -> Registry:
    """The registry, with plugin failures printed once as plain warnings instead of Python's format."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        registry = load_registry()
    if report_failures:
        for failure in registry.failures:
            print(f"warning: {failure}", file=sys.stderr)
    return registry


# ---------------------------------------------------------------------------------------------
# Input and output files


def _is_text(value: Any) -> bool:
    """A prompt or completion: a string, or chat messages (a list of objects with a `role`)."""
    return isinstance(value, str) or (
        isinstance(value, list) and all(isinstance(m, dict) and "role" in m for m in value))


def _record_problem(record: Any, where: str) -> str | None:
    if not isinstance(record, dict):
        return f"{where} must be a JSON object with a 'completion' field, got {type(record).__name__}"
    if "completion" not in record:
        return f"{where} has no 'completion' field"
    for key in ("completion", "prompt"):
        if key in record and not _is_text(record[key]):
            return (f"{where}'s '{key}' must be a string or a list of chat messages ({{\"role\": ..., "
                    f"\"content\": ...}}), got {json.dumps(record[key])[:60]}")
    return None


def _read_jsonl(path: Path) -> tuple[list[dict[str, Any]], list[Problem]]:
    records, problems = [], []
    with ExitStack() as stack:
        fh = sys.stdin.buffer if path == STDIO else stack.enter_context(path.open("rb"))
        for lineno, record, error in jsonl_lines(fh):
            problem = error or _record_problem(record, "the line")
            if problem:
                problems.append(Problem("", problem, str(path), lineno))
            else:
                records.append(record)
    return records, problems


def _read_parquet(path: Path) -> tuple[list[dict[str, Any]], list[Problem]]:
    try:
        import pyarrow.parquet as pq  # optional extra `data`, and heavy: only when a parquet file is read
    except ImportError:
        raise UserError("reading parquet needs pyarrow: pip install 'grpo-rewards[data]'") from None
    try:
        rows = pq.read_table(path).to_pylist()
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several unrelated types for a bad file
        raise UserError(f"{path}: cannot read parquet: {exc}") from None
    problems = [Problem("", p, str(path)) for i, row in enumerate(rows)
                if (p := _record_problem(row, f"row {i}"))]
    return rows, problems


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """Records `{prompt, completion, ...reference fields}` from JSONL or parquet; every bad line reported."""
    path = Path(path)
    if path != STDIO and not path.is_file():
        raise UserError(f"{path}: no such input file")
    reader = _read_parquet if path.suffix.lower() in PARQUET_SUFFIXES else _read_jsonl
    records, problems = reader(path)
    if problems:
        shown = problems[:MAX_REPORTED_PROBLEMS]
        if len(problems) > len(shown):
            shown.append(Problem("", f"... and {len(problems) - len(shown)} more", str(path)))
        raise ConfigError(shown, "input")
    if not records:
        raise UserError(f"{path}: no records (expected one JSON object per line)")
    return records


@contextmanager
def atomic_output(path: str | Path) -> Iterator[TextIO]:
    """`fileio.atomic_file` (standard output for `-`), a place that cannot be written to reported as
    the user's mistake."""
    if Path(path) == STDIO:
        yield sys.stdout
        sys.stdout.flush()
        return
    with ExitStack() as stack:
        try:
            fh = stack.enter_context(atomic_file(path))
        except OSError as exc:
            raise UserError(f"{path}: cannot write here: {exc.strerror or exc}") from None
        yield fh


# ---------------------------------------------------------------------------------------------
# Commands


def _param_table(params_model: Any) -> dict[str, Any]:
    return {name: {"required": field.is_required(), "description": field.description,
                   "default": None if field.is_required() else field.get_default(call_default_factory=True)}
            for name, field in params_model.model_fields.items()}


def _param_lines(params_model: Any) -> str:
    # `name = default`: the space lets a narrow column wrap after a name rather than inside it.
    lines = []
    for name, field in params_model.model_fields.items():
        if field.is_required():
            lines.append(f"{name} (required)")
        else:
            lines.append(f"{name} = {field.get_default(call_default_factory=True)!r}")
    return "\n".join(lines) or "-"


def _entry_table(title: str, entries: Iterable[Entry]) -> Table:
    """Registered scorers or sandbox backends: name (plugin under it), description, params with defaults.

    Cells wrap at spaces; the params column is as wide as the longest parameter name, so a name is
    never broken, and the description takes the width that is left."""
    entries = sorted(entries, key=lambda e: e.name)
    longest = max((len(name) for e in entries for name in e.cls.Params.model_fields), default=1)
    table = Table(title=title, show_lines=True)
    table.add_column("name (plugin)", no_wrap=True)
    table.add_column("description", overflow="fold", ratio=3)
    table.add_column("params (defaults)", overflow="fold", ratio=2, min_width=longest + 2)
    for entry in entries:
        # Built-ins are plugins named after their module; drop the package prefix to save width.
        plugin = entry.plugin.removeprefix("grpo_rewards.") if entry.plugin in BUILTIN_PLUGINS else entry.plugin
        name = Text(entry.name)
        name.append(f"\n{plugin}", style="dim")
        table.add_row(name, Text(entry.cls.description()), Text(_param_lines(entry.cls.Params)))
    return table


def cmd_list(args: argparse.Namespace) -> int:
    registry = _registry(report_failures=False)
    if args.json:
        print(json.dumps({
            "scorers": [{"name": e.name, "plugin": e.plugin, "description": e.cls.description(),
                         "params": _param_table(e.cls.Params)}
                        for e in sorted(registry.scorers.values(), key=lambda e: e.name)],
            "sandboxes": [{"name": e.name, "plugin": e.plugin, "description": e.cls.description(),
                           "params": _param_table(e.cls.Params)}
                          for e in sorted(registry.sandboxes.values(), key=lambda e: e.name)],
            "failures": [{"plugin": f.plugin, "error": f.error} for f in registry.failures],
        }, indent=2, default=repr))
        return 0
    table = _entry_table("Scorers", registry.scorers.values())
    console = _stdout()
    console.print(table)
    if registry.sandboxes:
        console.print(_entry_table("Sandboxes (code_tests `sandbox:`)", registry.sandboxes.values()))
    for failure in registry.failures:
        _stderr().print(Text(f"plugin failure: {failure}", style="red"))
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    reward = build(args.spec, _registry())
    table = Table(title=f"{args.spec}: valid", title_justify="left")
    for column in ("alias", "scorer", "weight", "params"):
        table.add_column(column, overflow="fold")
    for s in reward.spec.scorers:
        table.add_row(Text(s.alias), Text(s.scorer), f"{s.weight:g}", Text(json.dumps(s.params, default=repr)))
    _stdout().print(table)
    reward.close()
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    if args.output:
        args.output_file = OutputFile(args.output)
    text = json.dumps(spec_json_schema(_registry()), indent=2) + "\n"
    if args.output:
        with atomic_output(args.output) as fh:
            fh.write(text)
    else:
        sys.stdout.write(text)
    return 0


def batches_of_groups(samples: Sequence[Sample], group_size: int | None, batch_size: int) -> list[list[int]]:
    """Indices of each batch: whole groups (never split), up to `batch_size` samples unless one group is larger."""
    try:
        groups = groups_of(samples, group_size)
    except ValueError as exc:
        raise UserError(f"--group-size: {exc}") from None
    batches: list[list[int]] = [[]]
    for group in groups:
        if batches[-1] and len(batches[-1]) + len(group) > batch_size:
            batches.append([])
        batches[-1].extend(group)
    return batches


def _scored_batches(reward: CompositeReward, samples: list[Sample], group_size: int | None, batch_size: int,
                    show_progress: bool) -> Iterator[tuple[list[int], RewardBatch]]:
    console = _stderr()
    # Off when stderr is not a terminal: rich would print one stale bar at the end into the log.
    with counting_bar("scoring", len(samples), show_progress and console.is_terminal, console) as advance:
        for indices in batches_of_groups(samples, group_size, batch_size):
            # A batch holds whole groups in order, so the same grouping rule finds them again inside it.
            yield indices, reward.score([samples[i] for i in indices], group_size)
            advance(len(indices))


TOTAL = ("total",)  # the totals' key: a tuple, so no scorer alias (a string) can collide with it


class Summary:
    """Per-scorer statistics over every scored sample."""

    def __init__(self, aliases: Sequence[str]) -> None:
        self.values: dict[Any, list[float]] = {a: [] for a in [TOTAL, *aliases]}
        self.nones = dict.fromkeys(self.values, 0)
        self.errors = dict.fromkeys(self.values, 0)

    def add(self, batch: RewardBatch) -> None:
        columns = {TOTAL: batch.totals, **batch.values}
        for alias, values in columns.items():
            present = [v for v in values if v is not None]
            self.values[alias].extend(present)
            self.nones[alias] += len(values) - len(present)
        for alias, count in batch.errors.items():
            self.errors[alias] += count
            self.errors[TOTAL] += count

    def table(self, weights: dict[str, float]) -> Table:
        table = Table(title="Summary")
        for column in ("scorer", "weight", "mean", "std", "min", "max", "None", "errors"):
            table.add_column(column, justify="left" if column == "scorer" else "right")
        for alias, values in self.values.items():
            stats = ["-"] * 4
            if values:
                std = statistics.stdev(values) if len(values) > 1 else 0.0
                stats = [f"{x:.4g}" for x in (statistics.fmean(values), std, min(values), max(values))]
            weight = f"{weights[alias]:g}" if alias in weights else ""
            table.add_row(Text("total" if alias is TOTAL else alias), weight, *stats, str(self.nones[alias]), str(self.errors[alias]))
        return table


def _checked_samples(reward: CompositeReward, records: list[dict[str, Any]], where: str) -> list[Sample]:
    """The records as samples, refused when the data lacks a field the spec reads (before any scoring)."""
    samples = [Sample.from_record(r) for r in records]
    reward.check_columns(columns_of(s.reference for s in samples), where)
    return samples


def cmd_score(args: argparse.Namespace) -> int:
    args.output_file = OutputFile(args.output, [args.input])
    reward = build(args.spec, _registry())
    with reward:  # entered first: the scorers' workers start while the data loads
        records = read_records(args.input)
        samples = _checked_samples(reward, records, str(args.input))
        summary = Summary(reward.aliases)
        diagnostics = RewardDiagnostics(reward.aliases)
        lines: list[str | None] = [None] * len(records)  # in input order; a batch may hold scattered groups
        with atomic_output(args.output) as fh:
            for indices, batch in _scored_batches(reward, samples, args.group_size, args.batch_size,
                                                  not args.no_progress):
                for j, i in enumerate(indices):
                    out = {"index": i, **({"id": records[i]["id"]} if "id" in records[i] else {})}
                    out.update(batch.record(j, with_info=args.with_info))
                    lines[i] = json.dumps(out, default=repr) + "\n"
                summary.add(batch)
                diagnostics.add(batch, [samples[i].completion_text for i in indices])
            fh.writelines(line for line in lines if line is not None)
    # With `--output -` the results own standard output: the summary goes to stderr.
    console = _stderr() if Path(args.output) == STDIO else _stdout()
    console.print(summary.table(dict(zip(reward.aliases, reward.weights, strict=True))))
    console.print(diagnostics_table(diagnostics, reward))
    for warning in diagnostics.warnings():
        console.print(f"warning: {warning}", markup=False)
    members = [(m.alias, m.scorer) for m in reward.members]
    for alias, (fields, count) in empty_counts(members, [s.reference for s in samples]).items():
        console.print(f"note: {alias}: {count} of {len(samples)} rows have no value in {fields!r}; "
                      "they score None", markup=False)
    where = "standard output" if Path(args.output) == STDIO else args.output
    console.print(f"wrote {len(records)} results to {where}", markup=False)
    return 0


def _fraction(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def diagnostics_table(diagnostics: RewardDiagnostics, reward: CompositeReward) -> Table:
    """Per member: groups without spread, correlation with and share of the total, None and errors."""
    groups = diagnostics.groups
    flat = _fraction(diagnostics.zero_std_share)
    rate = reward.cache.hit_rate
    caption = (f"groups of 2+ samples: {groups}, without spread in the total: {flat}; duplicate rate: "
               f"{_fraction(diagnostics.duplicate_rate)}; score cache hit rate: {_fraction(rate)}")
    table = Table(title="Diagnostics", caption=caption)
    for column in ("scorer", "zero spread", "corr. total", "var. share", "None", "errors"):
        table.add_column(column, justify="left" if column == "scorer" else "right")
    for alias, row in diagnostics.member_rows().items():
        table.add_row(Text(alias), *(_fraction(row[k]) for k in ("zero_std", "corr_total", "variance_share",
                                                                  "none", "errors")))
    return table


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"... ({len(text) - limit} more chars)"


def _chosen_rows(records: list[dict[str, Any]], args: argparse.Namespace) -> list[int]:
    """Indices of the rows to explain: `--index N` (from 1), `--id`, or the first `--limit`."""
    if args.index is not None:
        if args.index > len(records):
            raise UserError(f"--index {args.index}: {args.input} has {len(records)} rows (counted from 1)")
        return [args.index - 1]
    if args.id is not None:
        rows = [i for i, r in enumerate(records) if "id" in r and str(r["id"]) == args.id]
        if not rows:
            ids = [str(r["id"]) for r in records if "id" in r]
            known = f"ids there: {', '.join(ids[:5])}{' ...' if len(ids) > 5 else ''}" if ids else "no row has an 'id'"
            raise UserError(f"--id {args.id}: no row of {args.input} has this id ({known}); --index N picks a row")
        return rows
    return list(range(min(args.limit, len(records))))


def cmd_explain(args: argparse.Namespace) -> int:
    reward = build(args.spec, _registry())
    records = read_records(args.input)
    samples = _checked_samples(reward, records, str(args.input))
    rows = _chosen_rows(records, args)
    # A row alone is scored with its prompt's group, so group scorers say what they say in `score`.
    group = {i for g in groups_of(samples, None) if set(g) & set(rows) for i in g}
    scored = sorted(group | set(rows))
    console = _stdout()
    with reward:
        batch = reward.score([samples[i] for i in scored])
    at = {row: j for j, row in enumerate(scored)}
    weights = dict(zip(reward.aliases, reward.weights, strict=True))
    for i in rows:
        j, record = at[i], records[i]
        if args.json:
            ident = {"id": record["id"]} if "id" in record else {}
            print(json.dumps({"index": i, "row": i + 1, **ident, **batch.record(j, with_info=True)}, default=repr))
            continue
        total = batch.totals[j]
        label = f"row {i + 1}" + (f" (id {record['id']})" if "id" in record else "")
        table = Table(title=f"{label}: total = {'None' if total is None else f'{total:.4g}'}",
                      title_justify="left", show_lines=True)
        for column in ("scorer", "weight", "value", "why (info)"):
            table.add_column(column, overflow="fold")
        for alias, scores in batch.scores.items():
            value = scores[j].value
            table.add_row(Text(alias), f"{weights[alias]:g}", "None" if value is None else f"{value:.4g}",
                          Text(json.dumps(scores[j].info, default=repr, ensure_ascii=False)))
        console.print(Text(f"prompt: {_clip(samples[i].prompt_text, args.chars)}", style="dim"))
        console.print(Text(f"completion: {_clip(samples[i].completion_text, args.chars)}"))
        console.print(table)
    return 0


def cmd_probe(args: argparse.Namespace) -> int:
    findings = probe(args.spec, _registry())
    paying = any(f.pays for f in findings)
    if paying or args.all:
        title = f"{args.spec}: " + ("every check" if args.all else "hacks that earn reward")
        _stdout().print(findings_table(findings, title, only_paying=not args.all))
    _stdout().print(summary(findings))
    return 1 if paying else 0


def cmd_serve(args: argparse.Namespace) -> int:
    # Loaded by name when used: grpo_rewards.serve needs the optional `serve` extra (FastAPI, uvicorn).
    try:
        server = importlib.import_module("grpo_rewards.serve")
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("grpo_rewards"):
            raise
        raise UserError(f"serve needs the serve extra ({exc.name} is missing): pip install 'grpo-rewards[serve]'") from None
    settings = server.ServerSettings(max_batch=args.max_batch, max_queue=args.max_queue,
                                     max_body_bytes=args.max_body_mb * 1024 * 1024, none_score=args.none_score)
    server.serve(args.spec, host=args.host, port=args.port, token_file=args.token_file, workers=args.workers,
                 settings=settings, registry=_registry())
    return 0


def cmd_sandbox_check(args: argparse.Namespace) -> int:
    # Imported here: the sandbox pulls in process machinery the other commands never need.
    try:
        check = importlib.import_module("grpo_rewards.sandbox.check")
    except ModuleNotFoundError as exc:
        if exc.name != "grpo_rewards.sandbox.check":
            raise
        raise UserError("sandbox-check is not available: grpo_rewards.sandbox.check is not installed") from None
    return int(check.main(list(args.sandbox_args)))


# ---------------------------------------------------------------------------------------------


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="grpo-rewards", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("list", help="registered scorers and sandbox backends, their plugins and params")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("validate", help="check a reward spec completely, without scoring anything")
    p.add_argument("spec", help="YAML, TOML or JSON reward spec")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("schema", help="JSON Schema of a reward spec, with every registered scorer's params")
    p.add_argument("--output", "-o", help="write to this file instead of stdout")
    p.set_defaults(func=cmd_schema)

    p = sub.add_parser("score", help="score a file of completions with a spec")
    p.add_argument("--spec", required=True, help="reward spec (YAML, TOML or JSON)")
    p.add_argument("--input", required=True,
                   help="JSONL (or .parquet) of {prompt, completion, ...reference}; - reads standard input")
    p.add_argument("--output", required=True,
                   help="JSONL of results, one line per input, written atomically; - writes standard output")
    p.add_argument("--batch-size", type=_positive_int, default=256,
                   help="samples per scorer call (default 256; a group is never split, so a batch may hold more)")
    p.add_argument("--group-size", type=_positive_int, default=None,
                   help="every N consecutive lines are one prompt's group; default: the lines sharing a prompt")
    p.add_argument("--with-info", action="store_true", help="include each scorer's info in the output")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_score)

    p = sub.add_parser("explain", help="each scorer's value and reasons, per sample")
    p.add_argument("--spec", required=True, help="reward spec (YAML, TOML or JSON)")
    p.add_argument("--input", required=True,
                   help="JSONL (or .parquet) of {prompt, completion, ...reference}; - reads standard input")
    p.add_argument("--limit", type=_positive_int, default=5, help="samples to explain (default 5: the first five)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--index", type=_positive_int, metavar="N", help="explain row N only (counted from 1)")
    which.add_argument("--id", help="explain the row(s) whose 'id' field is this")
    p.add_argument("--chars", type=_positive_int, default=300, help="characters of prompt/completion shown")
    p.add_argument("--json", action="store_true", help="one JSON line per sample instead of tables")
    p.set_defaults(func=cmd_explain)

    p = sub.add_parser("probe", help="run the known reward hacks that apply to a spec; exit 1 if any pays")
    p.add_argument("--spec", required=True, help="reward spec (YAML, TOML or JSON)")
    p.add_argument("--all", action="store_true", help="list every check, not only the hacks that pay")
    p.set_defaults(func=cmd_probe)

    p = sub.add_parser("serve", help="serve a spec over HTTP (native /score and OpenRLHF's remote reward API)")
    p.add_argument("--spec", required=True, help="reward spec (YAML, TOML or JSON)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; "
                   "anything beyond loopback needs --token-file)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    p.add_argument("--token-file", help="file holding the bearer token clients must send")
    p.add_argument("--workers", type=_positive_int, default=1, help="server processes (default 1)")
    p.add_argument("--max-batch", type=_positive_int, default=256, help="samples per scorer call (default 256)")
    p.add_argument("--max-queue", type=_positive_int, default=4096,
                   help="samples waiting before new requests get 503 (default 4096)")
    p.add_argument("--max-body-mb", type=_positive_int, default=8, help="request size limit in MiB (default 8)")
    p.add_argument("--none-score", type=float, default=float("nan"),
                   help="OpenRLHF endpoint: reward of a sample no scorer could score (default NaN, never a silent 0)")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("sandbox-check", help="which isolation layers the code sandbox has on this host",
                       add_help=False)
    p.add_argument("sandbox_args", nargs=argparse.REMAINDER, help="passed to the sandbox check")
    p.set_defaults(func=cmd_sandbox_check)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None:  # the command itself, not a caller in a longer process
        # What the imports made lives until exit: frozen, no collection walks it again, neither a full
        # one while scoring nor the interpreter's last ones (pydantic's and rich's objects are many).
        gc.freeze()
        atexit.register(gc.freeze)
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["sandbox-check"]:
        # Everything after it belongs to the check (argparse's REMAINDER mis-parses leading options).
        args = argparse.Namespace(func=cmd_sandbox_check, sandbox_args=argv[1:])
    else:
        args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        output = getattr(args, "output_file", None)
        print(f"interrupted; {output.outcome() if output else 'nothing written'}", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `grpo-rewards schema | head`: the reader left, nothing is wrong
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
