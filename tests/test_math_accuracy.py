"""math_accuracy: extraction, equivalence, unscorable golds, and calls from threads and workers."""

from __future__ import annotations

import threading
import time
from fractions import Fraction

import pytest

from grpo_rewards import build, get_registry
from grpo_rewards.extract import bare_region, box_region, final_region, gsm8k_region, phrase_region
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


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("completion", "golds", "expected"), [
    # one value written exactly and rounded: the gold may be either side
    ("\\boxed{\\frac{70}{9} \\approx 7.78}", ["\\frac{70}{9}", "7.78"], 1.0),
    ("The answer is $2\\sqrt{2} \\approx 2.83$.", ["2\\sqrt{2}", "2.83"], 1.0),
    ("\\boxed{\\pi \\approx 3.1415}", ["\\pi", "3.1415"], 1.0),  # truncated: still under one unit of 0.0001
    ("The answer is $\\frac{70}{9}$, approximately 7.78.", ["\\frac{70}{9}", "7.78"], 1.0),
    # a "rounding" that is another value names a second answer: neither side pays
    ("\\boxed{5 \\approx 6}", ["5", "6"], 0.0),
    ("\\boxed{\\frac{1}{3} \\approx 1.3}", ["\\frac{1}{3}", "1.3"], 0.0),
    ("The answer is 5 (about 6).", ["5", "6"], 0.0),
])
def test_a_value_and_its_rounding_are_one_answer(scorer, completion, golds, expected):
    for gold in golds:
        result = one(scorer, completion, gold)
        assert result.value == expected, (gold, result.info)
        if expected == 0.0:
            assert result.info["reason"] == "several different answers"


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
    assert empty_box.value == 0.0 and empty_box.info["reason"].startswith("no answer found")
    not_math = one(scorer, "\\boxed{\\}}", "3")
    assert not_math.value == 0.0 and not_math.info["reason"] == "answer is not math"


def test_extraction_priority_is_configurable():
    text = "First I guessed \\boxed{4}. The answer is 6. #### 7"
    sample = [Sample(completion=text, reference={"answer": "6"})]
    with MathAccuracy(extract=["boxed"]) as s:
        assert s.extract_answer(text)[:2] == ("4", "boxed")
    orders = {("phrase",): "6", ("gsm8k", "phrase"): "7", ("last_number",): "7"}
    for order, expected in orders.items():
        assert MathAccuracy(extract=list(order)).extract_answer(text)[0] == expected
    with MathAccuracy(extract=["phrase"]) as s:
        assert s.score(sample)[0].value == 1.0


def test_the_answer_block_is_the_final_answer_region():
    """A box, phrase or `####` outside the answer block (or inside the reasoning) never outranks it."""
    text = "First I guessed \\boxed{4}. <answer>5</answer> The answer is 6. #### 7"
    assert MathAccuracy().extract_answer(text)[:2] == ("5", "answer_tag")
    assert MathAccuracy(extract=["boxed", "phrase"]).extract_answer(text)[0] == "4"  # no answer_tag: no block


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
    # The reasoning ends at </think> whatever the setting: its box is never the answer.
    assert MathAccuracy().extract_answer(text)[0] == "4"
    assert "never ended" in MathAccuracy().extract_answer("<think>so \\boxed{3}")[2]
    assert MathAccuracy().extract_answer("no think tags: \\boxed{3}")[0] == "3"


