"""The report model: everything the HTML report and the terminal summary show,
read from the marts of ``specdec.duckdb`` once (manifest included, from
``raw_manifest``), then rendered by ``report.render_html`` and
``summary.summary_text``. The notices at the top of both (failed levels, an
unfinished run, a run where every request failed, no captured rounds) and the
verdict in words (``verdict.py``, from the speedup, knee and lossless marts)
are worded here, once, so the two renderings cannot disagree.

The ``lossless`` and ``lossless_divergences`` marts are read when the
database has them (``None`` otherwise), so a run built without the lossless
lossless pass still reports.

A report is of one run. ``load_report`` reads the database's only run, or the
run it is given (``run_id``); a database of many runs without a ``run_id`` is
refused with a message naming them (``report_run``). The rows of that run are
read and the ``run_id`` column left out, so the model, and what the report
shows, is the same as for a one-run database.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Literal

from specdec.analytics.build import manifest_of, runs_of
from specdec.analytics.report.verdict import Sentence, verdict
from specdec.analytics.sql_models import has_view
from specdec.errors import SpecdecError
from specdec.levels import name_of, names_from_load
from specdec.schemas.records import RunManifest

LEVEL_COLUMNS = (
    "arm",
    "level",
    "repeats",
    "requests",
    "requests_failed",
    "error_rate",
    "error_types",
    "http_statuses",
    "level_failed",
    "error_example",
)


@dataclass(frozen=True)
class Table:
    """Rows of one mart, as read."""

    columns: tuple[str, ...]
    rows: tuple[tuple, ...]

    def dicts(self) -> list[dict]:
        return [dict(zip(self.columns, r)) for r in self.rows]

    def pick(self, *columns: str) -> Table:
        idx = [self.columns.index(c) for c in columns]
        return Table(tuple(columns), tuple(tuple(r[i] for i in idx) for r in self.rows))


@dataclass(frozen=True)
class Notice:
    kind: Literal["alarm", "warn"]  # alarm: the run failed or is incomplete; warn: read with care
    text: str


@dataclass(frozen=True)
class ReportData:
    manifest: RunManifest
    kind: str  # run kind: replay | stability
    levels: Table  # level_health
    speedup: Table  # every column of the speedup mart
    knee: Table
    acceptance: Table  # speculative arm
    latency: Table
    throughput: Table
    blocks: Table  # block_throughput: per arm, level and repeat, prefix cache included
    step_timing: Table
    output_equality: Table
    reconciliation: Table
    stability: Table | None  # None when the run has no stability mart or no rows
    lossless: Table | None  # None when the database has no lossless mart
    lossless_divergences: Table | None  # None when the database has no lossless_divergences mart
    sampling: Table | None  # the sampling-mode tests; None when the run has none
    speedup_natural_end: Table | None  # speedup before/after the natural end; None when the run has no such rows
    requests_total: int
    requests_failed: int
    errors: str | None  # run-wide 'type: n; ...' over failed requests
    rounds_captured: int  # captured rows attributed to this run's requests
    capture_note: str | None  # set when no rounds were captured for the run
    notices: tuple[Notice, ...] = field(default=())
    verdict: tuple[Sentence, ...] = field(default=())
    speedup_weighted: Table | None = None  # mart speedup_weighted; None when the database has no such rows
    capacity: Table | None = None  # mart capacity_under_slo: highest concurrency per arm under the analysis's SLO
    acceptance_positions: Table | None = None  # per-position acceptance and first rejection (speculative arm)
    acceptance_positions_engine: Table | None = None  # per position from the engine's counter, per level
    acceptance_by_context: Table | None = None  # acceptance by context-length bucket (speculative arm)
    acceptance_requests: Table | None = None  # acceptance from the engine's per-request stats (speculative arm)
    acceptance_definitions: Table | None = None  # the field's definitions side by side (speculative arm)
    by_input_length: Table | None = None  # mart speedup_by_input_length
    resource_cost: Table | None = None  # mart resource_cost: memory and KV cache per arm and level
    latency_cdf: Table | None = None  # per arm and level: e2e and TTFT at each percentile 1..99 (the CDF chart)
    comparison: tuple[str, str] | None = None  # (treatment, reference) arm names of a run of named arms
    compat: Table | None = None  # mart compatibility (a `specdec compat` run); None when the run has no cells

    @property
    def arm_difference(self) -> list[str]:
        """What this run's arms differ in: the manifest's lines, or, for one comparison of a
        run of named arms, that comparison's lines without their prefix."""
        if self.comparison is None:
            return list(self.manifest.arm_difference)
        prefix = f"{self.comparison[0]} vs {self.comparison[1]}: "
        return [d[len(prefix) :] for d in self.manifest.arm_difference if d.startswith(prefix)]

    @property
    def has_replay(self) -> bool:
        """False for a run of another kind (stability) that sent no replay traffic:
        the replay sections are then left out rather than shown empty."""
        return self.kind == "replay" or self.requests_total > 0

    @cached_property
    def level_names(self) -> dict[int, str]:
        """Level key -> name for open-loop runs ('0.5 req/s', 'time x0.25'),
        from the manifest's schedule; empty in closed loop (names are c<key>)."""
        schedule = self.manifest.schedule if self.manifest is not None else None
        return names_from_load((schedule or {}).get("load"))

    def level(self, key: int) -> str:
        """The name of level ``key`` for a reader (``specdec.levels``)."""
        return name_of(key, self.level_names)

    @property
    def failed_levels(self) -> list[dict]:
        return [r for r in self.levels.dicts() if r["level_failed"]]

    def chart_speedup(self) -> list[dict]:
        """Speedup and its measurement interval (None when there is none)."""
        return [
            {k: r[k] for k in ("category", "level", "speedup", "ci_low", "ci_high", "label", "pairs")}
            for r in self.speedup.dicts()
            if r["speedup"] is not None
        ]

    def chart_throughput(self) -> list[dict]:
        return [
            {"arm": r["arm"], "level": r["level"], "output_tokens_per_s": r["output_tokens_per_s"]}
            for r in self.throughput.dicts()
            if r["output_tokens_per_s"] is not None
        ]


