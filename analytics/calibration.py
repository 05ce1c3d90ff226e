"""Calibration of the speedup intervals and labels on synthetic runs.

A synthetic run has the design of a replay (categories x prompts, levels,
repeats, two arms, fresh server processes per repeat) and the noise of this
machine, in components on the log scale of a request's e2e time:

- ``process``: each server process's own speed (one process per arm and
  repeat with ``--restart-servers repeat``; shared by every level of it);
- ``block``: one arm running one level once (host noise during the block);
- ``request[category]``: one request's own noise;
- ``prompt[category]``: how much the true effect differs from prompt to prompt
  of a category (the prompts are a sample of the category).

Two departures from the model the intervals assume, for the calibration check
(``fit.py``; tests/analytics/test_fit.py):

- ``drift`` (and ``drift_speculative``): monotone host drift, the log e2e time
  growing by so much a repeat in each arm (continuously: a repeat's levels run
  in order); common to both arms it cancels in the pairs;
- ``level_factor``: a level whose block and request noise is so many times
  the others' (every category, both arms).

The treatment's request times are the baseline's divided by the true ratio
(times exp(prompt effect)). The rows handed to ``intervals.compute`` are those
the build would read: A/B and A/A pairs and block throughput ratios. The
project's own interval and label code is called on each run; nothing is
judged here except whether it covered the truth, and whether the
calibration check fired (``Result.fit_fired``; the old A/A line beside it,
``old_aa_check``):

- the measurement interval covers the ratio of *this prompt set* (the true
  ratio times the prompts' mean effect); the prompts-and-runs interval the
  category's ratio (the true ratio);
- a label is false when it says ``faster`` or ``slower`` and the truth is not.

``estimate`` reads those components back from a built run (``speedup``'s
inputs), so the simulation can use what real runs on this machine show.

``PLANTED`` holds two methods the calibration must reject, so a test can show
it would catch them: degrees of freedom counted per level as if levels were
independent (the method before issue 19), and labels that must also clear a
mirrored A/A interval (the old double hurdle).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import duckdb
import numpy as np

from specdec.analytics import intervals
from specdec.analytics.variance import MAD_SD, block_noise, level_noise, slow_blocks
from specdec.demo_design import DEMO_CATEGORIES, DEMO_LEVELS, DEMO_PROMPTS_PER_CATEGORY, DEMO_REPEATS

__all__ = [
    "MEASURED",
    "PLANTED",
    "Design",
    "Noise",
    "Result",
    "aa_intervals",
    "estimate",
    "evaluate",
    "noise_from",
    "old_aa_check",
    "simulate",
]


@dataclass(frozen=True)
class Design:
    """What the run sends: the demo's design by default."""

    categories: tuple[str, ...] = DEMO_CATEGORIES
    prompts: int = DEMO_PROMPTS_PER_CATEGORY
    levels: tuple[int, ...] = DEMO_LEVELS
    repeats: int = DEMO_REPEATS
    #: per (level, repeat), the arm whose block ran first ('b' or 's'); None: the replay's
    #: repeat-major schedule (``replay/load/schedule.py``: the baseline first where repeat + level
    #: index is even; tests/analytics/test_calibration.py checks the two agree)
    first: Mapping[tuple[int, int], str] | None = None

    def first_arm(self, level: int, repeat: int) -> str:
        if self.first is not None:
            return self.first[level, repeat]
        return "b" if (repeat + self.levels.index(level)) % 2 == 0 else "s"

    def order(self) -> dict[tuple[int, int], float]:
        """The arm order as the intervals read it: +1/2 where the speculative arm ran second."""
        return {
            (lv, r): 0.5 if self.first_arm(lv, r) == "b" else -0.5 for lv in self.levels for r in range(self.repeats)
        }


