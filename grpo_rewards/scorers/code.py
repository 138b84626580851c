"""`code_tests`: run the completion's program against the reference's tests in a sandbox."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal, Union

from pydantic import (
    BaseModel, Field, PrivateAttr, ValidationError, ValidationInfo, create_model, field_validator, model_validator,
)

from grpo_rewards.errors import UnknownNameError
from grpo_rewards.extract import fenced_blocks
from grpo_rewards.hookspecs import hookimpl
from grpo_rewards.registry import Registry, registry_in
from grpo_rewards.sandbox.base import ExecResult, Job, Limits, SandboxBackend
from grpo_rewards.scorer import ParamsModel, ReferenceFields, Sample, Score, Scorer
from grpo_rewards.scorers.code_formats import parse_reference
from grpo_rewards.scorers.code_harness import (AssertSuite, StdioCase, assert_job, compare_output,
                                               function_body_joined, harness_reports, reference_helpers)

MAX_CODE_CHARS = 200_000  # longer programs are not run (a runaway completion, not a solution)


class SandboxChoice(ParamsModel):
    """A sandbox backend and its params: `{backend: NAME, params: {...}}`, or just `NAME`."""

    backend: str = Field("local", min_length=1, description="Registry name of the backend.")
    params: Any = Field(default_factory=dict, validate_default=True,
                        description="The backend's options (its `Params`); validated, they become a `Params` instance.")
    _backend_cls: type[SandboxBackend] | None = PrivateAttr(None)

    @model_validator(mode="before")
    @classmethod
    def _bare_name(cls, value: Any) -> Any:
        return {"backend": value} if isinstance(value, str) else value

    @field_validator("backend")
    @classmethod
    def _known_backend(cls, name: str, info: ValidationInfo) -> str:
        try:
            registry_in(info.context).sandbox(name)
        except UnknownNameError as exc:  # a KeyError: pydantic reports only ValueErrors in place
            raise ValueError(str(exc)) from None
        return name

    @field_validator("params")
    @classmethod
    def _backend_params(cls, params: Any, info: ValidationInfo) -> Any:
        if "backend" not in info.data:  # unknown backend, reported there
            return params
        backend = registry_in(info.context).sandbox(info.data["backend"])
        if isinstance(params, backend.Params):
            return params
        # A ValidationError raised here keeps its locations: errors read `sandbox.params.url`.
        return backend.Params.model_validate(params, context=info.context)

    @model_validator(mode="after")
    def _remember_backend(self, info: ValidationInfo) -> SandboxChoice:
        self._backend_cls = registry_in(info.context).sandbox(self.backend)
        return self

    @classmethod
    def for_registry(cls, registry: Registry) -> Any:
        """This choice's type for the JSON schema: a registered name, or `{backend, params}` with that
        backend's own `Params` (told apart by `backend`)."""
        names = sorted(registry.sandboxes)
        variants = [create_model(f"{name}_sandbox", __base__=BaseModel, __config__=None,
                                 __doc__=entry.cls.description() or None,
                                 backend=(Literal[name], Field(description=f"plugin {entry.plugin}")),
                                 params=(entry.cls.Params, Field(default_factory=entry.cls.Params)))
                    for name, entry in sorted(registry.sandboxes.items())]
        if not variants:
            return str
        chosen: Any = variants[0] if len(variants) == 1 else \
            Annotated[Union[tuple(variants)], Field(discriminator="backend")]  # noqa: UP007
        return Union[Literal[tuple(names)], chosen]  # noqa: UP007

    def open(self) -> SandboxBackend:
        """A new backend of the chosen class with these params (cheap: backends start on first use)."""
        if self._backend_cls is None:
            raise RuntimeError("SandboxChoice was not validated (build it with model_validate)")
        return self._backend_cls(self.params)


