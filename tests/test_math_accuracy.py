"""math_accuracy: extraction, equivalence, unscorable golds, and calls from threads and workers."""

from __future__ import annotations

import threading

import pytest

from grpo_rewards import build, get_registry
from grpo_rewards.extract import answer_phrase, bare_answer, clean_answer, gsm8k_answer
from grpo_rewards.scorer import Sample
from grpo_rewards.scorers.math import MathAccuracy


@pytest.fixture(scope="module")
def scorer():
    with MathAccuracy(timeout_s=5) as s:
        yield s


def one(scorer, completion, gold, **reference):
    return scorer.score([Sample(completion=completion, reference={"answer": gold, **reference})])[0]


def test_registered_under_its_name():
    assert get_registry().scorer("math_accuracy") is MathAccuracy


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("completion", "gold", "expected"), [
    ("The sum is \\boxed{\\frac{1}{2}}.", "0.5", 1.0),
    ("So we get $0.5$.\nThe answer is $\\frac12$.", "\\frac{1}{2}", 1.0),
    ("<answer>1,234</answer>", "1234", 1.0),
    ("Adding up... #### 72", "72", 1.0),
    ("Final Answer: x^2 + 2x + 1", "$(x+1)^2$", 1.0),
    ("**73**", "73", 1.0),
    ("The answer is 18 dollars.", "18", 1.0),
    ("\\boxed{(1,2]}", "(1, 2]", 1.0),
    ("\\boxed{x = 3}", "3", 1.0),
    ("The answer is 7.", "8", 0.0),
    ("\\boxed{\\frac{1}{3}}", "0.33", 0.0),
    ("\\boxed{5}", "\\boxed{5}", 1.0),
    ("\\boxed{5}", "$5$", 1.0),
    ("\\boxed{5}", "Natalia sold 48/2 = 24 clips... #### 5", 1.0),
    ([{"role": "assistant", "content": "The answer is 4."}], "4", 1.0),
])
def test_equivalence(scorer, completion, gold, expected):
    result = one(scorer, completion, gold)
    assert result.value == expected, result.info
    assert "extracted" in result.info


def test_gold_accepts_numbers(scorer):
    assert one(scorer, "\\boxed{12}", 12).value == 1.0
    assert one(scorer, "\\boxed{2.5}", 2.5).value == 1.0


@pytest.mark.timeout(60)
def test_unparseable_or_missing_gold_is_none_with_reason(scorer):
    bad = one(scorer, "\\boxed{3}", "{{{")
    assert bad.value is None and bad.info["reason"] == "unparseable gold"
    missing = scorer.score([Sample(completion="\\boxed{3}", reference={})])[0]
    assert missing.value is None and "reference.answer" in missing.info["reason"]
    assert one(scorer, "\\boxed{3}", None).value is None
    assert one(scorer, "\\boxed{3}", "   ").value is None
    # Prose wrapped in \boxed{} would parse as a product of symbols and score every answer 0.
    prose = one(scorer, "\\boxed{3}", "see the solutions manual")
    assert prose.value is None and "prose" in prose.info["detail"]
    assert one(scorer, "\\boxed{\\text{odd}}", "\\text{odd}").value == 1.0


def test_no_extractable_answer_is_zero_with_reason(scorer):
    for completion in ["I think it is hard to say.", "", None, "\ud800 lone surrogate"]:
        result = one(scorer, completion, "3")
        assert result.value == 0.0 and result.info["reason"].startswith("no answer found"), completion
    empty_box = one(scorer, "\\boxed{}", "3")
    assert empty_box.value == 0.0 and empty_box.info["reason"] == "answer is not math"


def test_extraction_priority_is_configurable():
    text = "First I guessed \\boxed{4}. <answer>5</answer> The answer is 6. #### 7"
    sample = [Sample(completion=text, reference={"answer": "6"})]
    with MathAccuracy(extract=["boxed"]) as s:
        assert s.extract_answer(text)[:2] == ("4", "boxed")
    orders = {("answer_tag", "boxed"): "5", ("phrase",): "6", ("gsm8k", "phrase"): "7", ("last_number",): "7"}
    for order, expected in orders.items():
        assert MathAccuracy(extract=list(order)).extract_answer(text)[0] == expected
    with MathAccuracy(extract=["phrase"]) as s:
        assert s.score(sample)[0].value == 1.0


def test_last_number_is_off_by_default(scorer):
    result = one(scorer, "We compute 3 + 4 = 7 and stop", "7")
    assert result.value == 0.0 and "no answer found" in result.info["reason"]
    with MathAccuracy(extract=["boxed", "last_number"]) as s:
        assert s.score([Sample(completion="We compute 3 + 4 = 7 and stop", reference={"answer": "7"})])[0].value == 1.0


def test_after_think_only():
    text = "<think>maybe \\boxed{3}</think> The answer is 4."
    with MathAccuracy(after_think_only=True) as s:
        assert s.extract_answer(text)[0] == "4"
        assert s.extract_answer("\\boxed{3} without a closing tag")[2] == "no </think> in the completion"
    assert MathAccuracy().extract_answer(text)[0] == "3"


def test_extraction_helpers():
    assert answer_phrase("so the final answer is $\\frac{1}{2}$. Done") == "\\frac{1}{2}"
    assert answer_phrase("**Answer:** 42") == "42"
    assert answer_phrase("**Final Answer**\n\n$42$") == "42"
    assert answer_phrase("no phrase here") is None
    assert gsm8k_answer("work\n#### 1,234") == "1234"
    assert bare_answer(" **-3.5** ") == "-3.5"
    assert bare_answer("the value is 3") is None
    assert clean_answer("  ") is None