@dataclass(frozen=True)
class Noise:
    """Standard deviations on the log scale (0.03: about 3%)."""

    process: float = 0.03
    block: float = 0.02
    request: Mapping[str, float] = field(default_factory=lambda: {"chat": 0.10, "code": 0.05, "structured": 0.05})
    prompt: Mapping[str, float] = field(default_factory=lambda: {"chat": 0.05, "code": 0.05, "structured": 0.05})
    #: monotone host drift: the log e2e time of every request grows by this much per repeat (continuous in
    #: time: a repeat's levels run in order, so level i of L adds i / L of a step), in both arms
    drift: float = 0.0
    #: the speculative arm's drift per repeat, when it differs from the baseline's (None: the same)
    drift_speculative: float | None = None
    #: per level, a factor on its block and request noise (both arms, every category): {4: 3.0} makes
    #: level 4 three times as noisy as the others, a misfit of the one-variance-per-category model
    level_factor: Mapping[int, float] = field(default_factory=dict)
    #: the arm that runs second in a block pair is this much slower (log scale, every request)
    order: float = 0.0
    #: block and request noise drawn from Student's t with this df (scaled to the same SD); None: normal
    tails: float | None = None
    #: this share of blocks (one arm, one level, one repeat) runs slow, by a factor drawn in ``slow_factor``
    slow_share: float = 0.0
    slow_factor: tuple[float, float] = (2.0, 3.0)
    #: a category-in-block shock: one category's requests of one block move together by this SD
    shock: float = 0.0


#: The noise components measured on this 2-core machine, robustly (``estimate``: stalled requests
#: and slow blocks set aside, the arm order fitted; ``noise_from``: medians across runs), from three
#: runs of the demo's design on a quiet host, 2026-12-07 06:36-07:05 UTC (vLLM CPU, SmolLM2-135M, the
#: bundled mix, ngram k=4 vs none, levels 1, 4, 8, the fixed 5 repeats x 32 tokens on fresh servers,
#: no lossless or sampling pass: ``specdec demo --design fixed --repeats 5 --samples 0
#: --no-lossless-pass``), ``benchmarks/calibration.py --estimate`` (BENCHMARKS.md, issue 41). The
#: three runs' arm order: -2.9% to +4.7% by series, median +1.2% (the benchmark's ``order`` departure
#: is the issue's 4%). Standard deviations on the log scale. Before (2026-12-02, root mean squares
#: over three runs, two of them on a busy host): process 0.029, block 0.036, request 0.088-0.104,
#: prompt 0.14-0.45: the block figure's variance is within 5% of today's.
MEASURED = Noise(
    process=0.026,
    block=0.047,
    request={"chat": 0.065, "code": 0.059, "structured": 0.064},
    prompt={"chat": 0.260, "code": 0.387, "structured": 0.405},
)


def simulate(
    design: Design,
    noise: Noise,
    ratio: float | Mapping[tuple[str, int], float],
    rng: np.random.Generator,
    centred: bool = True,
) -> tuple[list[tuple], list[tuple], dict, dict]:
    """One synthetic run: (pairs, blocks, prompt-set truth, category truth),
    the truths as log ratios keyed by (category, level), with '(system)'.
    ``centred``: the prompts' effects sum to zero within each category, so the
    prompt set's truth is the true ratio (what a power or A/A scenario needs);
    False draws the prompts as a sample of the category (what the
    prompts-and-runs interval is for)."""
    cats, levels, reps, n_p = design.categories, design.levels, design.repeats, design.prompts
    true = {
        (c, lv): math.log(ratio if isinstance(ratio, (int, float)) else ratio[c, lv]) for c in cats for lv in levels
    }
    effect = {c: rng.normal(0.0, noise.prompt.get(c, 0.0), n_p) for c in cats}
    if centred:  # this prompt set's mean effect is exactly the true ratio (the prompts still differ)
        effect = {c: e - e.mean() for c, e in effect.items()}
    base = {c: rng.normal(math.log(2000.0), 0.3, n_p) for c in cats}  # each prompt's own length
    process = {(arm, r): rng.normal(0.0, noise.process) for arm in ("b", "s") for r in range(reps)}
    drift = {"b": noise.drift, "s": noise.drift if noise.drift_speculative is None else noise.drift_speculative}
    log_e2e: dict[tuple, np.ndarray] = {}

    def draw(sd: float, size=None):  # normal, or Student's t scaled to the same SD
        if noise.tails is None:
            return rng.normal(0.0, sd, size)
        return rng.standard_t(noise.tails, size) * sd / math.sqrt(noise.tails / (noise.tails - 2.0))

    for r in range(reps):
        for i, lv in enumerate(levels):
            factor = noise.level_factor.get(lv, 1.0)
            for arm in ("b", "s"):
                shift = process[arm, r] + drift[arm] * (r + i / len(levels)) + draw(factor * noise.block)
                if noise.order and design.first_arm(lv, r) != arm:
                    shift += noise.order
                if noise.slow_share and rng.random() < noise.slow_share:
                    shift += math.log(rng.uniform(*noise.slow_factor))
                for c in cats:
                    times = base[c] + shift + draw(factor * noise.request.get(c, 0.0), n_p)
                    if noise.shock:
                        times = times + rng.normal(0.0, noise.shock)
                    if arm == "s":
                        times = times - true[c, lv] - effect[c]
                    log_e2e[arm, c, lv, r] = times
    pairs, blocks = [], []
    for c in cats:
        for lv in levels:
            for r in range(reps):
                d = log_e2e["b", c, lv, r] - log_e2e["s", c, lv, r]
                pairs += [("ab", c, lv, f"{c}{p}", r, float(d[p])) for p in range(n_p)]
                if r:
                    aa = log_e2e["b", c, lv, r - 1] - log_e2e["b", c, lv, r]
                    pairs += [("aa", c, lv, f"{c}{p}", r, float(aa[p])) for p in range(n_p)]
    for lv in levels:
        # block throughput: every request emits the same tokens, so tokens/s ~ 1 / mean e2e
        thr = {
            (arm, r): -math.log(np.mean(np.exp(np.concatenate([log_e2e[arm, c, lv, r] for c in cats]))))
            for arm in ("b", "s")
            for r in range(reps)
        }
        blocks += [("ab", lv, r, thr["s", r] - thr["b", r]) for r in range(reps)]
        blocks += [("aa", lv, r, thr["b", r] - thr["b", r - 1]) for r in range(1, reps)]
    prompt_set = {(c, lv): true[c, lv] + float(np.mean(effect[c])) for c in cats for lv in levels}
    category = dict(true)
    for lv in levels:  # (system): the throughput ratio of this prompt set, without noise
        base_t = np.concatenate([np.exp(base[c]) for c in cats])
        spec_t = np.concatenate([np.exp(base[c] - true[c, lv] - effect[c]) for c in cats])
        prompt_set[intervals.SYSTEM, lv] = category[intervals.SYSTEM, lv] = math.log(base_t.mean() / spec_t.mean())
    return pairs, blocks, prompt_set, category


