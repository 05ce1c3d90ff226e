"""Data contracts on a run folder or a traffic file (``specdec validate``),
checked with great-expectations.

A run folder is read exactly as ``specdec analytics build`` reads it: every
record file of ``runfolder.RECORD_FILES`` through ``build.load_record_file``
(consolidated file or part files; a broken file is a named InputFileError) and
the manifest through ``runfolder.read_manifest``. Suites:

  rounds           tokens_accepted <= tokens_proposed; tokens_proposed,
                   tokens_accepted, tokens_emitted, batch_size, context_len
                   >= 0; draft_ms, verify_ms >= 0 where not null; round_index
                   contiguous from 0 per (process_token, engine_request_id)
  requests         on success rows: e2e_ms present, e2e_ms >= ttft_ms >= 0;
                   output_tokens >= 0; category in the manifest's
                   ``traffic.categories`` (when the manifest declares them);
                   success rows have no error_type, failed rows have one
  every file with  category is a label as the traffic schema defines it
  a category       (``schemas.strict.Label``: not empty, no surrounding
                   whitespace, no control characters such as ESC): requests,
                   greedy_checks, sample_checks
  engine_counters  every counter >= 0; accepted draft tokens <= draft tokens
  every file       run_id equals the manifest's run_id (one run per folder)

A traffic file (.jsonl/.ndjson/.parquet) is parsed with the traffic loader's
own readers (``specdec.traffic``), but its rows are *not* refused one by one as
``load_traffic`` does: the suite lists every offending row instead. It checks
max_tokens present and > 0, temperature within 0..2, category present and
non-empty, prompt_id unique, and ``row_schema``: the row validates as a
TrafficRow (which is everything ``load_traffic`` checks per row).

Column-level checks are great-expectations Expectations run on a pandas batch
of an ephemeral context (nothing written to disk, progress bars off). GE has no
expectation for "contiguous within a group", nor for "a row validates against a
pydantic model": those are computed first as a boolean column (round indexes
with DuckDB window counts: a request's rows are contiguous from 0 exactly when
every index is unique in the request and below the request's row count), and
an Expectation then asks that column to be all true.

One ``ContractResult`` per expectation: suite, short name, columns, success,
unexpected_count, and up to 5 offending rows, each with its file, its row in
that file (``row_base``: a run folder's Parquet rows count from 0, as in
build's errors; a traffic file's from 1, as in load_traffic's errors: in JSON
Lines the line number) and the values. great_expectations is imported inside
the functions, so no other command pays for it.
"""

from __future__ import annotations

import bisect
import logging
import math
import os
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from specdec.analytics.build import load_record_file, run_kind
from specdec.engines.metrics import COUNTERS as ENGINE_COUNTERS
from specdec.errors import InputFileError, SpecdecError
from specdec.runfolder import RECORD_FILES, files_of, read_manifest
from specdec.schemas.records import TrafficRow
from specdec.schemas.strict import Label
from specdec.traffic import raw

MAX_EXAMPLES = 5
TRAFFIC_SUFFIXES = (".jsonl", ".ndjson", ".parquet")


@dataclass(frozen=True)
class Check:
    """One expectation: its short name, the GE class and arguments, the row
    condition (column, value) it applies under, and the fields it names."""

    name: str
    kind: str  # a class of great_expectations.expectations
    args: dict
    when: tuple[str, Any] | None = None
    fields: tuple[str, ...] = ()

    def columns(self) -> list[str]:
        if self.fields:
            return list(self.fields)
        return [self.args[k] for k in ("column", "column_A", "column_B") if k in self.args]


@dataclass
class ContractResult:
    """The outcome of one expectation on one record file (or traffic file)."""

    suite: str
    expectation: str
    columns: list[str]
    success: bool
    unexpected_count: int
    rows_checked: int
    examples: list[dict] = field(default_factory=list)  # {file, row, values}
    error: str | None = None  # the check itself failed to run
    row_base: int = 0  # examples' rows count from this: 0 in run-folder Parquet, 1 in a traffic file

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Frame:
    """A pandas frame to check, and where each of its rows came from."""

    suite: str
    df: Any
    where: Callable[[int], tuple[str, int]]  # frame index -> (file, row in that file)
    keys: tuple[str, ...] = ()  # columns shown with every example
    row_base: int = 0  # 0: Parquet row index (as build's errors); 1: load_traffic's row numbers