def test_answer_field_is_configurable():
    with MathAccuracy(answer_field="solution") as s:
        assert s.score([Sample(completion="\\boxed{9}", reference={"solution": "9"})])[0].value == 1.0


def test_params_are_validated():
    from pydantic import ValidationError

    for bad in [{"timeout_s": 0}, {"extract": []}, {"extract": ["nope"]}, {"workers": 0}, {"memory_mb": 1}, {"x": 1}]:
        with pytest.raises(ValidationError):
            MathAccuracy(**bad)


@pytest.mark.timeout(60)
def test_repeated_pairs_are_cached(scorer):
    samples = [Sample(completion="\\boxed{11}", reference={"answer": "11"})] * 8
    assert [s.value for s in scorer.score(samples)] == [1.0] * 8
    before = list(scorer._pool.pids)
    assert [s.value for s in scorer.score(samples)] == [1.0] * 8
    assert scorer._pool.pids == before


@pytest.mark.timeout(60)
def test_called_from_a_thread(scorer):
    # TRL runs reward functions in a thread: math-verify's SIGALRM would fail there.
    out = {}
    samples = [Sample(completion=f"\\boxed{{{i}}}", reference={"answer": str(i % 3)}) for i in range(6)]
    thread = threading.Thread(target=lambda: out.setdefault("r", scorer.score(samples)))
    thread.start()
    thread.join(60)
    assert [s.value for s in out["r"]] == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]


def test_concurrent_threads_share_one_scorer(scorer):
    out: dict[int, list] = {}

    def run(k):
        samples = [Sample(completion=f"The answer is {k + j}.", reference={"answer": str(k + 1)}) for j in range(3)]
        out[k] = [s.value for s in scorer.score(samples)]

    threads = [threading.Thread(target=run, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(out[k] == [0.0, 1.0, 0.0] for k in range(4)), out


class _ScoredDataset:
    """A dataset whose items are scored inside the DataLoader worker process."""

    def __init__(self, scorer):
        self.scorer = scorer

    def __len__(self):
        return 4

    def __getitem__(self, i):
        import os

        result = self.scorer.score([Sample(completion=f"\\boxed{{{i}}}", reference={"answer": "2"})])[0]
        return {"value": result.value, "pid": os.getpid()}


@pytest.mark.timeout(180)
def test_called_from_a_dataloader_worker(scorer):
    import os

    from torch.utils.data import DataLoader

    scorer.score([Sample(completion="\\boxed{1}", reference={"answer": "1"})])  # parent pool is running
    loader = DataLoader(_ScoredDataset(scorer), batch_size=None, num_workers=1)
    rows = list(loader)
    assert [r["value"] for r in rows] == [0.0, 0.0, 1.0, 0.0]
    assert all(r["pid"] != os.getpid() for r in rows)
    # The parent's workers were left alone by the child.
    assert scorer.score([Sample(completion="\\boxed{1}", reference={"answer": "1"})])[0].value == 1.0


@pytest.mark.timeout(60)
def test_a_forked_child_that_drops_the_scorer_leaves_the_parents_workers_alone(scorer):
    import gc
    import multiprocessing

    from grpo_rewards.workers import _kill_all

    scorer.score([Sample(completion="\\boxed{1}", reference={"answer": "1"})])
    pids = list(scorer._pool.pids)

    def child():
        _kill_all(list(scorer._pool._workers))  # what a finaliser or exit hook in the child would run
        gc.collect()

    proc = multiprocessing.get_context("fork").Process(target=child)
    proc.start()
    proc.join(30)
    assert proc.exitcode == 0
    assert not any(_gone(pid) for pid in pids)
    assert scorer._pool.pids == pids


def test_in_a_composed_spec():
    spec = {"scorers": [{"scorer": "math_accuracy", "params": {"timeout_s": 3}}]}
    with build(spec) as reward:
        batch = reward.score([{"completion": "\\boxed{2}", "answer": "2"}, {"completion": "\\boxed{3}", "answer": "2"}])
    assert batch.totals == [1.0, 0.0]


def _gone(pid):
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_close_stops_workers_and_is_idempotent():
    s = MathAccuracy(memory_mb=700)  # a pool of its own (pools are shared per workers/memory_mb)
    assert s._pool is None  # constructing starts nothing
    s.score([Sample(completion="\\boxed{1}", reference={"answer": "1"})])
    pids = list(s._pool.pids)
    s.close()
    s.close()
    assert all(_gone(pid) for pid in pids)


@pytest.mark.timeout(60)
def test_scorers_with_the_same_pool_settings_share_workers():
    a, b = MathAccuracy(memory_mb=600, strict=False), MathAccuracy(memory_mb=600, float_rounding=2)
    sample = [Sample(completion="\\boxed{0.333}", reference={"answer": "\\frac{1}{3}"})]
    assert a.score(sample)[0].value == 0.0 and b.score(sample)[0].value == 1.0  # each keeps its options
    assert a._pool is b._pool
    pids = list(a._pool.pids)
    a.close()
    assert not any(_gone(pid) for pid in pids)  # b still uses them
    assert b.score([Sample(completion="\\boxed{2}", reference={"answer": "2"})])[0].value == 1.0
    b.close()
    assert all(_gone(pid) for pid in pids)
