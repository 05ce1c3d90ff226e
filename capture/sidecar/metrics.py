"""The sidecar's live metrics and their Prometheus text exposition (written by
hand: format 0.0.4, no client library).

From the rows it compacts (``sidecar_lake.METRIC_COLUMNS``), labelled
``server`` and, once the server's ``/v1/models`` has named it, ``model``
(the rows themselves name neither; one sidecar watches one server):

* ``specdec_acceptance_rate``: sum(tokens_accepted) / sum(tokens_proposed)
  over the rows whose ``wall_time_ns`` lies in the last ``window_s`` seconds
  (1 s granularity; rows stamped ahead of the sidecar's clock count too);
  NaN when the window holds no verify round (not applicable, never 0).
* ``specdec_acceptance_length``: 1 + sum(tokens_accepted) / verify rounds
  (rows with tokens_proposed > 0), same window; NaN likewise.
* ``specdec_window_verify_rounds``: the verify rounds in that window.
* ``specdec_category_acceptance_rate``, ``specdec_category_acceptance_length``,
  ``specdec_category_window_verify_rounds``: the same three per request
  category, label ``category``, for the rounds whose request the sidecar's
  proxy saw (``--proxy-listen``: the category book, ``sidecar_categories``);
  one series per category with rows in the window, none without the proxy.
  Separate names, so that ``sum`` or an alert on the unlabelled gauges never
  counts a round twice.
* ``specdec_draft_ms`` / ``specdec_verify_ms``: cumulative histograms, one
  observation per engine step (distinct process_token, step_index: the
  timings are per step, repeated on each of its rows), NULL timings skipped.
  Bucket upper bounds (ms): ``BUCKETS_MS``.

The sidecar's own counters (``specdec_sidecar_*``), the engine processes'
capture counters from their status files (``specdec_capture_*``: hook
failures, rows dropped by the engine-side writer, write errors; absent until
a status file was read) and the last values read from the server's
``/metrics`` (``specdec_server_*``) are rendered too;
``METRIC_NAMES`` lists every name, for the alert rules' test.
"""

from __future__ import annotations

import math
from bisect import bisect_left

import pyarrow as pa
import pyarrow.compute as pc

from specdec.capture.categories import CategoryBook
from specdec.engines.metrics import COUNTERS, GAUGES

BUCKETS_MS = (0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0)

OWN_COUNTERS = {
    "specdec_sidecar_rows_written_total": "Round rows moved into the lake.",
    "specdec_sidecar_rows_dropped_total": "Rows in capture part files that could not be read (left in place; "
    "the rows their footer declares, each file counted once).",
    "specdec_sidecar_unreadable_files_total": "Capture part files that could not be read (left in place, counted once).",
    "specdec_sidecar_damaged_files_total": "Of the unreadable capture part files: those whose footer reads but a page "
    "fails its checksum or does not decode (left in place, never compacted).",
    "specdec_sidecar_files_compacted_total": "Capture part files moved into the lake.",
    "specdec_sidecar_compactions_total": "Compaction passes completed.",
    "specdec_sidecar_compaction_failures_total": "Part files left in place because a lake write or delete failed "
    "(retried at the next pass).",
    "specdec_sidecar_scrapes_total": "Reads of the server's /metrics.",
    "specdec_sidecar_scrape_failures_total": "Reads of the server's /metrics that failed.",
    "specdec_sidecar_counter_rows_written_total": "Counter scrape rows written to the lake.",
    "specdec_sidecar_counter_rows_dropped_total": "Counter scrape rows dropped because the lake refused writes too long.",
}
OWN_GAUGES = {
    "specdec_sidecar_last_compaction_timestamp_seconds": "Unix time of the last completed compaction pass.",
    "specdec_sidecar_last_rows_timestamp_seconds": "Unix time of the last compaction pass that moved rows (0: none yet).",
    "specdec_sidecar_unreadable_files": "Unreadable capture part files left in the capture folder now.",
    "specdec_sidecar_counter_rows_pending": "Counter scrape rows waiting to be written to the lake.",
}
#: From the capturing engine processes' status files (``capture.writer``), summed
#: over every process that ever wrote one into the capture folder.
CAPTURE_COUNTERS = {
    "hook_failures": (
        "specdec_capture_hook_failures_total",
        "Capture hook calls that failed inside the engine (logged once per process, never raised into vLLM).",
    ),
    "rows_dropped": (
        "specdec_capture_engine_rows_dropped_total",
        "Round rows the engine-side writer dropped because its memory bound was full (disk refusing writes).",
    ),
    "write_errors": (
        "specdec_capture_write_errors_total",
        "Failed part-file writes inside the engine (the rows are kept and retried).",
    ),
    "rows_written": (
        "specdec_capture_engine_rows_written_total",
        "Round rows the engine processes wrote to part files.",
    ),
}
CAPTURE_GAUGES = {
    "rows_pending": ("specdec_capture_rows_pending", "Round rows held in engine memory, not yet in a part file."),
    "processes": ("specdec_capture_processes", "Engine processes that wrote a capture status file."),
    "unreadable": ("specdec_capture_status_unreadable", "Capture status files that could not be read."),
}
SERVER_COUNTERS = {key: f"specdec_server_{key}_total" for key in COUNTERS}
SERVER_GAUGES = {key: f"specdec_server_{key}" for key in GAUGES}
WINDOW_GAUGES = ("specdec_acceptance_rate", "specdec_acceptance_length", "specdec_window_verify_rounds")
CATEGORY_GAUGES = (
    "specdec_category_acceptance_rate",
    "specdec_category_acceptance_length",
    "specdec_category_window_verify_rounds",
)
HISTOGRAMS = {"draft_ms": "specdec_draft_ms", "verify_ms": "specdec_verify_ms"}

