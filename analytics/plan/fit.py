"""Least-squares step-cost fits from grouped step timings (int_plan_steps), with their error.

The steps come grouped by their regressors (batch size B, drafts verified D, the arm's k),
each group with its count n_g, sum and sum of squares of the time. Weighted least squares on
the group means with weights n_g gives the same coefficients as ordinary least squares on
every step, and the residual sum of squares is exact::

    RSS = sum_g (sumsq_g - n_g * mean_g^2) + sum_g n_g * (mean_g - x_g . beta)^2

Terms are added in the order given and a term is kept only when it raises the rank of the
design (a term the data cannot tell apart from those before it, e.g. D in a run without
drafts, or B * k with one k captured, is reported as not fitted and counts 0). The
coefficients' covariance is s^2 (X'WX)^-1 with s^2 = RSS / (steps - terms); the fit error
reported is the root mean squared residual per step [ms] and that over the mean time.

**Blocks that disagree with the others** (``outlying_blocks``). The steps of one arm at one level
(a *block*: one server process, one stretch of time) share its conditions: a block measured while
another process held the cores runs every step slower, and a least-squares fit over all steps
follows it (seen in a --sweep-k run on this project's 2-core host: the k = 8 arm's c4 steps took
25% longer than the fit of the other blocks; with them the verify fit's RMSE was 28.1 ms, without
13.7, and the per-draft cost 0.86 against 0.64 ms). A block's relative residual is its measured
time over the fit's, minus 1; the fit is made robust to whole blocks by Tukey's biweight on those
residuals (center the median, scale 1.4826 MAD, at least ``BLOCK_SCALE_FLOOR``, cutoff
``BLOCK_TUKEY_C`` scales; iterated), and a block the robust fit gives no weight, off by at least
``BLOCK_FLAG_MIN`` (relative), is reported. The planner's fit itself is unchanged (reported, not
removed): down-weighting such blocks moved one validation's median error from 4.6 to 3.2% and
another's from 4.95 to 5.16% (BENCHMARKS.md, "Issue 23: the lean at c4/c8").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["BlockOutlier", "LinearFit", "fit_grouped", "outlying_blocks"]


@dataclass(frozen=True)
class LinearFit:
    """A fitted linear time model: ``names`` of every term asked for, ``fitted`` those kept."""

    names: tuple[str, ...]
    fitted: tuple[str, ...]
    coef: np.ndarray  # one per name; 0 for a term not fitted
    cov: np.ndarray  # names x names; 0 rows/columns for a term not fitted
    steps: int
    rmse_ms: float | None
    mean_ms: float | None

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` coefficient vectors from N(coef, cov): the timing uncertainty in the bootstrap."""
        if self.steps == 0:
            return np.zeros((n, len(self.names)))
        return rng.multivariate_normal(self.coef, self.cov, size=n, method="eigh")

    def summary(self) -> dict:
        se = np.sqrt(np.clip(np.diag(self.cov), 0, None))
        return {
            "terms": {
                name: {"coef": float(c), "std_error": float(s), "fitted": name in self.fitted}
                for name, c, s in zip(self.names, self.coef, se)
            },
            "steps": self.steps,
            "rmse_ms": self.rmse_ms,
            "relative_rmse": (self.rmse_ms / self.mean_ms) if self.rmse_ms is not None and self.mean_ms else None,
            "mean_ms": self.mean_ms,
        }


#: Tukey's biweight constant (95% efficiency under normal errors); the floor of the blocks' robust
#: scale (blocks that agree within 1% are not told apart); the least relative residual reported
BLOCK_TUKEY_C = 4.685
BLOCK_SCALE_FLOOR = 0.01
BLOCK_FLAG_MIN = 0.10


@dataclass(frozen=True)
class BlockOutlier:
    """A block of steps the robust fit leaves out: its key, its measured time over the plain fit's
    (minus 1), and the fit's RMSE per step with and without the blocks reported [ms]."""

    block: tuple
    relative_residual: float
    rmse_ms: float | None
    rmse_ms_without: float | None


