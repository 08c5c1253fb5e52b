"""Summary statistics of timing samples. Medians and quantiles, because shared machines are noisy
and latency distributions have long right tails."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import stats as sps


# The tail percentiles every summary carries beside the median (serving's latencies come from
# LoadGen with the same three).
PERCENTILES = (50, 90, 99)


def summarize(samples: Sequence[float], *, confidence: float = 0.95, n_resamples: int = 2000,
              seed: int = 0) -> dict[str, float | int]:
    """Median, quartiles, IQR, a percentile-bootstrap CI of the median, the tail percentiles
    p50/p90/p99 (linear interpolation between samples: with a handful of samples p90 and p99
    lie near the slowest one), mean, std and CV."""
    x = np.asarray(samples, dtype=float)
    if x.size == 0:
        raise ValueError("cannot summarize zero samples")
    q1, median, q3 = np.percentile(x, [25, 50, 75])
    tail = dict(zip(PERCENTILES, np.percentile(x, PERCENTILES)))
    if x.size > 1 and np.ptp(x) > 0:
        res = sps.bootstrap((x,), np.median, confidence_level=confidence,
                            n_resamples=n_resamples, method="percentile",
                            rng=np.random.default_rng(seed))
        ci_low, ci_high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    else:  # one sample, or all equal: the CI collapses onto the value
        ci_low = ci_high = float(median)
    mean = float(x.mean())
    std = float(x.std(ddof=1)) if x.size > 1 else 0.0
    return {
        "n": int(x.size),
        "median": float(median),
        "q1": float(q1),
        "q3": float(q3),
        "iqr": float(q3 - q1),
        "ci_low": ci_low,
        "ci_high": ci_high,
        "confidence": confidence,
        **{f"p{q}": float(v) for q, v in tail.items()},
        "mean": mean,
        "std": std,
        "cv": std / mean if mean else float("nan"),
        "min": float(x.min()),
        "max": float(x.max()),
    }


def ratio_of_medians_ci(numerator: Sequence[float], denominator: Sequence[float], *,
                        confidence: float = 0.95, n_resamples: int = 2000, seed: int = 0,
                        percentile: float = 50.0) -> tuple[float, float, float]:
    """median(numerator) / median(denominator) with a percentile-bootstrap CI, resampling the two
    independent sample sets separately (e.g. a speedup from two baselines' latencies).
    ``percentile``: another percentile of each side instead of the median (50)."""
    if not 0 <= percentile <= 100:
        raise ValueError(f"percentile={percentile!r} must be in [0, 100]")
    a, b = np.asarray(numerator, float), np.asarray(denominator, float)
    if a.size == 0 or b.size == 0:
        raise ValueError("both sample sets need at least one sample")
    rng = np.random.default_rng(seed)
    ra = np.percentile(rng.choice(a, (n_resamples, a.size)), percentile, axis=1)
    rb = np.percentile(rng.choice(b, (n_resamples, b.size)), percentile, axis=1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(ra / rb, [tail, 100 - tail])
    point = np.percentile(a, percentile) / np.percentile(b, percentile)
    return float(point), float(low), float(high)


def mean_ci(values: Sequence[float], *, confidence: float = 0.95) -> dict[str, float | int]:
    """Mean over independent repeats (seeds) with a Student-t CI: with 3-5 seeds a bootstrap has
    too few distinct resamples to give an interval. One value gives a zero-width interval and
    ``n = 1`` says so."""
    x = np.asarray([v for v in values if v is not None and np.isfinite(v)], dtype=float)
    if x.size == 0:
        raise ValueError("cannot take the mean of zero finite values")
    mean = float(x.mean())
    if x.size == 1:
        return {"n": 1, "mean": mean, "ci_low": mean, "ci_high": mean, "std": 0.0}
    std = float(x.std(ddof=1))
    half = float(sps.t.ppf(0.5 + confidence / 2, x.size - 1)) * std / np.sqrt(x.size)
    return {"n": int(x.size), "mean": mean, "ci_low": mean - half, "ci_high": mean + half,
            "std": std}