# ------------------------------------------------------------------ suites
def _between(name, column, lo=0, hi=None, **kw) -> Check:
    args = {"column": column, "min_value": lo, **({"max_value": hi} if hi is not None else {}), **kw}
    return Check(name, "ExpectColumnValuesToBeBetween", args)


def _all_true(name, column, fields) -> Check:
    return Check(name, "ExpectColumnValuesToBeInSet", {"column": column, "value_set": [True]}, fields=fields)


def _run_id(run_id: str) -> Check:
    return Check(
        "run_id_is_manifest_run_id", "ExpectColumnValuesToBeInSet", {"column": "run_id", "value_set": [run_id]}
    )


def rounds_checks(run_id: str) -> list[Check]:
    return [
        Check(
            "accepted_le_proposed",
            "ExpectColumnPairValuesAToBeGreaterThanB",
            {"column_A": "tokens_proposed", "column_B": "tokens_accepted", "or_equal": True},
        ),
        *[
            _between(f"{c}_non_negative", c)
            for c in (
                "tokens_proposed",
                "tokens_accepted",
                "tokens_emitted",
                "batch_size",
                "context_len",
                "draft_ms",
                "verify_ms",
            )
        ],
        _all_true("round_index_contiguous", "_round_index_contiguous", ("round_index",)),
        _run_id(run_id),
    ]


def requests_checks(run_id: str, categories: list[str] | None) -> list[Check]:
    out = [
        Check("e2e_present_on_success", "ExpectColumnValuesToNotBeNull", {"column": "e2e_ms"}, when=("success", True)),
        Check(
            "e2e_ge_ttft_on_success",
            "ExpectColumnPairValuesAToBeGreaterThanB",
            {"column_A": "e2e_ms", "column_B": "ttft_ms", "or_equal": True, "ignore_row_if": "either_value_is_missing"},
            when=("success", True),
        ),
        Check(
            "ttft_non_negative_on_success",
            "ExpectColumnValuesToBeBetween",
            {"column": "ttft_ms", "min_value": 0},
            when=("success", True),
        ),
        _between("output_tokens_non_negative", "output_tokens"),
        Check(
            "success_has_no_error_type", "ExpectColumnValuesToBeNull", {"column": "error_type"}, when=("success", True)
        ),
        Check(
            "failure_has_error_type", "ExpectColumnValuesToNotBeNull", {"column": "error_type"}, when=("success", False)
        ),
        _run_id(run_id),
    ]
    if categories is not None:
        out.append(
            Check(
                "category_declared",
                "ExpectColumnValuesToBeInSet",
                {"column": "category", "value_set": sorted(categories)},
            )
        )
    return out


#: The check every record file with a category column gets (``_with_label_check``).
CATEGORY_IS_LABEL = _all_true("category_is_label", "_category_is_label", ("category",))
#: Record files whose rows carry the traffic row's category.
CATEGORY_RECORDS = ("requests", "greedy_checks", "sample_checks")

COUNTERS = tuple(ENGINE_COUNTERS)  # the MetricSnapshot columns replay fills from /metrics


def counters_checks(run_id: str) -> list[Check]:
    return [
        *[_between(f"{c}_non_negative", c) for c in COUNTERS],
        Check(
            "accepted_le_draft_tokens",
            "ExpectColumnPairValuesAToBeGreaterThanB",
            {
                "column_A": "spec_num_draft_tokens",
                "column_B": "spec_num_accepted_tokens",
                "or_equal": True,
                "ignore_row_if": "either_value_is_missing",
            },
        ),
        _run_id(run_id),
    ]