class _Marts:
    """Reads the marts of one run of a database: rows of other runs are left
    out and the run_id column dropped, so the report model is the same for a
    one-run database and for one run of many (a relation without run_id, e.g.
    a view a test put in place, is read whole)."""

    def __init__(self, con, run_id: str):
        self.con, self.run_id = con, run_id

    def table(self, sql: str) -> Table:
        cur = self.con.execute(sql)
        columns = tuple(d[0] for d in cur.description)
        rows = cur.fetchall()
        if "run_id" not in columns:
            return Table(columns, tuple(tuple(r) for r in rows))
        i = columns.index("run_id")
        return Table(
            columns[:i] + columns[i + 1 :], tuple(tuple(r[:i]) + tuple(r[i + 1 :]) for r in rows if r[i] == self.run_id)
        )

    def view(self, name: str) -> Table | None:
        return self.table(f"select * from {name}") if has_view(self.con, name) else None

    def where(self, name: str, condition: str) -> Table | None:
        return self.table(f"select * from {name} where {condition}") if has_view(self.con, name) else None

    def value(self, sql: str):
        """One value of a query over this run's rows (``$run_id`` in ``sql``)."""
        return self.con.execute(sql, {"run_id": self.run_id}).fetchone()


def _latency_cdf(m: _Marts) -> Table | None:
    """Per arm and level, e2e and TTFT at the percentiles 1..99 of the successful
    requests (quantile_cont): a CDF of 99 points whatever the run's size."""
    if not has_view(m.con, "int_requests_measured"):
        return None
    return m.table("""
        with q as (
            select run_id, arm, level,
                   quantile_cont(e2e_ms, [i / 100 for i in range(1, 100)]) as e2e,
                   quantile_cont(ttft_ms, [i / 100 for i in range(1, 100)]) as ttft
            from int_requests_measured group by all
        )
        select run_id, arm, level, unnest(range(1, 100)) / 100 as share, unnest(e2e) as e2e_ms,
               unnest(ttft) as ttft_ms
        from q order by arm, level, share""")


