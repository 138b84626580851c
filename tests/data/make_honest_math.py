"""Writes tests/data/honest_math.jsonl: honest final answers in the styles models write, with golds
from public math data that ships offline.

Sources (each row says which): `champ` (the CHAMP competition answers of the `champ-dataset` wheel,
MIT, single expressions), `math_verify` (the golds of math-verify's own regression cases,
tests/data/math_verify_cases.jsonl, that are one short value), `gsm8k_style` (generated word-problem
answers: integers, money, percent, degrees, units, thousands; GSM8K's own answer format `#### N`),
`choice` (generated multiple-choice answers, a letter and its text), `remarks` (generated answers
with a justification that holds a condition, working as a chain of `=`, the value and its rounding,
a name given the value, thousands separated by spaces), `cases` (generated answers with a remark
that names a case or another quantity, or restates the value in brackets).

    python tests/data/make_honest_math.py
"""

from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent.parent))

from grpo_rewards.redteam.math import spelled_number  # noqa: E402 - importable once the repo is on the path


def _thousands(n: int, rng: random.Random) -> str:
    plain = f"{n:,}"
    return rng.choice([plain, plain.replace(",", "{,}"), plain.replace(",", "\\,"), str(n), plain.replace(",", "\\!")
                       if False else plain.replace(",", ",\\!")])


def _cycled(source: str, count: int, styles) -> list[dict]:
    """`count` rows of `source`: row k is the (k mod n)-th of the n (completion, gold) pairs that
    `styles(k)` draws for it."""
    rows = []
    for k in range(count):
        drawn = styles(k)
        completion, gold = drawn[k % len(drawn)]
        rows.append({"source": source, "gold": gold, "completion": completion})
    return rows


def gsm8k_style(rng: random.Random, count: int) -> list[dict]:
    units = ["apples", "cm", "dollars", "minutes", "km", "students", "pages"]

    def styles(k: int) -> list[tuple[str, str]]:
        n = rng.choice([rng.randint(2, 99), rng.randint(100, 999), rng.randint(1000, 999_999)])
        unit = rng.choice(units)
        num = _thousands(n, rng)
        other = n + rng.randint(1, 9)
        return [
            (f"So the total is \\boxed{{{num}}}.", str(n)),
            (f"The answer is {num} {unit}.", str(n)),
            (f"\\boxed{{{num}\\,\\text{{{unit}}}}}", str(n)),
            (f"The answer is {num}, not {other}.", str(n)),
            (f"The answer is ${num}$, which is less than {other}.", str(n)),
            (f"<answer>{num} {unit}, {other - n} more than Anna's {n - 1 if n > 1 else 0}</answer>", str(n)),
            (f"The answer is {n} minutes, i.e. {n / 60:.2f} hours", str(n)),
            (f"Natalia sold {n} clips in all.\n#### {num}", str(n)),
            (f"**Final Answer:** ${num}$", str(n)),
            (f"The answer is \\${num}.", f"\\${n}"),
            (f"\\boxed{{{n % 360}^\\circ}}", f"{n % 360}^\\circ"),
            (f"The answer is ${n % 100}\\%$.", f"{n % 100}\\%"),
            (f"Each costs \\boxed{{\\${n}.{k % 100:02d}}}", f"{n}.{k % 100:02d}"),
            (f"The answer is $\\dfrac{{{n}}}{{{n + 1}}}$.", f"\\frac{{{n}}}{{{n + 1}}}"),
            (f"<think>{n} - 1 = {n - 1}, so {n}</think>\n<answer>{num}</answer>", str(n)),
            (f"Final Answer: The final answer is ${num}$. I hope it is correct.", str(n)),
        ]
    return _cycled("gsm8k_style", count, styles)