TRAFFIC_CHECKS = [
    Check("max_tokens_present", "ExpectColumnValuesToNotBeNull", {"column": "max_tokens"}),
    _between("max_tokens_positive", "max_tokens", strict_min=True),
    _between("temperature_0_to_2", "temperature", 0, 2),
    Check("category_present", "ExpectColumnValuesToNotBeNull", {"column": "category"}),
    Check("category_non_empty", "ExpectColumnValueLengthsToBeBetween", {"column": "category", "min_value": 1}),
    Check("prompt_id_unique", "ExpectColumnValuesToBeUnique", {"column": "prompt_id"}),
    _all_true("row_schema", "_row_valid", ("problem",)),
]

KEYS = {
    "rounds": ("process_token", "engine_request_id", "round_index"),
    "requests": ("request_id", "success"),
    "engine_counters": ("arm", "level", "repeat", "position"),
    "traffic": ("prompt_id",),
}


def declared_categories(manifest) -> list[str] | None:
    """The manifest's ``traffic.categories`` (a list, or the {category: rows}
    map ``Traffic.summary`` writes); None when not declared."""
    cats = (manifest.traffic or {}).get("categories")
    return [str(c) for c in cats] if isinstance(cats, (dict, list)) else None


# ------------------------------------------------------------------ inputs
def _record_frame(rec, files: list[Path], table, keys: tuple[str, ...]) -> Frame:
    """The table (read from ``files``, in order) as pandas, with each row
    traced to its file and row (from 0)."""
    import pyarrow.parquet as pq  # heavy: pyarrow, imported only when used

    starts, total = [], 0
    for f in files:
        starts.append(total)
        total += pq.ParquetFile(f).metadata.num_rows

    def where(i: int) -> tuple[str, int]:
        k = bisect.bisect_right(starts, i) - 1
        return str(files[k]), i - starts[k]

    return Frame(rec.name, table.to_pandas().reset_index(drop=True), where, keys)


def _rounds_table(table):
    """Rounds with ``_round_index_contiguous``: per (process_token,
    engine_request_id), the index is unique and below the request's row count."""
    import duckdb  # heavy: duckdb, imported only when used
    import pyarrow as pa  # heavy: pyarrow, imported only when used

    cols = [
        "run_id",
        "process_token",
        "engine_request_id",
        "round_index",
        "tokens_proposed",
        "tokens_accepted",
        "tokens_emitted",
        "batch_size",
        "context_len",
        "draft_ms",
        "verify_ms",
    ]
    t = table.select(cols).append_column("_row", pa.array(range(table.num_rows), pa.int64()))
    con = duckdb.connect()
    try:
        con.register("t", t)
        out = con.sql("""
            select *,
                   round_index >= 0
                   and round_index < count(*) over (partition by process_token, engine_request_id)
                   and count(*) over (partition by process_token, engine_request_id, round_index) = 1
                   as _round_index_contiguous
            from t order by _row""").to_arrow_table()
        return out.drop_columns(["_row"])
    finally:
        con.close()


def _with_label_check(table):
    """``table`` with ``_category_is_label``: whether its category validates as a
    ``Label``, the traffic schema's own type (each distinct value checked once)."""
    import pyarrow as pa  # heavy: pyarrow, imported only when used

    adapter, ok = TypeAdapter(Label), {}
    for value in table["category"].unique().to_pylist():
        try:
            adapter.validate_python(value)
            ok[value] = True
        except ValidationError:
            ok[value] = False
    flags = [ok[v] for v in table["category"].to_pylist()]
    return table.append_column("_category_is_label", pa.array(flags, pa.bool_()))


def run_frames(run_dir: Path) -> list[tuple[Frame, list[Check]]]:
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise SpecdecError(f"{run_dir}: no such run folder")
    manifest = read_manifest(run_dir)
    kind, run_id = run_kind(manifest), manifest.run_id
    out = []
    for rec in RECORD_FILES:
        files = files_of(run_dir, rec)  # listed once: the rows are traced to the files they were read from
        table = load_record_file(run_dir, rec, kind, files)
        if not files:
            continue  # the run has no such record (an optional one)
        if rec.name == "rounds":
            table, checks = _rounds_table(table), rounds_checks(run_id)
        elif rec.name == "requests":
            checks = requests_checks(run_id, declared_categories(manifest))
            table = table.select(
                ["run_id", "request_id", "category", "success", "error_type", "ttft_ms", "e2e_ms", "output_tokens"]
            )
        elif rec.name == "engine_counters":
            table, checks = table.select(["run_id", *KEYS["engine_counters"], *COUNTERS]), counters_checks(run_id)
        elif rec.name in CATEGORY_RECORDS:
            table, checks = table.select(["run_id", "category"]), [_run_id(run_id)]
        else:
            table, checks = table.select(["run_id"]), [_run_id(run_id)]
        if rec.name in CATEGORY_RECORDS:
            table, checks = _with_label_check(table), [*checks, CATEGORY_IS_LABEL]
        out.append((_record_frame(rec, files, table, KEYS.get(rec.name, ())), checks))
    return out