@dataclass(frozen=True)
class Result:
    runs: int
    coverage: float  # pointwise 95% measurement intervals that hold the prompt-set truth
    coverage_by_category: dict
    coverage_by_level: dict  # the same per level (every series)
    prompts_coverage: float  # prompts-and-runs intervals that hold the category's truth
    fit_fired: float  # runs where the calibration check (fit.py) says some level is noisier
    old_aa_fired: float  # runs where the old A/A check would have warned (more A/A intervals excluding 1 than allowed)
    false_label_runs: float  # runs with a faster/slower label where the truth is not so (family-wise)
    faster_share: float  # rows labelled faster (power when every true ratio > 1)
    equivalent_share: float  # rows labelled equivalent
    mean_level: float  # mean confidence level of the labelled intervals
    power: float  # category rows with a true effect > 0 labelled faster
    null_equivalent: float  # rows with a true ratio of 1 labelled equivalent

    def line(self) -> dict:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


Method = Callable[..., list[tuple]]


def evaluate(
    design: Design,
    noise: Noise,
    ratio: float | Mapping[tuple[str, int], float],
    runs: int,
    seed: int = 0,
    method: Method = intervals.compute,
    margin: float = 0.05,
    centred: bool = True,
) -> Result:
    """Coverage, family-wise false labels and label shares over ``runs`` synthetic
    runs, with ``method`` (the project's ``intervals.compute`` unless a test
    plants another) computing every interval and label."""
    rng = np.random.default_rng(seed)
    hit = total = p_hit = p_total = false_runs = faster = equivalent = labelled = fit_runs = old_runs = 0
    level_sum = 0.0
    by_cat: dict[str, list[int]] = {}
    by_level: dict[int, list[int]] = {}
    effect = [0, 0]  # category rows with a true effect: labelled faster, all
    null = [0, 0]  # rows with no true effect: labelled equivalent, all
    order = design.order()
    for _ in range(runs):
        pairs, blocks, prompt_set, category = simulate(design, noise, ratio, rng, centred)
        false_here = fired = False
        old_aa_fired = old_aa_check(pairs, blocks)
        old_runs += old_aa_fired
        for row in method(pairs, blocks, margin=margin, order=order):
            comparison, cat, lv, _seg, kind, low, high = row[:7]
            if kind == "fit":
                fired = fired or row[11] == "noisier"
                continue
            truth = prompt_set[cat, lv]
            if kind == "measurement":
                total += 1
                ok = math.log(low) <= truth <= math.log(high)
                hit += ok
                by_cat.setdefault(cat, [0, 0])[0] += ok
                by_cat[cat][1] += 1
                by_level.setdefault(lv, [0, 0])[0] += ok
                by_level[lv][1] += 1
            elif kind == "prompts":
                p_total += 1
                p_hit += math.log(low) <= category[cat, lv] <= math.log(high)
            elif kind == "family":
                label = row[11]
                labelled += 1
                level_sum += row[7]
                faster += label == "faster"
                equivalent += label == "equivalent"
                if truth > 1e-12 and cat != intervals.SYSTEM:
                    effect[0] += label == "faster"
                    effect[1] += 1
                if abs(truth) <= 1e-12:
                    null[0] += label == "equivalent"
                    null[1] += 1
                if (label == "faster" and truth <= 0) or (label == "slower" and truth >= 0):
                    false_here = True
        false_runs += false_here
        fit_runs += fired
    return Result(
        runs,
        hit / max(total, 1),
        {c: round(h / n, 4) for c, (h, n) in sorted(by_cat.items())},
        {lv: round(h / n, 4) for lv, (h, n) in sorted(by_level.items())},
        p_hit / max(p_total, 1),
        fit_runs / runs,
        old_runs / runs,
        false_runs / runs,
        faster / max(labelled, 1),
        equivalent / max(labelled, 1),
        level_sum / max(labelled, 1),
        effect[0] / max(effect[1], 1),
        null[0] / max(null[1], 1),
    )