def test_extraction_helpers():
    assert phrase_region("so the final answer is $\\frac{1}{2}$. Done") == "$\\frac{1}{2}$"
    assert phrase_region("**Answer:** 42") == "42"
    assert phrase_region("**Final Answer**\n\n$42$") == "$42$"
    assert phrase_region("no phrase here") is None
    assert gsm8k_region("work\n#### 1,234") == " 1,234"
    assert gsm8k_region("#### 72 some text #### 13\nmore") == " 13"
    assert box_region("So 6 or $\\boxed{5}$ cm. Done") == ("5", "So 6 or $", "$ cm")
    assert bare_region(" **-3.5** ") == "-3.5"
    assert bare_region("line one\nline two") is None
    assert final_region("<think>\\boxed{1}</think><answer>2</answer>", "answer") == ("2", None)
    assert final_region("<think>\\boxed{1}", "answer")[0] is None


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
@pytest.mark.parametrize(("cache_size", "verified"), [(100, 2), (0, 6)])
def test_cache_size_zero_verifies_every_repeat(cache_size, verified):
    samples = [Sample(completion=f"\\boxed{{{v}}}", reference={"answer": "11"}) for v in (11, 12, 11, 11, 12, 11)]
    sent = []
    with MathAccuracy(timeout_s=5, cache_size=cache_size) as s:
        resolve = s._resolve
        s._resolve = lambda keys: sent.extend(keys) or resolve(keys)
        assert [x.value for x in s.score(samples)] == [1.0, 0.0, 1.0, 1.0, 0.0, 1.0]
        s.score(samples)
    assert len(sent) == verified * (1 if cache_size else 2)


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

    from grpo_rewards.procpool.pool import _shutdown

    scorer.score([Sample(completion="\\boxed{1}", reference={"answer": "1"})])
    pids = list(scorer._pool.pids) + [scorer._pool.zygote_pid]

    def child():
        # What a finaliser or exit hook in the child would run.
        _shutdown(list(scorer._pool._workers), list(scorer._pool._zygotes))
        gc.collect()

    proc = multiprocessing.get_context("fork").Process(target=child)
    proc.start()
    proc.join(30)
    assert proc.exitcode == 0
    assert not any(_gone(pid) for pid in pids)
    assert scorer._pool.pids + [scorer._pool.zygote_pid] == pids
    assert scorer.score([Sample(completion="\\boxed{2}", reference={"answer": "2"})])[0].value == 1.0


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
    pids = list(s._pool.pids) + [s._pool.zygote_pid]
    s.close()
    s.close()
    assert all(_gone(pid) for pid in pids)  # reaped too, not left as zombies


@pytest.mark.timeout(60)
def test_entering_starts_the_workers_before_the_first_batch():
    with MathAccuracy(memory_mb=650) as s:  # a pool of its own
        deadline = time.monotonic() + 30
        while s._pool.booting and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(s._pool.pids) == s._pool.size  # up, with nothing scored
        pids = list(s._pool.pids) + [s._pool.zygote_pid]
        assert s.score([Sample(completion="\\boxed{1}", reference={"answer": "1"})])[0].value == 1.0
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


def test_numeric_disproof_of_constants_never_contradicts_math_verify():
    """`_clearly_different` skips math-verify's verify for constants whose values differ; on every
    pair of these forms that it skips, math-verify's own verdict must be False, and equal values
    written differently must never be skipped."""
    import random

    import math_verify

    from grpo_rewards.scorers import math_check

    rng = random.Random(5)
    opts = math_check.CheckOptions(("latex", "expr"), 6, 15, True, False, "answer", "auto")
    makers = [
        lambda: f"{rng.randint(1, 12)} \\sqrt{{{rng.choice([2, 3, 5, 7])}}}",
        lambda: f"{rng.randint(1, 9)} \\pi",
        lambda: f"\\frac{{{rng.randint(1, 30)}}}{{{rng.randint(2, 9)}}}",
        lambda: f"{rng.randint(-5, 40)}",
        lambda: f"{rng.randint(1, 5)} + {rng.randint(1, 5)} \\sqrt{{{rng.choice([2, 3])}}}",
        lambda: f"\\frac{{\\sqrt{{{rng.choice([2, 3])}}}}}{{{rng.randint(2, 4)}}}",
        lambda: f"2^{{{rng.randint(1, 12)}}}",
        lambda: f"{rng.randint(1, 7)}!",
        lambda: f"\\sqrt{{{rng.randint(2, 50)}}}",
    ]
    # Equal values in different spellings: the disproof must never fire on these.
    equal = [("\\sqrt{8}", "2 \\sqrt{2}"), ("\\frac{\\sqrt{3}}{3}", "\\frac{1}{\\sqrt{3}}"), ("2^{10}", "1024"),
             ("4!", "24"), ("\\sqrt{12} + \\sqrt{3}", "3 \\sqrt{3}"), ("\\frac{6}{4}", "\\frac{3}{2}")]
    pairs = equal + [(rng.choice(makers)(), rng.choice(makers)()) for _ in range(120)]
    skipped = 0
    for gold_text, answer_text in pairs:
        gold = math_check._parse_answer(gold_text, opts, is_gold=True)
        answer = math_check._parse_answer(answer_text, opts, is_gold=False)
        for g in gold:
            for a in answer:
                if math_check._clearly_different(g, a):
                    skipped += 1
                    assert (gold_text, answer_text) not in equal
                    assert not math_verify.verify(g, a, timeout_seconds=None), (gold_text, answer_text)
    assert skipped > 60  # the check is not vacuous