def traffic_frame(path: Path) -> Frame:
    """A traffic file's rows as parsed (not yet validated), with a
    ``_row_valid`` / ``problem`` column from TrafficRow."""
    import pandas as pd  # heavy: pandas, imported only when used

    path = Path(path)
    records = raw.read_traffic_records(path)  # names the file when it is missing or unreadable
    if not records:
        raise InputFileError(path, "the file holds no rows")

    def num(v):
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    problems: list[str | None] = []  # per row: its first validation problem, None when it validates
    for _, rec in records:
        try:
            TrafficRow.model_validate(rec)
            problems.append(None)
        except ValidationError as exc:
            err = exc.errors()[0]
            problems.append(f"{'.'.join(str(p) for p in err['loc'])}: {raw.describe_error(err)}")
    df = pd.DataFrame(
        {
            "prompt_id": pd.Series(
                [r.get("prompt_id") if isinstance(r.get("prompt_id"), str) else None for _, r in records], dtype=object
            ),
            "category": pd.Series(
                [r.get("category") if isinstance(r.get("category"), str) else None for _, r in records], dtype=object
            ),
            "max_tokens": pd.Series([num(r.get("max_tokens")) for _, r in records], dtype="float64"),
            "temperature": pd.Series([num(r.get("temperature", 0.0)) for _, r in records], dtype="float64"),
            "_row_valid": [p is None for p in problems],
            "problem": pd.Series(problems, dtype=object),
        }
    )
    rows = [n for n, _ in records]
    return Frame("traffic", df, lambda i: (str(path), rows[i]), KEYS["traffic"], row_base=1)


