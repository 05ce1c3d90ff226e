"""A cell's speed is decided by the verdict's machinery or said to be not measured (issue 43, item 4):
never an interval of orders of magnitude. Proved on synthetic pairs whose noise the method does not
assume (heavy tails, cells of different noise, a shift shared by a repeat)."""

from __future__ import annotations

import math

import numpy as np

from specdec.analytics.labels import ALPHA, DEFAULT_MARGIN, holm_levels, judge
from specdec.analytics.variance import block_noise, t_sf
from specdec.experiments.compat import timing
from specdec.experiments.compat.speed import NOT_MEASURED, Machinery, judge_cells
from specdec.schemas.compat import CompatCell

VERDICT = Machinery(block_noise, judge, holm_levels, t_sf, DEFAULT_MARGIN, ALPHA)


def cell(name: str, rows: list[list]) -> CompatCell:
    point = math.exp(sum(x for _b, _r, x in rows) / len(rows)) if rows else None
    sp = timing.interval([x for _b, _r, x in rows])
    return CompatCell.model_construct(
        probe=name,
        speedup=point,
        speedup_ci_low=sp[1],
        speedup_ci_high=sp[2],
        speedup_pairs=len(rows),
        detail=f"speedup {timing.text(sp)}; valid; identical in both arms",
    )


def judged(ratios: dict[str, list[list]]) -> dict[str, CompatCell]:
    cells = [cell(n, rows) for n, rows in ratios.items()]
    return {c.probe: c for c in judge_cells(cells, ratios, VERDICT)}


def run_of(rng: np.random.Generator, cells: int, true: float, sds: np.ndarray, repeats: int = 2) -> dict:
    """One body per cell: t(3) noise of the cell's scale, and now and then (2% of pairs) a pair whose
    one arm stalled (its ratio x3 or /3)."""
    stall = rng.choice([0.0, math.log(3), -math.log(3)], (cells, repeats), p=[0.98, 0.01, 0.01])
    return {
        f"c{i}": [
            [0, r, math.log(true) + stall[i, r] + sds[i] * rng.standard_t(3) / math.sqrt(3)] for r in range(repeats)
        ]
        for i in range(cells)
    }


def test_a_cell_whose_own_interval_is_absurd_says_not_measured_and_the_others_are_decided():
    rng = np.random.default_rng(7)
    ratios = run_of(rng, 20, 1.5, np.full(20, 0.04))
    ratios["wild"] = [[0, 0, math.log(0.05)], [0, 1, math.log(13.0)]]  # one stalled pair each way
    own = timing.interval([x for _b, _r, x in ratios["wild"]])
    assert own[1] < 0.01 and own[2] > 100  # the cell's own 1-df interval: five orders of magnitude
    out = judged(ratios)
    wild = out["wild"]
    assert wild.speed_label == NOT_MEASURED and wild.speed_ci_low is None and wild.speed_ci_high is None
    assert wild.detail.startswith("speed not measured (x0.81 over 2 pairs") and "[" not in wild.detail
    others = [c for n, c in out.items() if n != "wild"]
    faster = [c for c in others if c.speed_label == "faster"]
    assert len(faster) >= 18 and all(c.speed_label in ("faster", NOT_MEASURED) for c in others)
    assert all(1.2 < c.speed_ci_low < c.speedup < c.speed_ci_high < 1.9 for c in faster)
    assert all(c.detail.startswith("speed faster: x1.") and c.speed_df > 10 for c in faster)


def test_an_equivalent_cell_is_decided_when_the_pooled_noise_is_small():
    rng = np.random.default_rng(3)
    out = judged(run_of(rng, 20, 1.0, np.full(20, 0.005)))
    assert sum(c.speed_label == "equivalent" for c in out.values()) >= 18
    assert all(c.speed_label in ("equivalent", NOT_MEASURED) for c in out.values())


def test_slower_is_decided():
    rng = np.random.default_rng(5)
    out = judged(run_of(rng, 12, 0.6, np.full(12, 0.05)))
    slower = [c for c in out.values() if c.speed_label == "slower"]
    assert len(slower) >= 10 and all(c.speed_ci_high < 1 for c in slower)
    assert all(c.speed_label in ("slower", NOT_MEASURED) for c in out.values())  # a stalled pair: not measured


def a_a_rate(scales: list[float], runs: int = 300, seed: int = 11) -> float:
    """Share of A/A runs (20 cells, true ratio 1) with any cell labelled faster or slower."""
    rng = np.random.default_rng(seed)
    wrong = 0
    for _ in range(runs):
        out = judged(run_of(rng, 20, 1.0, rng.choice(scales, 20)))
        wrong += any(c.speed_label in ("faster", "slower") for c in out.values())
    return wrong / runs


def test_a_a_runs_rarely_label_any_cell_faster_or_slower_under_noise_the_method_does_not_assume():
    """t(3) noise and stalled pairs (2%), one scale: the pair's 20 cells are one family (Holm), a run
    with any faster / slower cell in about 5% of runs (3.7% measured). Cells of different noise are
    the model's limit (one noise for the pair): 2x apart 8%, 4x apart 18% (docs/compat.md)."""
    assert a_a_rate([0.05]) <= 0.06
    assert a_a_rate([0.04, 0.08]) <= 0.10


