"""The statistics of `grpo-train eval`: proportions, pass@k and paired differences, each with a 95% interval.

* accuracy (a proportion of problems): the Wilson score interval, which stays inside [0, 1] and
  keeps its coverage near 0 and 1, where the normal ("Wald") interval does not;
* pass@k from n >= k samples per problem: the unbiased estimator 1 - C(n-c, k) / C(n, k) per
  problem (c of n samples correct; Chen et al. 2021, the HumanEval paper), averaged over problems,
  with a percentile bootstrap over problems (problems are the unit sampled, not completions);
* the difference of two models on the same problems: the mean of the per-problem differences,
  with a paired percentile bootstrap over problems (the pairing removes the problems' own
  difficulty from the noise), plus the counts of problems each model alone gets right.

Every bootstrap is seeded: the same inputs give the same interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

Z95 = 1.959963984540054  # the standard normal's 97.5% quantile


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its interval and how the interval was made."""

    value: float
    low: float
    high: float
    method: str
    n: int

    def as_dict(self) -> dict[str, float | int | str]:
        return asdict(self)


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion `successes / n`."""
    if n <= 0 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n and n > 0, got {successes} of {n}")
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    # at 0 or n successes one bound is exactly 0 or 1 (rounding would leave 1e-17 or 0.9999...)
    return (0.0 if successes == 0 else centre - half), (1.0 if successes == n else centre + half)


def proportion(outcomes: Sequence[bool | int]) -> Estimate:
    """The share of true outcomes with its Wilson 95% interval."""
    n, hits = len(outcomes), int(sum(bool(o) for o in outcomes))
    low, high = wilson_interval(hits, n)
    return Estimate(hits / n, low, high, "wilson", n)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem: the chance that k of its n samples, drawn without
    replacement, include at least one of the c correct ones."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    # C(n-c, k) / C(n, k) as a running product: no huge binomials
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def bootstrap_mean(values: Sequence[float], seed: int, rounds: int = 2000, level: float = 0.95) -> Estimate:
    """Mean of per-problem values with a percentile bootstrap interval (problems resampled)."""
    data = np.asarray(values, dtype=np.float64)
    if data.size == 0:
        raise ValueError("no values to bootstrap")
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, data.size, size=(rounds, data.size))].mean(axis=1)   # (rounds,)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return Estimate(float(data.mean()), float(low), float(high), f"bootstrap over problems ({rounds} rounds)",
                    int(data.size))


def pass_at_k_estimate(correct_counts: Sequence[int], n: int, k: int, seed: int, rounds: int = 2000) -> Estimate:
    """pass@k over problems (each with `n` samples, `correct_counts[i]` of them correct) with its interval."""
    return bootstrap_mean([pass_at_k(n, c, k) for c in correct_counts], seed, rounds)


@dataclass(frozen=True)
class PairedDifference:
    """B minus A on the same problems: the mean difference, its interval, and the discordant problems."""

    estimate: Estimate
    better: int   # problems where B scores higher than A
    worse: int    # problems where B scores lower than A

    def as_dict(self) -> dict[str, float | int | str]:
        return {**self.estimate.as_dict(), "better": self.better, "worse": self.worse}


def paired_difference(a: Sequence[float], b: Sequence[float], seed: int, rounds: int = 2000) -> PairedDifference:
    """Mean of `b[i] - a[i]` with a paired percentile bootstrap over problems."""
    if len(a) != len(b):
        raise ValueError(f"paired values need the same problems: {len(a)} and {len(b)} values")
    diff = np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)
    estimate = bootstrap_mean(diff, seed, rounds)
    method = f"paired bootstrap over problems ({rounds} rounds)"
    return PairedDifference(Estimate(estimate.value, estimate.low, estimate.high, method, estimate.n),
                            int((diff > 0).sum()), int((diff < 0).sum()))