def report_run(con, run_id: str | None = None) -> str:
    """The run a report shows: ``run_id``, or the database's only run. A
    database of many runs is refused, naming them: the report is of one run."""
    runs = runs_of(con)
    if run_id is None:
        if len(runs) != 1:
            listed = ", ".join(runs) or "none"
            raise SpecdecError(
                f"the database holds {len(runs)} runs ({listed}); a report shows one run: "
                "report a run folder on its own (specdec report RUNS/<run>)"
            )
        run_id = runs[0]
    elif run_id not in runs:
        raise SpecdecError(f"no run {run_id!r} in this database (it holds: {', '.join(runs) or 'none'})")
    return run_id


def _nonempty(t: Table | None) -> Table | None:
    return t if t is not None and t.rows else None


def capture_source(manifest: RunManifest) -> str:
    """'source: X; path: Y' (or reason) from manifest.capture, for messages."""
    cap = dict(manifest.capture or {})
    if not cap:
        return "capture source: not recorded"
    parts = [f"capture source: {cap.pop('source', 'not recorded')}"]
    parts += [f"{k}: {v}" for k, v in cap.items()]
    return "; ".join(parts)


def load_report(con, run_id: str | None = None) -> ReportData:
    """Read every mart the report shows, once, for one run (``report_run``)."""
    run_id = report_run(con, run_id)
    m = _Marts(con, run_id)
    manifest = manifest_of(con, run_id)
    if manifest is None:
        raise SpecdecError(f"run {run_id!r} has no manifest (only the lake holds it): the report needs a run folder")
    kind = getattr(manifest, "kind", None) or "replay"
    total, failed, n_rounds = m.value(
        "select (select count(*) from stg_requests where run_id = $run_id),"
        " (select count(*) filter (where not success) from stg_requests where run_id = $run_id),"
        " (select coalesce(sum(rounds), 0) from int_round_counts where run_id = $run_id)"
    )
    errors = m.value(
        "select string_agg(t || ': ' || n, '; ' order by n desc, t) from "
        "(select coalesce(error_type, '(untyped)') t, count(*) n from stg_requests"
        " where run_id = $run_id and not success group by 1)"
    )[0]
    statuses = m.value(
        "select string_agg('HTTP ' || s || ': ' || n, '; ' order by n desc, s) from "
        "(select http_status s, count(*) n from stg_requests"
        " where run_id = $run_id and not success and http_status is not null group by 1)"
    )[0]
    if errors and statuses:
        errors += f" ({statuses})"
    stability = None
    if has_view(con, "stability"):
        st = m.table("select * from stability")
        stability = st if st.rows else None
    capture_note = None
    without = set((manifest.capture or {}).get("arms_without_rounds") or ())
    reference, treatment = m.value("select reference_arm, treatment_arm from stg_manifest where run_id = $run_id")
    if n_rounds == 0 and total and treatment and {reference, treatment} <= without:
        capture_note = (
            f"No rounds for this comparison: its arms ({reference}, {treatment}) run an engine without "
            "the capture plugin (llama.cpp), so acceptance by round, draft position and context, and "
            "engine step timing are empty, and the reconciliation diffs below compare nothing. "
            "Acceptance from the engine's per-request stats is in acceptance_requests, and per draft "
            "position from its counter in acceptance_positions_engine."
        )
    elif n_rounds == 0 and total:
        capture_note = (
            f"No rounds were captured ({capture_source(manifest)}; see manifest.capture): "
            "no per-round data for this run, so acceptance by round, draft position and context, "
            "and engine step timing are empty, and the reconciliation diffs below compare nothing. "
            "Acceptance from the engine's per-request stats, where it reports them, is in "
            "acceptance_requests, and per draft position from its counter in "
            "acceptance_positions_engine."
        )
    data = ReportData(
        manifest=manifest,
        kind=kind,
        comparison=(treatment, reference) if treatment else None,
        levels=m.table(f"select run_id, {', '.join(LEVEL_COLUMNS)} from level_health"),
        speedup=m.table("select * from speedup"),
        knee=m.table("select * from knee"),
        acceptance=m.table("select * from acceptance where arm = 'speculative'"),
        latency=m.table("""select run_id, arm, category, level, requests_ok, requests_failed,
            ttft_ms_p50, ttft_ms_p95, ttft_ms_p99, tpot_ms_p50, tpot_ms_p95, tpot_ms_p99,
            itl_chunk_gap_ms_p50, itl_chunk_gap_ms_p99, output_tokens_per_s_mean from latency"""),
        throughput=m.table("select * from throughput"),
        blocks=m.table("select * from block_throughput"),
        step_timing=m.table("select * from step_timing"),
        output_equality=m.table("select * from output_equality"),
        reconciliation=m.table("select * from reconciliation"),
        stability=stability,
        lossless=m.view("lossless"),
        lossless_divergences=m.view("lossless_divergences"),
        sampling=_nonempty(m.view("sampling")),
        speedup_natural_end=_nonempty(m.view("speedup_natural_end")),
        compat=_nonempty(m.view("compatibility")),
        speedup_weighted=_nonempty(m.view("speedup_weighted")),
        capacity=_nonempty(m.view("capacity_under_slo")),
        acceptance_positions=_nonempty(m.where("acceptance_positions", "arm = 'speculative'")),
        acceptance_positions_engine=_nonempty(m.where("acceptance_positions_engine", "arm = 'speculative'")),
        acceptance_by_context=_nonempty(m.where("acceptance_by_context", "arm = 'speculative'")),
        acceptance_definitions=_nonempty(m.where("acceptance_definitions", "arm = 'speculative'")),
        acceptance_requests=_nonempty(m.where("acceptance_requests", "arm = 'speculative'")),
        by_input_length=_nonempty(m.view("speedup_by_input_length")),
        resource_cost=_nonempty(m.view("resource_cost")),
        latency_cdf=_nonempty(_latency_cdf(m)),
        requests_total=total,
        requests_failed=failed,
        errors=errors,
        rounds_captured=n_rounds,
        capture_note=capture_note,
    )
    first_error = m.value(
        "select arg_min(error_message, wall_send_ns) from stg_requests where run_id = $run_id and not success"
    )[0]

    if data.has_replay:
        data = replace(
            data,
            verdict=verdict(
                data.speedup.dicts(),
                data.knee.dicts(),
                data.lossless.dicts() if data.lossless is not None else None,
                manifest.dtype,
                data.level_names,
            ),
        )
    return _with_notices(data, first_error)