def test_numeric_fast_path_agrees_with_math_verify():
    """Plain numerals decided without math-verify (`_numeric_verdict`) get math-verify's own
    verdict, on random forms and on near misses around the float tolerance; and every numeral
    form parses (the worker skips parsing such a gold until an answer needs it)."""
    import random

    import math_verify

    from grpo_rewards.scorers import math_check

    rng = random.Random(11)
    opts = math_check.CheckOptions(("latex", "expr"), 6, 15, True, False, "answer", "auto")

    def spell(value):
        """Some numeral spellings of a Fraction value (the ones that exist for it)."""
        sign = "-" if value < 0 else ""
        v = abs(value)
        out = []
        if v.denominator == 1:
            out += [f"{sign}{v.numerator}", f"{sign}{v.numerator:,}"]
        out += [f"{sign}{v.numerator}/{v.denominator}", f"{sign}\\frac{{{v.numerator}}}{{{v.denominator}}}",
                f"{'- ' if sign else ''}\\dfrac{{{v.numerator}}}{{{v.denominator}}}"]
        out.append(f"{sign}{float(v):.{rng.choice([1, 2, 6, 7, 9])}f}")
        return out

    values = [Fraction(rng.randint(-3000, 3000), rng.choice([1, 1, 2, 3, 4, 8, 10, 7])) for _ in range(40)]
    values += [Fraction(1, 3), Fraction(1, 10 ** 7), Fraction(10 ** 15 + 1), Fraction(123456789, 1000)]
    pairs = []
    for v in values:
        near = [v, v + Fraction(1, 10 ** 6), v + Fraction(1, 10 ** 5), v + Fraction(3, 10 ** 7), -v, v + 1, 2 * v]
        for w in near:
            pairs.append((rng.choice(spell(v)), rng.choice(spell(w))))
    decided = 0
    parsed = {}
    for gold, answer in pairs:
        verdict = math_check._numeric_verdict(gold, answer, opts)
        for text in (gold, answer):
            if text not in parsed:
                parsed[text] = math_check._parse("\\boxed{" + text + "}", opts.match_types)
                assert any(math_check._is_math(p) for p in parsed[text]), text
        if verdict is None:
            continue
        decided += 1
        expected = math_verify.verify(parsed[gold], parsed[answer], float_rounding=6, numeric_precision=15,
                                      timeout_seconds=None)
        assert verdict == expected, (gold, answer)
    assert decided > len(pairs) // 2


@pytest.mark.timeout(120)
def test_warm_up_leaves_no_import_for_a_task_to_pay():
    """After `warm_up`, math-verify's own 270 cases (and a comparison that reaches `simplify`)
    import nothing more: a module sympy loads on first use would otherwise be paid inside some
    sample's time limit, once per worker (sympy.physics.units alone is ~0.2 s)."""
    import subprocess
    import sys
    from pathlib import Path

    probe = """
import json, sys
from grpo_rewards.scorers import math_check as mc
mc.warm_up()
before = set(sys.modules)
opts = mc.CheckOptions(("latex", "expr"), 6, 15, True, False, "answer", "auto")
assert mc.run_check(("verify", "x^2 - 1", "(x - 1)(x + 1)", tuple(opts))) == ("ok", True)
for line in open(sys.argv[1], encoding="utf-8"):
    c = json.loads(line)
    o = mc.CheckOptions(tuple(c["match_types"] or ("latex", "expr")), c["precision"], 15, c["strict"],
                        c["allow_set_relation_comp"], "whole", "raw")
    mc.run_check(("verify", c["gold"], c["prediction"], tuple(o)))
print(json.dumps(sorted(set(sys.modules) - before)))
"""
    cases = Path(__file__).parent / "data" / "math_verify_cases.jsonl"
    out = subprocess.run([sys.executable, "-c", probe, str(cases)], capture_output=True, text=True, timeout=110)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"