METRIC_NAMES = frozenset(
    [
        *OWN_COUNTERS,
        *OWN_GAUGES,
        *(n for n, _ in CAPTURE_COUNTERS.values()),
        *(n for n, _ in CAPTURE_GAUGES.values()),
        *SERVER_COUNTERS.values(),
        *SERVER_GAUGES.values(),
        *WINDOW_GAUGES,
        *CATEGORY_GAUGES,
        *(f"{h}_{s}" for h in HISTOGRAMS.values() for s in ("bucket", "sum", "count")),
    ]
)


class Histogram:
    def __init__(self, bounds: tuple[float, ...] = BUCKETS_MS):
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # per bucket, not cumulative; last: above every bound
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1  # first bound >= value: Prometheus "le"
        self.sum += value
        self.count += 1

    def cumulative(self) -> list[tuple[str, int]]:
        out, total = [], 0
        for bound, n in zip([*map(_num, self.bounds), "+Inf"], self.counts):
            total += n
            out.append((bound, total))
        return out


class LiveMetrics:
    """Rolling window, histograms and counters; updated and rendered on the event loop."""

    def __init__(self, server: str, window_s: float, book: CategoryBook | None = None):
        self.server = server
        self.window_ns = int(window_s * 1e9)
        self.seconds: dict[int, list[int]] = {}  # wall second -> [proposed, accepted, verify rounds]
        self.book = book  # reply id -> category, filled by the proxy; None: no per-category gauges
        self.by_category: dict[str, dict[int, list[int]]] = {}  # category -> as seconds
        self.hist = {col: Histogram() for col in HISTOGRAMS}
        self.counters = dict.fromkeys(OWN_COUNTERS, 0)
        self.gauges = dict.fromkeys(OWN_GAUGES, 0.0)
        self.server_values: dict[str, float | None] = {}
        self.model: str | None = None  # the server's model (/v1/models), a label once known
        self.capture: dict[str, int] = {}  # CAPTURE_COUNTERS / CAPTURE_GAUGES keys -> value; empty: no status read yet

    def observe_rounds(self, table: pa.Table) -> None:
        """Add compacted rows (``sidecar_lake.METRIC_COLUMNS``) to the window and histograms."""
        if table.num_rows == 0:
            return
        sec = pc.divide(table["wall_time_ns"], pa.scalar(10**9, pa.int64()))
        verify = pc.cast(pc.greater(table["tokens_proposed"], 0), pa.int64())
        rows = pa.table({"sec": sec, "p": table["tokens_proposed"], "a": table["tokens_accepted"], "v": verify})
        _add(self.seconds, rows)
        if self.book is not None and len(self.book):
            ids = pc.unique(table["engine_request_id"])
            labels = pa.array([self.book.category_of(i) for i in ids.to_pylist()], pa.string())
            cat = pc.take(labels, pc.index_in(table["engine_request_id"], value_set=ids))
            for category in pc.unique(cat.drop_null()).to_pylist():
                _add(self.by_category.setdefault(category, {}), rows.filter(pc.equal(cat, category)))
        steps = table.group_by(["process_token", "step_index"]).aggregate([(col, "max") for col in HISTOGRAMS])
        for col, hist in self.hist.items():
            for value in steps[f"{col}_max"].to_pylist():
                if value is not None:
                    hist.observe(value)

    def window(self, now_ns: int) -> tuple[float, float, int]:
        """(acceptance rate, mean acceptance length, verify rounds) over the window ending now."""
        return _window(self.seconds, (now_ns - self.window_ns) // 10**9)

    def category_windows(self, now_ns: int) -> dict[str, tuple[float, float, int]]:
        """As ``window``, per category with rows in the window (sorted by name)."""
        first = (now_ns - self.window_ns) // 10**9
        out = {}
        for category in sorted(self.by_category):
            slots = self.by_category[category]
            figures = _window(slots, first)
            if slots:
                out[category] = figures
            else:
                del self.by_category[category]
        return out

    def render(self, now_ns: int) -> str:
        lab = f'server="{_escape(self.server)}"'
        win_lab = lab if self.model is None else f'{lab},model="{_escape(self.model)}"'
        rate, length, rounds = self.window(now_ns)
        win = f"{self.window_ns / 1e9:g} s"
        lines: list[str] = []
        _metric(
            lines,
            "specdec_acceptance_rate",
            "gauge",
            f"Accepted / proposed draft tokens of the rounds captured in the last {win}; NaN: no verify round.",
            [(win_lab, rate)],
        )
        _metric(
            lines,
            "specdec_acceptance_length",
            "gauge",
            f"1 + accepted tokens / verify rounds over the last {win}; NaN: no verify round.",
            [(win_lab, length)],
        )
        _metric(
            lines,
            "specdec_window_verify_rounds",
            "gauge",
            f"Verify rounds (tokens_proposed > 0) captured in the last {win}.",
            [(win_lab, rounds)],
        )
        per_cat = self.category_windows(now_ns)
        if per_cat:
            cat_labs = {c: f'{win_lab},category="{_escape(c)}"' for c in per_cat}
            for j, (name, help_) in enumerate(
                (
                    (
                        "specdec_category_acceptance_rate",
                        f"As specdec_acceptance_rate, per request category (the sidecar proxy's), over the last {win}.",
                    ),
                    (
                        "specdec_category_acceptance_length",
                        f"As specdec_acceptance_length, per request category, over the last {win}.",
                    ),
                    ("specdec_category_window_verify_rounds", f"Verify rounds per request category in the last {win}."),
                )
            ):
                _metric(lines, name, "gauge", help_, [(cat_labs[c], f[j]) for c, f in per_cat.items()])
        for col, name in HISTOGRAMS.items():
            hist = self.hist[col]
            lines.append(f"# HELP {name} Per engine step {col.replace('_ms', '')} time of the compacted rounds [ms].")
            lines.append(f"# TYPE {name} histogram")
            lines += [f'{name}_bucket{{{win_lab},le="{le}"}} {n}' for le, n in hist.cumulative()]
            lines += [f"{name}_sum{{{win_lab}}} {_num(hist.sum)}", f"{name}_count{{{win_lab}}} {hist.count}"]
        for name, help_ in OWN_COUNTERS.items():
            _metric(lines, name, "counter", help_, [("", self.counters[name])])
        for name, help_ in OWN_GAUGES.items():
            _metric(lines, name, "gauge", help_, [("", self.gauges[name])])
        if self.capture:
            for kind, captured in (("counter", CAPTURE_COUNTERS), ("gauge", CAPTURE_GAUGES)):
                for key, (name, help_) in captured.items():
                    _metric(lines, name, kind, help_, [("", self.capture.get(key, 0))])
        for kind, names in (("counter", SERVER_COUNTERS), ("gauge", SERVER_GAUGES)):
            for key, name in names.items():
                value = self.server_values.get(key)
                if value is not None:
                    _metric(
                        lines,
                        name,
                        kind,
                        f"Last value of the server's {COUNTERS.get(key) or GAUGES[key][0]} read by the sidecar.",
                        [(lab, value)],
                    )
        return "\n".join(lines) + "\n"


def _add(slots: dict[int, list[int]], rows: pa.Table) -> None:
    """Add the rows' proposed, accepted and verify-round sums (p, a, v) to their wall
    second's (sec) slot."""
    per_sec = rows.group_by("sec").aggregate([("p", "sum"), ("a", "sum"), ("v", "sum")])
    for s, p, a, v in zip(*(per_sec[c].to_pylist() for c in ("sec", "p_sum", "a_sum", "v_sum"))):
        slot = slots.setdefault(s, [0, 0, 0])
        slot[0] += p
        slot[1] += a
        slot[2] += v


def _window(slots: dict[int, list[int]], first: int) -> tuple[float, float, int]:
    """Drop the slots before wall second ``first``; (rate, length, verify rounds) of the rest."""
    for s in [s for s in slots if s < first]:
        del slots[s]
    p = a = v = 0
    for sp, sa, sv in slots.values():
        p, a, v = p + sp, a + sa, v + sv
    return (a / p if p else math.nan), (1 + a / v if v else math.nan), v


def _metric(lines: list[str], name: str, kind: str, help_: str, samples: list[tuple[str, float]]) -> None:
    lines.append(f"# HELP {name} {help_}")
    lines.append(f"# TYPE {name} {kind}")
    lines += [f"{name}{{{labels}}} {_num(v)}" if labels else f"{name} {_num(v)}" for labels, v in samples]


def _num(value: float) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "+Inf" if value > 0 else "-Inf"
        return repr(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)
    return str(value)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
