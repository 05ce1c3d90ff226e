"""A sequential replay end to end on fake servers (no engine) with the analytics' own look
(``analytics/sequential_look.py``): the looks decide from the marts of the repeats so far, the
manifest keeps them, the run stops sending what they decided, and the built marts' labels are
the looks' (``intervals.fill`` through ``sequential.apply_looks``), never a full-5% reading of
the data at the end."""

from __future__ import annotations

import json

from specdec.analytics.build import build
from specdec.analytics.sequential_look import look_fn
from specdec.replay.experiment import run_replay
from tests.support.duck import rows
from tests.support.fake_server import FakeVllm, stub_config, threaded


def test_a_3x_faster_pair_is_decided_by_the_looks_and_the_marts_say_so(tmp_path, fixtures):
    # 30 ms against 10 ms an event: every cell 3x faster; wall-clock sleeps, so noise is the host's
    with threaded(FakeVllm(delay_s=0.03), FakeVllm(delay_s=0.01)) as (b, s):
        cfg = stub_config(tmp_path, fixtures, run_id="seq", repeats=2, max_repeats=6, baseline_url=b, speculative_url=s)
        run_dir = run_replay(cfg, look_factory=lambda d, looks: look_fn(d, 6, cfg.margin, looks))
    looks = json.loads((run_dir / "manifest.json").read_text())["looks"]
    assert looks and all(0 < x["alpha_look"] <= 0.05 for x in looks)
    assert sum(x["alpha_look"] for x in looks) <= 0.05 + 1e-12
    decided = {(d["category"], d["level"]): d for x in looks for d in x["decided"]}
    # the looks judge the rows the verdict labels, never the weighted overall row (no label of its own)
    looked = {c for c, _ in decided} | {cell[1] for x in looks for cell in x["open_cells"]}
    assert "(weighted)" not in looked and "(system)" in looked
    assert decided and all(d["label"] in ("faster", "inconclusive") for d in decided.values()), decided
    assert any(d["label"] == "faster" for d in decided.values())
    assert looks[-1]["open_levels"] == [] or looks[-1]["final"]
    assert not list(run_dir.rglob("look.duckdb")) and not list(tmp_path.rglob("specdec-look-*"))
    found = rows(
        build(run_dir),
        "select category, level, label, ci_low, ci_high, method from int_speedup_intervals "
        "where interval = 'family' and segment is null",
    )
    assert found
    for category, level, label, low, high, method in (tuple(r.values()) for r in found):
        d = decided.get((category, level))
        if d is None:
            assert label == "inconclusive" and "open when the run stopped" in method
        elif d.get("futile"):  # inconclusive: the run's own interval, not its look's (1 df, a spent level)
            assert label == "inconclusive" and "left for futility" in method
            assert low is not None and high is not None and low <= high
        else:
            assert (label, low, high) == (d["label"], d["ci_low"], d["ci_high"]) and "sequential:" in method
    # the report's first screen says where a sequential run's intervals come from
    from specdec.analytics.report.forest import SEQUENTIAL_TEXT
    from specdec.analytics.report.html import esc
    from specdec.analytics.report.write import write_report

    report, _ = write_report(run_dir)
    assert esc(SEQUENTIAL_TEXT.strip()) in report.read_text()