def _order_of(con) -> dict[str, dict[tuple[int, int], float]]:
    """``intervals.arm_order``, or nothing where the database has no measured requests (a
    synthetic table of pairs only)."""
    try:
        return intervals.arm_order(con)
    except duckdb.CatalogException:
        return {}


def _without_order(figures: dict[tuple, float], order: Mapping[tuple, float]) -> tuple[dict, float | None]:
    """The block figures less the arm order's fitted effect (least squares with a mean per level),
    and that effect as ``Noise.order`` reads it: the second arm's slowdown (log scale; None when the order is not known or does not vary within a level)."""
    keys = sorted(figures)
    o = np.array([order.get(k, np.nan) for k in keys])
    if np.isnan(o).any():
        return figures, None
    levels = sorted({k[0] for k in keys})
    x = np.array([[1.0 if k[0] == lv else 0.0 for lv in levels] + [o[i]] for i, k in enumerate(keys)])
    y = np.array([figures[k] for k in keys])
    if np.linalg.matrix_rank(x) < x.shape[1]:
        return figures, None
    coef = np.linalg.lstsq(x, y, rcond=None)[0]
    # the coefficient is the log ratio where the speculative arm ran second less where it ran
    # first: -2x what ``Noise.order`` calls the order effect (the second arm's slowdown)
    return {k: float(y[i] - coef[-1] * o[i]) for i, k in enumerate(keys)}, -float(coef[-1]) / 2


#: A request whose median-polish residual is this many robust SDs out is a stall, not request noise.
OUTLIER_SD = 5.0