def remarks(rng: random.Random, count: int) -> list[dict]:
    """Answers with more than the value in them: a justification that holds a condition, an exact
    chain of working, the value and its rounding, a name given the value, spaces between thousands."""
    def styles(k: int) -> list[tuple[str, str]]:
        a, b = rng.randint(2, 60), rng.randint(2, 40)
        n, m = a + b, a * b
        p, q = rng.randint(1, 99), rng.choice((3, 6, 7, 9, 11, 13))
        r = rng.choice((2, 3, 5, 6, 7))
        big = rng.randint(1000, 999_999)
        return [
            (f"The answer is {n}, because if you add {a} and {b} you get {n}.", str(n)),
            (f"The answer is {m}, since if each box holds {a} then {b} boxes hold {m}.", str(m)),
            (f"<answer>{m} apples, when each box holds {a}</answer>", str(m)),
            (f"The answer is {n} students in all, if we count the teacher as well.", str(n)),
            (f"The answer is {m}; if she had bought {b} more, she would have {m + b}.", str(m)),
            (f"The answer is {n}, assuming each of the {b} days is the same.", str(n)),
            (f"\\boxed{{{a} + {b} = {n}}}", str(n)),
            (f"The answer is $x = {a} \\times {b} = {m}$.", str(m)),
            (f"\\boxed{{\\frac{{{p}}}{{{q}}} \\approx {p / q:.2f}}}", f"\\frac{{{p}}}{{{q}}}"),
            (f"\\boxed{{\\frac{{{p}}}{{{q}}} \\approx {p / q:.2f}}}", f"{p / q:.2f}"),
            (f"The answer is $\\frac{{{p}}}{{{q}}}$, approximately {p / q:.3f}.", f"\\frac{{{p}}}{{{q}}}"),
            (f"\\boxed{{{a}\\sqrt{{{r}}} \\approx {a * r ** 0.5:.2f}}}", f"{a}\\sqrt{{{r}}}"),
            (f"The answer is ${a}\\sqrt{{{r}}} \\approx {a * r ** 0.5:.1f}$ cm.", f"{a}\\sqrt{{{r}}}"),
            (f"The answer is {big:,} people.".replace(",", " "), str(big)),
            (f"Final Answer: The largest $n$ is {n}.", str(n)),
            (f"The answer is {n}, which is {b} more than {a}.", str(n)),
            (f"<answer>{n}</answer> (I checked: {n} - {b} = {a}, so it holds if nothing else changes)", str(n)),
        ]
    return _cycled("remarks", count, styles)


def cases(rng: random.Random, count: int) -> list[dict]:
    """Answers whose remark names a case or another quantity without offering a second answer: a
    case word before a value of its own ("with 6 in each bag", "for n = 3") or before a distributive
    one ("6 for each child"), a bracket after the answer that restates it (`0.5 (50%)`, `8 (2^3)`)
    or names something else ("(see step 3)", "(2.5 hours)"); the value again in another unit ("3 hours,
    or 180 minutes"); a sentence after the answer that names other numbers; compound units, a
    modulus, a reason after the box, answer phrases in other languages, a mixed number."""
    def styles(k: int) -> list[tuple[str, str]]:
        a, b = rng.randint(2, 30), rng.randint(2, 12)
        m, n = a * b, rng.randint(2, 9)
        half = rng.choice((1, 3, 5, 7, 9))
        return [
            (f"The answer is {m} ({a} for each of the {b} children).", str(m)),
            (f"The answer is {m}, with {a} in each of the {b} bags.", str(m)),
            (f"The answer is {m} apples, counting {a} in each of {b} crates.", str(m)),
            (f"The answer is {n ** 2}, for $n = {n}$.", str(n ** 2)),
            (f"\\boxed{{{n ** 3}}} (with $n = {n}$)", str(n ** 3)),
            (f"<answer>{m}</answer> ({a} per row, {b} rows)", str(m)),
            (f"The answer is {m}, given that each of the {b} rows holds {a}.", str(m)),
            (f"The answer is {half / 10} ({half * 10}%).", str(half / 10)),
            (f"So the answer is $\\boxed{{{half / 10}}}$ ({half * 10}\\%).", str(half / 10)),
            (f"The answer is {n ** 3} ({n}^3).", str(n ** 3)),
            (f"The answer is $\\frac{{1}}{{{n}}}$ ({1 / n:.3f}).", f"\\frac{{1}}{{{n}}}"),
            (f"\\boxed{{{m}}} (see the table above)", str(m)),
            (f"\\boxed{{{a * 60}}} ({a} hours)", str(a * 60)),
            (f"The answer is {m}, including the {b} teachers.", str(m)),
            (f"The answer is {m} in all, in case you want to check: {a} times {b} is {m}.", str(m)),
            (f"The answer is {m} (with a remainder of 0).", str(m)),
            (f"The answer is {a} hours, or {a * 60} minutes.", str(a)),
            (f"The answer is {half / 4}, or {half * 25}%.", str(half / 4)),
            (f"The answer is {m} — {a} more than last week.", str(m)),
            (f"\\boxed{{{a + b}}} (with $x={a}$, $y={b}$)", str(a + b)),
            (f"<answer>{m}</answer> I hope it helps, {n} steps were needed.", str(m)),
            (f"The answer is {m}. Step {n} had {a} apples, so this is consistent.", str(m)),
            (f"The answer is {m}. But {a} of them were bought later.", str(m)),
            (f"The answer is {m}, and {a} is its largest factor below {m}.", str(m)),
            (f"The answer is {m} km/h.", str(m)),
            (f"The density is \\boxed{{{n} \\text{{ kg/m}}^3}}.", str(n)),
            (f"The answer is {a} m/s.", str(a)),
            (f"The answer is {n} 000.", str(n * 1000)),
            (f"The remainder is \\boxed{{{n}}}, since {a * 11 + n} = 11 \\cdot {a} + {n}.", str(n)),
            (f"The answer is {half * 10}% ({half}/10).", str(half * 10)),
            (f"The answer is {half * 10}% ({half / 10}).", str(half * 10)),
            (f"The answer is {m} hours; that is, {a} hours per day for {b} days.", str(m)),
            (f"The answer is {n} (at $x = {a}$).", str(n)),
            (f"The answer is {n} (mod 11).", str(n)),
            (f"The answer is ${n} \\pmod{{11}}$.", str(n)),
            (f"La respuesta es {m}.", str(m)),
            (f"Die Antwort lautet {m}.", str(m)),
            (f"答案：{m}", str(m)),
            (f"答：{m}个苹果。", str(m)),
            (f"The answer is {n} 1/2 cups.", f"\\frac{{{2 * n + 1}}}{{2}}"),
            (f"The answer is {n} (we discard -{a} because lengths are positive).", str(n)),
            (f"The answer is {spelled_number(a)} apples.", str(a)),
        ]
    return _cycled("cases", count, styles)