def outlying_blocks(
    x: np.ndarray, names: tuple[str, ...], n: np.ndarray, total: np.ndarray, sumsq: np.ndarray, blocks: list
) -> list[BlockOutlier]:
    """The blocks (``blocks[g]``: group g's block key) whose steps disagree with the other blocks'
    fit (module docstring); [] with fewer than 5 blocks."""
    x = np.asarray(x, dtype=float).reshape(-1, len(names))
    n, total, sumsq = (np.asarray(a, dtype=float) for a in (n, total, sumsq))
    keys = sorted(set(blocks), key=repr)
    if len(keys) < 5:
        return []
    inverse = np.array([keys.index(b) for b in blocks])

    def residuals(fit: LinearFit) -> np.ndarray:
        measured = np.bincount(inverse, weights=total, minlength=len(keys))
        fitted = np.bincount(inverse, weights=n * (x @ fit.coef), minlength=len(keys))
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(fitted > 0, measured / fitted - 1, np.nan)

    plain = fit_grouped(x, names, n, total, sumsq)
    w = np.ones(len(keys))
    for _ in range(50):
        r = residuals(fit_grouped(x, names, n * w[inverse], total * w[inverse], sumsq * w[inverse]))
        ok = np.isfinite(r) & (w > 0)
        center = float(np.median(r[ok]))
        scale = max(BLOCK_SCALE_FLOOR, 1.4826 * float(np.median(np.abs(r[ok] - center))))
        u = np.where(np.isfinite(r), (r - center) / (BLOCK_TUKEY_C * scale), 0.0)
        new = np.where(np.abs(u) < 1, (1 - u**2) ** 2, 0.0)
        if np.allclose(new, w, atol=1e-12):
            break
        w = new
    r_plain = residuals(plain)
    out = [i for i in range(len(keys)) if w[i] == 0 and abs(r_plain[i]) >= BLOCK_FLAG_MIN]
    if not out:
        return []
    keep = np.isin(inverse, out, invert=True)
    without = fit_grouped(x[keep], names, n[keep], total[keep], sumsq[keep])
    return [BlockOutlier(keys[i], float(r_plain[i]), plain.rmse_ms, without.rmse_ms) for i in out]


def fit_grouped(
    x: np.ndarray, names: tuple[str, ...], n: np.ndarray, total: np.ndarray, sumsq: np.ndarray
) -> LinearFit:
    """Fit time = x . beta over steps grouped by their row of ``x`` (groups x terms);
    ``n``, ``total``, ``sumsq``: steps, sum and sum of squares of the time per group."""
    x = np.asarray(x, dtype=float).reshape(-1, len(names))
    n = np.asarray(n, dtype=float)
    keep = n > 0
    x, n, total, sumsq = x[keep], n[keep], np.asarray(total, float)[keep], np.asarray(sumsq, float)[keep]
    p = len(names)
    steps = int(n.sum())
    if steps == 0:
        return LinearFit(names, (), np.zeros(p), np.zeros((p, p)), 0, None, None)
    mean = total / n
    sw = np.sqrt(n)
    cols: list[int] = []
    for j in range(p):
        trial = cols + [j]
        if np.linalg.matrix_rank(x[:, trial] * sw[:, None]) == len(trial):
            cols = trial
    xs = x[:, cols]
    xtwx = xs.T @ (xs * n[:, None])
    beta = np.linalg.solve(xtwx, xs.T @ (n * mean))
    within = np.clip(sumsq - n * mean**2, 0, None).sum()
    rss = float(within + (n * (mean - xs @ beta) ** 2).sum())
    dof = steps - len(cols)
    s2 = rss / dof if dof > 0 else 0.0
    cov_fit = s2 * np.linalg.inv(xtwx)
    coef = np.zeros(p)
    cov = np.zeros((p, p))
    coef[cols] = beta
    cov[np.ix_(cols, cols)] = cov_fit
    return LinearFit(
        names,
        tuple(names[j] for j in cols),
        coef,
        cov,
        steps,
        float(np.sqrt(rss / steps)),
        float(total.sum() / steps),
    )
