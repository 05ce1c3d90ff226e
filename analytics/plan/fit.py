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
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["LinearFit", "fit_grouped"]


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