# ------------------------------------------------------------------ running
def _quiet_gx():
    """Import great_expectations with analytics, progress bars and chatter off."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx  # heavy: great-expectations, imported only when used

    logging.getLogger("great_expectations").setLevel(logging.ERROR)
    return gx


def _context(gx):
    """An ephemeral context: in-memory stores, no data docs, no progress bars."""
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )  # heavy: great-expectations, imported only when used

    config = DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False),
        analytics_enabled=False,
        progress_bars=ProgressBarsConfig(globally=False, metric_calculations=False),
    )
    return gx.get_context(mode="ephemeral", project_config=config)


def _plain(v):
    """A value as plain JSON: numpy scalars unwrapped, NaN/NA as None."""
    if hasattr(v, "item") and not isinstance(v, (list, dict, str)):
        try:
            v = v.item()
        except (ValueError, AttributeError):
            pass
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    try:
        import pandas as pd  # heavy: pandas, imported only when used

        if v is pd.NA or v is pd.NaT:
            return None
    except ImportError:  # pragma: no cover
        pass
    return v


def _exception_text(info) -> str | None:
    if not isinstance(info, dict):
        return None
    if "raised_exception" in info:
        return (info.get("exception_message") or "exception") if info.get("raised_exception") else None
    for sub in info.values():
        text = _exception_text(sub)
        if text:
            return text
    return None


def check_frame(frame: Frame, checks: list[Check]) -> list[ContractResult]:
    """Run one suite on one frame; one ContractResult per check, in order."""
    gx = _quiet_gx()
    from great_expectations.expectations.row_conditions import (
        Column,  # heavy: great-expectations, imported only when used
    )

    gxe = gx.expectations
    ctx = _context(gx)
    batch = (
        ctx.data_sources.add_pandas(f"specdec_{frame.suite}")
        .add_dataframe_asset(name=frame.suite)
        .add_batch_definition_whole_dataframe("whole")
        .get_batch(batch_parameters={"dataframe": frame.df})
    )
    expectations = []
    for c in checks:
        kw = dict(c.args, meta={"contract": c.name})
        if c.when is not None:
            kw["row_condition"] = Column(c.when[0]) == c.when[1]
        expectations.append(getattr(gxe, c.kind)(**kw))
    suite = gx.ExpectationSuite(name=f"specdec_{frame.suite}", expectations=expectations)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outcome = batch.validate(
            suite, result_format={"result_format": "SUMMARY", "partial_unexpected_count": MAX_EXAMPLES}
        )
    by_name = {}
    for res in outcome.results:
        d = res.to_json_dict()
        by_name[d["expectation_config"]["meta"]["contract"]] = d
    return [_result(frame, c, by_name.get(c.name)) for c in checks]


def _result(frame: Frame, check: Check, d: dict | None) -> ContractResult:
    cols = check.columns()
    base: dict[str, Any] = dict(
        suite=frame.suite, expectation=check.name, columns=cols, rows_checked=len(frame.df), row_base=frame.row_base
    )
    if d is None:
        return ContractResult(**base, success=False, unexpected_count=0, error="great-expectations returned no result")
    error = _exception_text(d.get("exception_info"))
    result = d.get("result") or {}
    examples = []
    for i in (result.get("partial_unexpected_index_list") or [])[:MAX_EXAMPLES]:
        i = int(i["index"]) if isinstance(i, dict) and "index" in i else int(i)
        file, row = frame.where(i)
        names = list(dict.fromkeys([*cols, *frame.keys]))
        values = {n: _plain(frame.df.at[i, n]) for n in names if n in frame.df.columns}
        examples.append({"file": file, "row": row, "values": values})
    return ContractResult(
        **base,
        success=bool(d.get("success")) and error is None,
        unexpected_count=int(result.get("unexpected_count") or 0),
        examples=examples,
        error=error,
    )


def validate_path(path: Path) -> list[ContractResult]:
    """Every expectation on a run folder or a traffic file."""
    path = Path(path)
    if not path.is_dir():
        if path.suffix.lower() in TRAFFIC_SUFFIXES:
            return check_frame(traffic_frame(path), TRAFFIC_CHECKS)
        if path.exists():
            raise InputFileError(path, "not a run folder, nor a traffic file (.jsonl, .ndjson or .parquet)")
    results = []
    for frame, checks in run_frames(path):
        results.extend(check_frame(frame, checks))
    return results


# ------------------------------------------------------------------ text
def render(results: list[ContractResult]) -> str:
    """A table of every expectation, then each failure's file, rows and fields."""
    lines = [f"{'suite':<16} {'expectation':<38} {'result':<7} {'unexpected':>10} {'rows':>8}  column(s)"]
    for r in results:
        state = "ERROR" if r.error else ("passed" if r.success else "FAILED")
        lines.append(
            f"{r.suite:<16} {r.expectation:<38} {state:<7} {r.unexpected_count:>10} {r.rows_checked:>8}  "
            f"{', '.join(r.columns)}"
        )
    failed = [r for r in results if not r.success]
    for r in failed:
        lines += [
            "",
            f"{r.suite} / {r.expectation}: "
            + (
                f"could not run ({r.error})"
                if r.error
                else f"{r.unexpected_count} of {r.rows_checked} row(s) break it (first {len(r.examples)} shown)"
            ),
        ]
        for ex in r.examples:
            vals = ", ".join(f"{k}={v!r}" for k, v in ex["values"].items())
            lines.append(f"  {ex['file']}, row {ex['row']}, field {', '.join(r.columns)!r}: {vals}")
    passed = sum(r.success for r in results)
    lines += [
        "",
        f"{passed} of {len(results)} expectation(s) passed"
        + (
            ""
            if passed == len(results)
            else "; rows count from 0 in a run folder's Parquet files, "
            "from 1 in a traffic file (in JSON Lines, the line number)"
        ),
    ]
    return "\n".join(lines)