def choices(rng: random.Random, count: int) -> list[dict]:
    def styles(k: int) -> list[tuple[str, str]]:
        letter = "ABCDE"[k % 5]
        value = rng.randint(1, 99)
        return [(answer, letter) for answer in (
            f"The answer is {letter}) {value}.", f"The answer is ({letter}) {value}.", f"\\boxed{{{letter}}}",
            f"<answer>{letter}. {value}</answer>", f"**Answer:** {letter}", f"\\boxed{{\\text{{({letter})}}}}")]
    return _cycled("choice", count, styles)


def champ(rng: random.Random) -> list[dict]:
    sys.path.insert(0, str(HERE.parent.parent / "bench"))
    import math_bench

    rows = []
    for k, item in enumerate(math_bench.champ_items()):
        styles = [f"Therefore the answer is $\\boxed{{{item.gold}}}$.", f"The answer is ${item.gold}$.",
                  f"<answer>{item.gold}</answer>", f"**Final Answer:** ${item.gold}$"]
        for style in rng.sample(styles, 2):
            rows.append({"source": "champ", "gold": item.gold, "completion": style})
    return rows


def math_verify_golds() -> list[dict]:
    rows = []
    cases = [json.loads(line) for line in (HERE / "math_verify_cases.jsonl").read_text().splitlines() if line.strip()]
    for case in cases:
        gold = case["gold"].strip().strip("$").strip()
        if not case["expected_equivalent"] or "boxed" in gold or "$" in gold or re.search(r"[A-Z]{2}", gold) or len(gold) > 40 or "\n" in gold or not re.search(r"\d", gold):
            continue
        if re.search(r"[A-Za-z]{3,}", gold.replace("\\frac", "").replace("\\sqrt", "").replace("\\pi", "")
                     .replace("\\infty", "").replace("\\boxed", "").replace("\\text", "")):
            continue
        inner = re.sub(r"^\\boxed\{(.*)\}$", r"\1", gold)
        rows.append({"source": "math_verify", "gold": gold, "completion": f"So the answer is $\\boxed{{{inner}}}$."})
        rows.append({"source": "math_verify", "gold": gold, "completion": f"<answer>${inner}$</answer>"})
    return rows


def main() -> None:
    rng = random.Random(20261207)
    rows = champ(rng) + math_verify_golds() + choices(rng, 150) + gsm8k_style(rng, 1600) + remarks(rng, 510)
    rows += cases(random.Random(20261208), 840)  # a generator of its own: the rows above stay as they were
    rows += [{"source": "gsm8k_style", "gold": g, "completion": c} for g, c in [
        ("(1, 5]", "\\boxed{(1, 5]}"), ("\\{1, 2\\}", "The answer is $\\{1, 2\\}$."), ("[2, 7]", "<answer>[2,7]</answer>"),
        ("(-\\infty, 3)", "\\boxed{(-\\infty, 3)}")]]
    with open(HERE / "honest_math.jsonl", "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(len(rows), {s: sum(r["source"] == s for r in rows) for s in {r["source"] for r in rows}})


if __name__ == "__main__":
    main()