class CodeTestsParams(ParamsModel):
    program: Literal["auto", "extract", "prompt_plus_completion"] = Field(
        "auto", description="`extract`: the code is a fenced python block of the completion (the whole "
        "completion when it has none); `prompt_plus_completion`: HumanEval style, the completion continues the "
        "prompt; `auto`: as `extract`, but code that is only the body of the prompt's function (it does not "
        "define the entry point, the prompt's code does, and the two parse joined) continues the prompt.")
    block: Literal["last", "first"] = Field("last", description="Which fenced block to run when there are several.")
    require_block: bool = Field(False, description="A completion without a fenced code block scores 0 instead of "
                                "being run whole.")
    reward: Literal["fraction", "all"] = Field("fraction", description="`fraction`: share of tests passed; "
                                               "`all`: 1 only when every test passes.")
    per_test_timeout_s: float = Field(3.0, gt=0, le=300, description="Time limit of one test (and of loading the code), seconds.")
    timeout_s: float = Field(10.0, gt=0, le=3600, description="Time limit of all tests of one sample together, seconds.")
    memory_mb: int = Field(512, ge=32, le=65536, description="Address-space limit of each process of the program, MB.")
    max_processes: int = Field(8, ge=1, le=4096, description="Processes plus threads the program may run at once.")
    output_bytes: int = Field(1 << 20, ge=1024, le=1 << 28, description="Output cap per execution (stdout and stderr each), bytes; over it: `output_limit`.")
    whitespace: Literal["exact", "trailing", "tokens"] = Field(
        "trailing", description="stdin/stdout tests: `exact` lines; `trailing` ignores trailing spaces and blank "
        "lines at the end; `tokens` compares the whitespace-separated tokens of each line.")
    float_tolerance: float = Field(0.0, ge=0, le=1, description="stdin/stdout tests: numbers within this absolute "
                                   "or relative tolerance are equal (0: exact).")
    sandbox: SandboxChoice = Field(
        "local", validate_default=True, description="Code-execution backend: a name registered through "
        "`grpo_rewards_sandboxes` (`grpo-rewards list`), or `{backend: NAME, params: {...}}` with its options.")
    workers: int | None = Field(None, ge=1, le=256, description="Parallel executions: shorthand for "
                                "`sandbox.params.workers`, for a backend that has that param; null: its default.")

    @field_validator("workers")
    @classmethod
    def _workers_to_backend(cls, workers: int | None, info: ValidationInfo) -> int | None:
        """Hands `workers` to the backend's params (validated there, with its bounds)."""
        choice = info.data.get("sandbox")
        if workers is None or choice is None:  # unset, or the sandbox itself is invalid (reported there)
            return workers
        params = choice.params
        if "workers" not in type(params).model_fields:
            raise ValueError(f"sandbox backend {choice.backend!r} has no `workers` param; remove `workers`")
        if "workers" in params.model_fields_set and params.workers != workers:
            raise ValueError(f"`workers: {workers}` disagrees with `sandbox.params.workers: {params.workers}`; "
                             "give one of them")
        # The choice was validated just before this field (declaration order): completing it here
        # keeps one place that knows the backend.
        try:
            choice.params = type(params).model_validate({**params.model_dump(), "workers": workers},
                                                        context=info.context)
        except ValidationError as exc:  # reported here, at `workers`, not at a path the user did not write
            reasons = "; ".join(e["msg"] for e in exc.errors(include_url=False))
            raise ValueError(f"rejected by sandbox backend {choice.backend!r}: {reasons}") from None
        return workers


