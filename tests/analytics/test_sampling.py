"""The sampling-mode test (issue 6, item 8): the two-sample KS test on hand-built
SampleCheck rows, through stg_sample_checks, the sampling_tests table and the
sampling mart."""

from __future__ import annotations

import math

import duckdb
import numpy as np
import pytest

from specdec.analytics import sampling_test as st
from specdec.analytics.models import discover, macros_sql
from specdec.arms import by_role_columns, create_roles_table
from specdec.schemas.arrow import table_from_records
from specdec.schemas.records import SampleCheck

EOS = [2]


def check(arm: str, prompt: str, k: int, logprob: float | None, end: int | None = None, *,
          category: str = "chat", level: int = 1, success: bool = True, max_tokens: int = 32,
          eos: list[int] | None = EOS) -> SampleCheck:
    return SampleCheck(
        run_id="t", arm=arm, concurrency=level, request_id=f"{arm}.{level}.{prompt}.{k}", prompt_id=prompt,
        category=category, sample_index=k, seed=1000 + k, temperature=1.0, max_tokens=max_tokens,
        success=success, error_type=None if success else "http_status", output_tokens=max_tokens if success else None,
        sequence_logprob=logprob if success else None, natural_end_position=end, eos_token_ids=eos,
    )


def _roles(con) -> None:
    """What build creates before the staging models: the macros, and the (empty) table of
    analysis runs that by_role reads."""
    con.execute(macros_sql())
    create_roles_table(con)


def mart(records) -> list[dict]:
    """Build raw -> stg_sample_checks -> sampling_tests -> sampling, as analytics build does,
    from SampleCheck records or an Arrow table of them."""
    con = duckdb.connect()
    con.register("_raw", records if hasattr(records, "schema") else table_from_records(SampleCheck, records))
    con.execute("create table raw_sample_checks as select * from _raw")
    _roles(con)
    models = {m.name: m for m in discover()}
    con.execute(f"create view stg_sample_checks as\n{models['stg_sample_checks'].sql}")
    st.create_table(con)
    con.execute(f"create view sampling as\n{models['sampling'].sql}")
    st.fill(con)
    cur = con.execute("select * from sampling")
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


def by_stat(rows: list[dict], **where) -> dict[str, dict]:
    return {r["statistic"]: r for r in rows if all(r[k] == v for k, v in where.items())}