def _level_name(r: dict, names: dict[int, str] | None = None) -> str:
    return f"{r['arm']} {name_of(r['level'], names)}"


def _with_notices(data: ReportData, first_error: str | None) -> ReportData:
    out: list[Notice] = []
    m = data.manifest
    if not m.finished:
        out.append(
            Notice(
                "alarm",
                "Run not finished (manifest.finished is false): it was interrupted or is "
                "still running; the figures below cover only what was recorded.",
            )
        )
    if data.kind == "replay" and data.requests_total == 0:
        out.append(Notice("alarm", "No requests were recorded in this run: there is nothing to measure."))
    elif data.requests_total and data.requests_failed == data.requests_total:
        text = (
            f"Every request failed ({data.requests_failed} of {data.requests_total}): no latency, "
            f"throughput, speedup or lossless figure can be computed. Errors: {data.errors}."
        )
        if first_error:
            text += f" First error: {first_error}"
        out.append(Notice("alarm", text))
    failed = data.failed_levels
    if failed:
        listed = ", ".join(
            f"{_level_name(r, data.level_names)} ({r['requests_failed']}/{r['requests']} failed: {r['error_types']})"
            for r in failed
        )
        out.append(
            Notice(
                "alarm",
                f"{len(failed)} level(s) failed (error rate above max_error_rate "
                f"{m.max_error_rate:g}): {listed}; no speedup or lossless figure computed "
                "from them.",
            )
        )
    elif data.requests_failed and data.requests_failed < data.requests_total:
        out.append(
            Notice(
                "warn",
                f"{data.requests_failed} of {data.requests_total} requests failed ({data.errors}), "
                f"within max_error_rate {m.max_error_rate:g}; figures use successful requests only.",
            )
        )
    if data.capture_note:
        out.append(Notice("warn", data.capture_note))
    return replace(data, notices=tuple(out))