class CodeTests(Scorer):
    """Runs the completion's Python program against the reference's tests in a sandbox; reward = tests passed."""

    name = "code_tests"
    Params = CodeTestsParams
    reads = ReferenceFields(any_of=(  # the test layouts of code_formats
        "test", "tests", "test_list", "test_cases", "verification_info", "input_output", "public_tests",
        "private_tests", "generated_tests", "public_test_cases", "private_test_cases", "inputs"))
    value_range = (0.0, 1.0)
    # A test that times out fails, and whether it times out depends on the machine's load.
    deterministic = False

    def __init__(self, params: BaseModel | Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        self._backend: SandboxBackend | None = None
        self._lock = threading.Lock()

    # ---- sandbox --------------------------------------------------------------------------

    def backend(self) -> SandboxBackend:
        """The sandbox, started on first use (constructors stay cheap)."""
        with self._lock:
            if self._backend is None:
                self._backend = self.params.sandbox.open()
            return self._backend

    def open(self) -> None:
        self.backend().start()

    def close(self) -> None:
        with self._lock:
            if self._backend is not None:
                self._backend.close()
                self._backend = None

    def _limits(self, wall_s: float, harness: bool = False) -> Limits:
        p = self.params
        # Assertion tests run in a process of their own beside the program's: one more than the program's.
        return Limits(wall_s=wall_s, memory_mb=p.memory_mb, processes=p.max_processes + harness,
                      output_bytes=p.output_bytes)

    # ---- scoring --------------------------------------------------------------------------

    def program(self, sample: Sample) -> str | None:
        text = sample.completion_text
        if self.params.program == "prompt_plus_completion":
            return sample.prompt_text + text
        blocks = fenced_blocks(text, "python", aliases=("py", "python3")) or fenced_blocks(text)
        if blocks:
            code = blocks[-1] if self.params.block == "last" else blocks[0]
        else:
            code = None if self.params.require_block else text
        if code is not None and self.params.program == "auto":
            ref = sample.reference if isinstance(sample.reference, Mapping) else {}
            entry = ref.get("entry_point")
            if isinstance(entry, str) and entry.isidentifier():
                return function_body_joined(sample.prompt_text, code, entry)
        return code

    def score(self, samples: Sequence[Sample], results: Mapping[str, Sequence[Score]] | None = None) -> list[Score]:
        scores: list[Score | None] = [None] * len(samples)
        pending: list[tuple[int, str, Any, Any, int]] = []  # (sample, code, kind, payload, its jobs)

        def jobs():
            """Prepared a sample at a time, as the backend takes them: preparing the next samples
            overlaps the runs of the first ones."""
            for i, sample in enumerate(samples):
                try:
                    prepared = self._prepare(sample)
                except Exception as exc:  # noqa: BLE001 - one odd sample must not sink the batch
                    scores[i] = Score.unscorable(f"could not prepare the tests: {type(exc).__name__}: {exc}")
                    continue
                if isinstance(prepared, Score):
                    scores[i] = prepared
                    continue
                code, kind, payload, sample_jobs = prepared
                pending.append((i, code, kind, payload, len(sample_jobs)))
                yield from sample_jobs

        made = jobs()
        try:
            backend = self.backend()
            ran = backend.run_many(made if backend.lazy_jobs else list(made))
            problem = "" if len(ran) == sum(n for *_, n in pending) else \
                f"sandbox backend returned {len(ran)} results for {sum(n for *_, n in pending)} jobs"
        except Exception as exc:  # noqa: BLE001 - a broken backend is an infrastructure failure
            problem = f"sandbox backend failed: {type(exc).__name__}: {exc}"
        if problem:
            for _ in made:  # the samples not prepared when it failed
                pass
            ran = [ExecResult("infra", detail=problem)] * sum(n for *_, n in pending)
        start = 0
        for i, code, kind, payload, n in pending:
            got, start = ran[start : start + n], start + n
            tests = self._assert_verdicts(payload, got[0]) if kind == "assert" else self._stdio_verdicts(payload, got)
            scores[i] = self._final(code, kind, tests, got)
        return [s if s is not None else Score.unscorable("internal: not scored") for s in scores]

    def _prepare(self, sample: Sample):
        ref = sample.reference if isinstance(sample.reference, Mapping) else {}
        parsed = parse_reference(ref)
        if parsed.problem:
            return Score.unscorable(parsed.problem)
        code = self.program(sample)
        if code is None or not code.strip():
            return Score(0.0, {"reason": "no code found in the completion", "code": code or ""})
        if len(code) > MAX_CODE_CHARS:
            return Score(0.0, {"reason": f"program longer than {MAX_CODE_CHARS} characters", "code": code[:2000]})
        p = self.params
        suite = parsed.assert_suite
        if suite is not None:
            helpers = reference_helpers(sample.prompt_text, suite.entry_point) if suite.entry_point else ""
            job = assert_job(code, suite, p.per_test_timeout_s, self._limits(p.timeout_s, harness=True), helpers)
            return code, "assert", suite, [job]
        wall = min(p.per_test_timeout_s, p.timeout_s)
        return code, "stdio", parsed.stdio, [Job(code, case.stdin, self._limits(wall)) for case in parsed.stdio]

    def _assert_verdicts(self, suite: AssertSuite, result: ExecResult) -> list[dict] | None:
        if result.status == "infra":
            return None
        labels = [t.label for t in suite.tests]
        verdicts: list[dict | None] = [None] * len(labels)
        stop = None  # why the tests without a verdict did not get one
        reports = harness_reports(result.stdout)
        if any("infra" in rec for rec in reports):
            return None
        for rec in reports:
            if rec.get("done"):
                break  # nothing after the harness's last line counts
            index = rec.get("test")
            if type(index) is int and 0 <= index < len(labels) and verdicts[index] is None:
                verdicts[index] = {"status": rec.get("status", "error"), "detail": rec.get("detail", "")}
            elif "phase" in rec and stop is None:
                stop = {"status": "error" if rec.get("status") == "failed" else rec.get("status", "error"),
                        "detail": f"{rec['phase']}: {rec.get('detail', '')}"}
        if stop is None:
            stop = _unreported(result)
        return [{"test": label, **(v or stop)} for label, v in zip(labels, verdicts)]

    def _stdio_verdicts(self, cases: list[StdioCase], results: list[ExecResult]) -> list[dict] | None:
        if any(r.status == "infra" for r in results):
            return None
        out, spent = [], 0.0
        for n, (case, r) in enumerate(zip(cases, results)):
            spent += r.seconds
            label = f"stdin #{n + 1}"
            if spent > self.params.timeout_s:
                out.append({"test": label, "status": "timeout",
                            "detail": f"total time limit of {self.params.timeout_s:g} s reached"})
            elif r.status == "ok":
                same, diff = compare_output(case.expected, r.stdout, self.params.whitespace, self.params.float_tolerance)
                out.append({"test": label, "status": "passed" if same else "failed", "detail": diff})
            else:
                out.append({"test": label, **_unreported(r)})
        return out

    def _final(self, code: str, kind: str, tests: list[dict] | None, results: list[ExecResult]) -> Score:
        if tests is None:
            detail = next((r.detail for r in results if r.status == "infra"), "") or next(
                (rec["infra"] for r in results for rec in harness_reports(r.stdout) if "infra" in rec), "")
            return Score.unscorable(f"sandbox infrastructure failure: {detail}", code=code)
        passed = sum(t["status"] == "passed" for t in tests)
        total = sum(t["status"] != "skipped" for t in tests)  # a test the reference skips tests nothing
        if not total:
            return Score.unscorable("reference has no tests" + (" it does not skip" if tests else ""), code=code)
        value = passed / total if self.params.reward == "fraction" else float(passed == total)
        info = {"code": code, "format": kind, "passed": passed, "total": total, "tests": tests,
                "seconds": round(sum(r.seconds for r in results), 4)}
        if kind == "assert" and results[0].stderr.strip():
            info["stderr_tail"] = results[0].stderr[-500:]
        return Score(value, info)


def _unreported(r: ExecResult) -> dict:
    """Status of a test whose execution ended without a verdict for it."""
    if r.status in ("timeout", "memory", "output_limit"):
        return {"status": r.status, "detail": r.detail}
    if r.status == "ok":
        return {"status": "error", "detail": "the program exited before this test ran"}
    last = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
    return {"status": "error", "detail": last[:300] or r.detail or f"exit code {r.exit_code}"}


@hookimpl
def grpo_rewards_scorers():
    return [CodeTests]