def two_arms(base: list[float], spec: list[float], ends=None, prompts: int = 4, **kw) -> list[SampleCheck]:
    """Sample i of each arm goes to prompt i % prompts, sample index i // prompts."""
    ends = ends or (None, None)
    out = []
    for arm, values, end in (("baseline", base, ends[0]), ("speculative", spec, ends[1])):
        for i, v in enumerate(values):
            e = end[i] if isinstance(end, list) else end
            out.append(check(arm, f"p{i % prompts}", i // prompts, v, e, **kw))
    return out


# ------------------------------------------------------------------ the test itself
def test_ks_statistic_and_p_value_of_a_case_worked_by_hand():
    # ECDFs of x = 1 2 3 4 and y = 3 5 6 7 at 4: 4/4 vs 1/4, the largest gap: D = 0.75
    d, p = st.ks_2samp([1, 2, 3, 4], [3, 5, 6, 7])
    assert d == 0.75
    # x = sqrt(4*4/8) * 0.75 = 1.0607; Q(x) = 2 (e^-2.25 - e^-9 + ...) = 0.21055
    assert p == pytest.approx(2 * (math.exp(-2.25) - math.exp(-9)), abs=1e-8)
    assert p == pytest.approx(0.21055, abs=1e-5)
    # identical samples: D = 0, p = 1; disjoint samples: D = 1
    assert st.ks_2samp([1, 2], [2, 1]) == (0.0, 1.0)
    assert st.ks_2samp([1, 2, 3], [4, 5])[0] == 1.0


def test_kolmogorov_distribution_known_quantiles_and_both_series_agree():
    assert st.kolmogorov_sf(1.3581) == pytest.approx(0.05, abs=1e-4)  # c(0.05)
    assert st.kolmogorov_sf(math.sqrt(-math.log(0.0125) / 2)) == pytest.approx(0.025, abs=2e-4)
    assert st.kolmogorov_sf(1 - 1e-9) == pytest.approx(st.kolmogorov_sf(1 + 1e-9), abs=1e-7)
    assert st.kolmogorov_sf(0.3) == pytest.approx(1.0, abs=1e-4) and st.kolmogorov_sf(0) == 1.0
    assert st.kolmogorov_sf(4.0) < 1e-12


def test_matches_scipy_where_installed():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=40), rng.normal(0.5, size=55)
    d, p = st.ks_2samp(x, y)
    assert d == pytest.approx(stats.ks_2samp(x, y).statistic)
    assert p == pytest.approx(stats.kstwobign.sf(math.sqrt(40 * 55 / 95) * d), rel=1e-9)


def test_smallest_detectable_effects():
    # c(0.025) = sqrt(-ln(0.0125) / 2) = 1.4802; n = m = 50: * sqrt(100 / 2500) = 0.2960
    assert st.critical_d(50, 50) == pytest.approx(1.48021 * 0.2, abs=1e-5)
    assert st.critical_d(50, 50, 0.05) == pytest.approx(1.35810 * 0.2, abs=1e-5)
    # values 0 2 (sd^2 = 2) and 1 3 (sd^2 = 2): pooled sd sqrt(2); (2.2414 + 0.8416) * sqrt(2) * 1
    assert st.min_detectable_shift([0, 2], [1, 3]) == pytest.approx(3.0830 * math.sqrt(2), abs=1e-3)
    assert st.ALPHA == 0.025  # Bonferroni over the two statistics


# ------------------------------------------------------------------ through the mart
def test_the_same_distribution_is_not_rejected():
    rng = np.random.default_rng(7)
    base, spec = rng.normal(-60, 8, 96), rng.normal(-60, 8, 96)
    ends = [[int(e) for e in rng.integers(5, 40, 96)] for _ in range(2)]  # >= 32: censored
    ends = [[e if e < 32 else None for e in arm] for arm in ends]
    rows = by_stat(mart(two_arms(list(base), list(spec), ends)))
    assert set(rows) == {"sequence_logprob", "natural_length"}
    for r in rows.values():
        assert r["verdict"] == st.SAME and r["p_value"] >= 0.025, r
        assert (r["n_baseline"], r["n_speculative"], r["failed_baseline"]) == (96, 96, 0)
        assert r["alpha"] == 0.025 and r["min_detectable_d"] == pytest.approx(st.critical_d(96, 96))
        assert r["excluded_reason"] is None and r["method"] == st.METHOD
    assert rows["sequence_logprob"]["censored_baseline"] is None


def test_a_shifted_sequence_logprob_is_rejected_and_the_length_is_not():
    rng = np.random.default_rng(7)
    base = rng.normal(-60, 8, 96)
    rows = by_stat(mart(two_arms(list(base), list(base + 6.0), ([10] * 96, [10] * 96))))
    lp = rows["sequence_logprob"]
    assert lp["verdict"] == st.DIFFERS and lp["p_value"] < 0.025 and lp["ks_statistic"] > lp["min_detectable_d"]
    assert lp["mean_speculative"] - lp["mean_baseline"] == pytest.approx(6.0)
    assert lp["min_detectable_shift"] < 6.0  # the sample could see a shift this large
    assert rows["natural_length"]["verdict"] == st.SAME and rows["natural_length"]["ks_statistic"] == 0


def test_no_natural_end_is_censored_at_max_tokens():
    # baseline never ends within 32 tokens (NULL -> 32); speculative ends at 31 every time
    rows = by_stat(mart(two_arms([-50.0] * 24, [-50.0] * 24, (None, 31))))
    nat = rows["natural_length"]
    assert (nat["censored_baseline"], nat["censored_speculative"]) == (24, 0)
    assert (nat["mean_baseline"], nat["mean_speculative"]) == (32.0, 31.0)
    assert nat["ks_statistic"] == 1.0 and nat["verdict"] == st.DIFFERS
    # both censored: the same (censored) distribution
    both = by_stat(mart(two_arms([-50.0] * 24, [-50.0] * 24, (None, None))))["natural_length"]
    assert both["ks_statistic"] == 0 and both["verdict"] == st.SAME and both["censored_speculative"] == 24


def test_unknown_end_of_sequence_ids_exclude_the_natural_length_only():
    rows = by_stat(mart(two_arms([-50.0] * 24, [-50.0] * 24, eos=None)))
    assert rows["natural_length"]["verdict"] is None and rows["natural_length"]["p_value"] is None
    assert "end-of-sequence ids unknown" in rows["natural_length"]["excluded_reason"]
    assert rows["sequence_logprob"]["verdict"] == st.SAME


def test_failures_are_counted_and_drop_their_partner():
    recs = two_arms([-50.0] * 24, [-50.0] * 24)
    recs[-1] = check("speculative", "p3", 5, None, success=False)  # speculative sample 23 failed
    r = by_stat(mart(recs))["sequence_logprob"]
    assert (r["n_baseline"], r["n_speculative"], r["failed_baseline"], r["failed_speculative"]) == (23, 23, 0, 1)


def test_groups_by_category_and_level_and_says_why_a_group_is_not_tested():
    recs = (two_arms([-50.0] * 24, [-50.0] * 24, category="code", level=1)
            + two_arms([-50.0] * 24, [-50.0] * 24, category="code", level=4)
            + [check("baseline", "q", k, -40.0, category="chat", level=4) for k in range(24)]
            + two_arms([-50.0, -51.0], [-50.0, -52.0], category="math", level=1))
    rows = mart(recs)
    assert [(r["category"], r["concurrency"], r["statistic"]) for r in rows] == [
        (c, lv, s) for c, lv in [("chat", 4), ("code", 1), ("code", 4), ("math", 1)]
        for s in ("natural_length", "sequence_logprob")]
    chat = by_stat(rows, category="chat")["sequence_logprob"]
    assert chat["excluded_reason"] == "no speculative samples at this level" and chat["verdict"] is None
    math_ = by_stat(rows, category="math")["sequence_logprob"]  # 2 samples per arm: critical D >= 1
    assert math_["verdict"] is None and math_["p_value"] is not None
    assert "too few samples" in math_["excluded_reason"]


def test_an_empty_run_gives_an_empty_table_with_the_schema():
    con = duckdb.connect()
    con.register("_raw", table_from_records(SampleCheck, []))
    con.execute("create table raw_sample_checks as select * from _raw")
    _roles(con)
    con.execute(f"create view stg_sample_checks as\n{next(m.sql for m in discover() if m.name == 'stg_sample_checks')}")
    table = st.compute(con)
    assert table.num_rows == 0 and table.schema == st.SAMPLING_TESTS_SCHEMA


def test_staging_columns_are_the_record_fields_and_the_mart_header_names_every_column():
    con = duckdb.connect()
    con.register("_raw", table_from_records(SampleCheck, []))
    con.execute("create table raw_sample_checks as select * from _raw")
    _roles(con)
    models = {m.name: m for m in discover()}
    con.execute(f"create view stg_sample_checks as\n{models['stg_sample_checks'].sql}")
    assert ([r[0] for r in con.execute("describe stg_sample_checks").fetchall()]
            == by_role_columns(list(SampleCheck.model_fields)))
    st.create_table(con)
    con.execute(f"create view sampling as\n{models['sampling'].sql}")
    cols = [r[0] for r in con.execute("describe sampling").fetchall()]
    assert cols == st.SAMPLING_TESTS_SCHEMA.names
    header = " ".join(line for line in models["sampling"].sql.splitlines() if line.lstrip().startswith("--"))
    assert [c for c in cols if c not in header] == []


def test_report_and_summary_show_the_sampling_check_and_name_what_differs(tmp_path):
    """A run with a sampling pass: the report has its table, the summary a line
    that names the group whose distribution differs."""
    from specdec.analytics.report import write_report
    from specdec.runfolder import record_file
    from specdec.schemas.arrow import write_parquet_atomic
    from tests.analytics.conftest import write_run

    rng = np.random.default_rng(3)
    base = list(rng.normal(-40.0, 3.0, 48))
    spec = list(rng.normal(-60.0, 3.0, 48))  # a broken arm: far less likely samples
    run_dir = write_run(tmp_path)
    write_parquet_atomic(table_from_records(SampleCheck, two_arms(base, spec)),
                         run_dir / record_file("sample_checks").consolidated)
    path, summary = write_report(run_dir)
    page = path.read_text()
    assert "Lossless under sampling" in page and "Kolmogorov-Smirnov" in page
    line = next(s for s in summary.splitlines() if s.startswith("sampling"))
    assert "DIFFERS in 1 of 2 tests: chat c1 sequence_logprob" in line