def test_without_the_machinery_nothing_is_judged_and_without_repeats_nothing_is_measured():
    ratios = {"a": [[0, 0, 0.1], [0, 1, 0.2]]}
    c = cell("a", ratios["a"])
    assert judge_cells([c], ratios, None)[0].speed_label is None
    one = {"a": [[0, 0, 0.1]], "b": [[0, 0, 0.3]]}  # one repeat: no body timed twice, no noise
    out = {x.probe: x for x in judge_cells([cell(n, r) for n, r in one.items()], one, VERDICT)}
    assert all(x.speed_label == NOT_MEASURED and "noise is not measured" in x.detail for x in out.values())


def test_a_pair_whose_speculative_arm_is_3x_faster_is_decided_faster_cell_by_cell():
    """Fake servers (tests/support/compat_server.py): 300 ms a request without speculation, 100 ms
    with. Wall-clock sleeps: at 60 and 20 ms, the scheduling jitter of the clean-clone make test's
    busy no-engine line (beside the engine tests) left a cell at x1.77 'not measured' (once in four
    runs); at these sizes it is a few percent of a request, but a stall of one pair still happens
    (below)."""
    import asyncio

    from specdec.experiments.compat.probing import Pair, probe_pair
    from specdec.http.urls import ClientSettings, parse_endpoint
    from tests.support.compat_server import CompatFake, fake_pair

    only = {"json_schema", "json_object", "stream", "stop", "top_logprobs", "tool_choice_named"}

    async def go():
        async with fake_pair(CompatFake(False, base_s=0.3), CompatFake(True, base_s=0.1)) as (b, s):
            pair = Pair("fake", "0", "ngram", parse_endpoint(b), parse_endpoint(s), settle_s=0.0)
            settings = ClientSettings(connect_timeout_s=5, request_timeout_s=10)
            return await probe_pair(pair, settings, "t1", echo=lambda _: None, only=only, repeats=2, machinery=VERDICT)

    cells, sent = asyncio.run(go())
    assert {c.probe for c in cells} == only
    # a stalled pair widens its own cell only (speed.py: the cell keeps its own spread where it is
    # wider than the pool's): on the clean-clone make test's no-engine line, at nice 10 beside the
    # engine tests, one pair of one cell in one run of five took 200 ms more (x2.00 over 2 pairs)
    # (2026-12-07, late in a clean clone's make test: one cell at x1.00 over its 2 pairs, which a
    # stall of one pair's speculative request, about 0.8 s, would give; not measured, and its point
    # estimate can be anywhere, so only the decided cells' estimates are held to the truth)
    faster = [c for c in cells if c.speed_label == "faster"]
    assert len(faster) >= len(only) - 2, [c.detail for c in cells]
    for c in faster:  # (the width of a decided interval is the host's: x3.23 [1.37, 7.65] on a slow one)
        assert 1 < c.speed_ci_low < c.speedup < c.speed_ci_high, c.detail
        assert 1.5 < c.speedup < 10, c.detail
        assert c.detail.startswith("speed faster: x") and c.outcome == "works"
    for c in cells:  # never read the other way
        assert c.speed_label in ("faster", NOT_MEASURED) and c.outcome == "works", c.detail
        assert c.speedup is not None, c.detail
    assert all(len(e["log_ratios"][e["probe"]]) == 2 * len(e["bodies"]) for e in sent)


def test_a_cell_with_one_stalled_pair_on_fake_servers_says_not_measured_not_an_absurd_interval():
    """The issue's case: one pair of a 2-repeat cell stalled, its own interval spans orders of magnitude."""
    import asyncio

    from specdec.experiments.compat.probing import Pair, probe_pair
    from specdec.http.urls import ClientSettings, parse_endpoint
    from tests.support.compat_server import CompatFake, fake_pair

    only = {"json_schema", "json_object", "stream", "stop", "top_logprobs", "choice"}
    spec = CompatFake(True, base_s=0.02, slow_once_with="structured_outputs", slow_once_s=1.0)

    async def go():
        async with fake_pair(CompatFake(False, base_s=0.02), spec) as (b, s):
            pair = Pair("fake", "0", "ngram", parse_endpoint(b), parse_endpoint(s), settle_s=0.0)
            settings = ClientSettings(connect_timeout_s=5, request_timeout_s=10)
            return await probe_pair(pair, settings, "t1", echo=lambda _: None, only=only, repeats=2, machinery=VERDICT)

    cells, _sent = asyncio.run(go())
    by = {c.probe: c for c in cells}
    choice = by["choice"]
    assert choice.speedup_ci_high / choice.speedup_ci_low > 1000  # its own 1-df interval: absurd
    assert choice.speed_label == NOT_MEASURED and choice.speed_ci_low is None, choice.detail
    assert choice.detail.startswith("speed not measured (x") and "[" not in choice.detail.split(";")[0]
    assert all(c.speed_label in ("faster", "slower", "equivalent", NOT_MEASURED) for c in cells)


def test_a_cell_without_a_timed_pair_is_not_judged_and_leaves_the_family_alone():
    rng = np.random.default_rng(2)
    ratios = run_of(rng, 10, 1.5, np.full(10, 0.04))
    ratios["refused"] = []
    out = judged(ratios)
    assert out["refused"].speed_label is None and not out["refused"].detail.startswith("speed ")
    assert sum(c.speed_label == "faster" for c in out.values()) >= 9