def _median_polish(grid: np.ndarray, sweeps: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """Tukey's median polish of a prompts x repeats grid: (residuals, each repeat's figure: the
    overall effect plus its column effect, a median-based block figure)."""
    resid = grid.copy()
    overall, col = 0.0, np.zeros(grid.shape[1])
    for _ in range(sweeps):
        resid = resid - np.median(resid, axis=1, keepdims=True)
        c = np.median(resid, axis=0)
        resid, col = resid - c, col + c
        shift = float(np.median(col))
        overall, col = overall + shift, col - shift
    return resid, overall + col


def estimate(con, run_id: str | None = None) -> dict:
    """The noise components of one built run (or every run of the database),
    robustly (issue 41, item 4): per category the request noise (the prompt x
    repeat residuals of the A/B pair log ratios, by their median absolute
    deviation, / 2: both arms), the prompt spread of the effect, the arm order's
    effect (fitted on the block figures with a mean per level, when the run's
    requests say which arm ran first), and from the block figures (the polish's
    repeat effects, so a stalled request does not move them) less that
    effect, slow blocks left out (``variance.slow_blocks``), the process (the
    repeat-shared part, / 2) and block (the rest, less the request noise averaged
    over the block's pairs, / 2) components (``variance.block_noise``). Standard
    deviations, and the order effect as a log ratio."""
    where = "where comparison = 'ab'" + (f" and run_id = '{run_id}'" if run_id else "")
    rows = con.execute(
        f"select run_id, category, level, prompt_id, repeat, avg(log_ratio) "
        f"from int_requests_paired {where} group by all"
    ).fetchall()
    order_of = _order_of(con)
    cells: dict[tuple, dict[tuple, float]] = {}
    for run, cat, lv, prompt, rep, y in rows:
        cells.setdefault((run, cat), {})[lv, prompt, rep] = y
    out: dict = {}
    for (run, cat), table in sorted(cells.items()):
        req, prm, figures, n_prompts = [], [], {}, []
        for lv in sorted({k[0] for k in table}):
            prompts = sorted({k[1] for k in table if k[0] == lv})
            reps = sorted({k[2] for k in table if k[0] == lv})
            grid = np.array([[table.get((lv, p, r), np.nan) for r in reps] for p in prompts])
            if np.isnan(grid).any() or len(prompts) < 2 or len(reps) < 2:
                continue
            resid = grid - grid.mean(axis=1, keepdims=True) - grid.mean(axis=0, keepdims=True) + grid.mean()
            ms_res = float((resid**2).sum() / ((len(prompts) - 1) * (len(reps) - 1)))
            ms_prompt = float(len(reps) * grid.mean(axis=1).var(ddof=1))
            # robust: a median polish finds the stalled requests (residuals over OUTLIER_SD robust
            # SDs); they are replaced by the polish's fit and the mean squares read without them
            polished, column = _median_polish(grid)
            scale = MAD_SD * float(np.median(np.abs(polished)))
            far = np.abs(polished) > OUTLIER_SD * scale if scale > 0 else np.zeros(grid.shape, bool)
            kept = np.where(far, grid - polished, grid)
            resid = kept - kept.mean(axis=1, keepdims=True) - kept.mean(axis=0, keepdims=True) + kept.mean()
            dof = (len(prompts) - 1) * (len(reps) - 1) - int(far.sum())
            req.append(float((resid**2).sum()) / max(dof, 1) / 2)
            prm.append(max(0.0, (ms_prompt - ms_res) / len(reps)))
            figures.update({(lv, r): float(column[i]) for i, r in enumerate(reps)})
            n_prompts.append(len(prompts))
        slow = slow_blocks(figures)  # found first: a 2-3x block would pull the order's fit
        figures, order_effect = _without_order(
            {k: v for k, v in figures.items() if k not in slow},
            order_of.get(run, {}),
        )
        noise = block_noise(figures) if figures else None
        if noise is None or not req:
            continue
        request = float(np.mean(req))
        block = max(0.0, noise.block - 2 * request / float(np.mean(n_prompts))) / 2
        out.setdefault(run, {})[cat] = {
            "request_sd": math.sqrt(request),
            "prompt_sd": math.sqrt(float(np.mean(prm))),
            "process_sd": math.sqrt(noise.repeat / 2),
            "block_sd": math.sqrt(block),
            "block_figure_sd": math.sqrt(noise.variance),
            "df": noise.df,
            "order": order_effect if order_effect is not None else math.nan,
            "slow_blocks": float(len(slow)),
        }
    return out


def noise_from(estimates: Iterable[Mapping[str, Mapping[str, float]]]) -> Noise:
    """One Noise from several runs' ``estimate`` rows, robustly: medians across
    runs (and categories, for the process and block parts), so that one run on
    a busy host does not set the sizes."""
    per_cat: dict[str, dict[str, list[float]]] = {}
    for run in estimates:
        for cat, comp in run.items():
            for k, v in comp.items():
                per_cat.setdefault(cat, {}).setdefault(k, []).append(v)
    med = lambda xs: float(np.median(xs))  # noqa: E731
    return Noise(
        process=med([v for c in per_cat.values() for v in c["process_sd"]]),
        block=med([v for c in per_cat.values() for v in c["block_sd"]]),
        request={c: med(v["request_sd"]) for c, v in per_cat.items()},
        prompt={c: med(v["prompt_sd"]) for c, v in per_cat.items()},
        order=med([v for c in per_cat.values() for v in c["order"] if not math.isnan(v)] or [0.0]),
    )


def _df_per_level(cells: Mapping[tuple, float], order: Mapping[tuple, float], own: frozenset) -> dict:
    """Planted: the project's model, but df = the residual count (every level's repeats counted
    as independent, the shared repeat noise ignored: the method before issue 19)."""
    found = level_noise(cells, order, own)
    k1 = float(sum(n.repeats for n in found.values()) - len(found))
    return {lv: replace(n, df=k1) for lv, n in found.items()}


def _pooled(cells: Mapping[tuple, float], order: Mapping[tuple, float], own: frozenset) -> dict:
    """Planted: one variance pooled over every level, no arm order fitted (the model before issue 41)."""
    return level_noise(cells, None, frozenset())


def _df_per_level_method(pairs: Iterable[tuple], blocks: Iterable[tuple], **kw: Any) -> list[tuple]:
    return intervals.compute(pairs, blocks, noise_model=_df_per_level, **kw)


def _pooled_method(pairs: Iterable[tuple], blocks: Iterable[tuple], **kw: Any) -> list[tuple]:
    return intervals.compute(pairs, blocks, noise_model=_pooled, **kw)


def _independent_method(pairs: Iterable[tuple], blocks: Iterable[tuple], **kw: Any) -> list[tuple]:
    """Planted: the family-wise levels with every row counted independent (Sidak's step-down, a
    hair from Holm's: the rule before 2026-12-07), which gives up the power that the rows of one
    level moving together leave."""
    return intervals.compute(pairs, blocks, correlated=False, **kw)


def aa_intervals(pairs: Iterable[tuple], blocks: Iterable[tuple]) -> dict[tuple, tuple[float, float]]:
    """The old A/A interval per (category, level), as ``intervals`` computed it
    before issue 41: the mean of the baseline's consecutive-repeat figures with
    the A/B noise of its category (V / 2 per arm; consecutive figures share a
    block), 95%, df as the A/B series'. Kept to show what the check it fed did:
    the planted double hurdle reads it, and ``old_aa_check`` counts it."""
    pairs, blocks = list(pairs), list(blocks)
    rows = [(c, cat, lv, r, y, 1) for c, cat, lv, _p, r, y in pairs]
    means = {key: intervals._means(reps) for key, reps in intervals._by_repeat(rows, blocks).items()}
    series = intervals._series({k: v for k, v in means.items() if k[0] == "ab"})
    noise = {skey: block_noise(cells) for skey, cells in series.items()}
    out: dict[tuple, tuple[float, float]] = {}
    for key, figures in sorted(means.items()):
        v = noise.get(("ab", key[1], None))
        n = len(figures)
        if key[0] != "aa" or not n or v is None or v.df <= 0:
            continue
        adjacent = sum(1 for r in figures if r + 1 in figures)
        se = math.sqrt(v.variance * (n - adjacent)) / n
        out[key[1], key[2]] = intervals._t(sum(figures.values()) / n, se, v.df)
    return out


def old_aa_check(pairs: Iterable[tuple], blocks: Iterable[tuple]) -> bool:
    """Whether the old calibration line would have warned: more A/A intervals
    excluding 1 than max(1, 10% of them) (``verdict.calibration_sentence``
    before issue 41)."""
    found = aa_intervals(pairs, blocks).values()
    excluded = sum(not low <= 1.0 <= high for low, high in found)
    return excluded > max(1, round(0.1 * len(found)))


def _double_hurdle_method(
    pairs: Iterable[tuple], blocks: Iterable[tuple], margin: float = 0.05, **kw: Any
) -> list[tuple]:
    """Planted: a label also needs its interval to clear the A/A interval
    mirrored about 1 (max(aa_high, 1 / aa_low)), as before issue 19."""
    pairs, blocks = list(pairs), list(blocks)
    rows = intervals.compute(pairs, blocks, margin=margin, **kw)
    floor = {key: max(high, 1 / low) for key, (low, high) in aa_intervals(pairs, blocks).items()}
    out = []
    for r in rows:
        f = floor.get((r[1], r[2]))
        if r[0] == "ab" and r[4] == "family" and f is not None and r[11] in ("faster", "slower"):
            cleared = r[5] > f if r[11] == "faster" else r[6] < 1 / f
            if not cleared:
                r = (*r[:11], "inconclusive", *r[12:])
        out.append(r)
    return out


#: Methods the calibration must reject (tests/analytics/test_calibration.py).
PLANTED: dict[str, Method] = {
    "df counted per level": _df_per_level_method,
    "one pooled variance": _pooled_method,
    "old double hurdle": _double_hurdle_method,
    "rows counted independent": _independent_method,
}
