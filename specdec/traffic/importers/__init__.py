"""Importers of public LLM traffic traces (Azure LLM inference, Mooncake,
BurstGPT) into a traffic file of ``TrafficRow`` (format version 2; Mooncake's
version 3, its prompts stored as shared prefix blocks: ``writer``).

Each format module parses its file into ``common.TraceRow`` in common units
(its docstring says which unit its timestamps use and how that is known);
``common`` checks ranges, keeps the window, thins, and gives every row real
content from the prompt pool (``specdec.traffic.prompt_pool``, ``content``).

Two passes over the file (``common``): the first checks every row (a bad
one refuses the file before anything is composed) and finds the trace start;
the second composes, and either collects ``TrafficRow`` records
(``import_trace``) or streams them to a Parquet file in batches
(``import_to_file``), so memory does not grow with the row count.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from specdec.errors import InputFileError
from specdec.traffic.importers import azure, burstgpt, mooncake
from specdec.traffic.importers.common import (
    ImportOptions,
    ImportReport,
    checked,
    in_time_order,
    read_rows,
    select,
    survey,
    to_traffic,
    traffic_values,
)
from specdec.traffic.importers.tokens import counter_for
from specdec.traffic.importers.writer import write_batches
from specdec.traffic.prompt_pool import Pool, TokenCounter, load_pool

FORMATS = {"azure": azure, "mooncake": mooncake, "burstgpt": burstgpt}


def _open(fmt: str, path: str | Path, opts: ImportOptions):
    if fmt not in FORMATS:
        raise ValueError(f"unknown trace format {fmt!r} (expected one of {', '.join(FORMATS)})")
    module, path = FORMATS[fmt], Path(path)
    if not path.is_file():
        raise InputFileError(path, "no such file")
    return module, path, ImportReport(fmt, path, module.UNITS, options=opts)


def _kept_rows(module, path: Path, opts: ImportOptions, report: ImportReport):
    """Pass 1 (check and survey, counting malformed rows), then pass 2's
    rows in time order, window and thinning applied; and how many rows pass 2 reads."""
    known = survey(read_rows(path, checked(module.parse(path), module.FIELDS), report, opts.skip_bad))
    quiet = ImportReport(report.fmt, path, report.units, options=opts)  # pass 2 must not count twice
    good = read_rows(path, checked(module.parse(path), module.FIELDS), quiet, skip_bad=True)
    return select(in_time_order(good, known), opts, report, known.start_ms), known.rows


def import_trace(
    fmt: str, path: str | Path, opts: ImportOptions, *, pool: Pool | None = None, counter: TokenCounter | None = None
) -> ImportReport:
    """Read a trace file and return the report with its traffic rows (in memory).

    ``counter`` counts tokens of the composed chats (default: the prepared
    SmolLM2 tokenizer and chat template); ``pool`` defaults to the bundled one.
    """
    module, trace, report = _open(fmt, path, opts)
    rows, n = _kept_rows(module, trace, opts, report)
    report.rows = (
        to_traffic(rows, module.SOURCE, opts, pool or load_pool(), counter or default_counter(), report) if n else []
    )
    return report


def import_to_file(
    fmt: str,
    path: str | Path,
    opts: ImportOptions,
    out: str | Path,
    *,
    pool: Pool | None = None,
    counter: TokenCounter | None = None,
    progress: Callable[[int, int], None] | None = None,
    blocks: bool | None = None,
) -> ImportReport:
    """Read a trace file and stream its traffic rows to ``out`` (Parquet,
    written atomically, in batches); the report counts them (``rows`` stays
    empty). ``progress(done, total)`` is called as rows are read in pass 2.
    ``blocks``: write prompts made of prefix blocks as blocks (traffic format
    version 3, ``writer``); None: the format's ``BLOCKS`` (Mooncake: yes),
    False: every prompt whole (version 2, which an older specdec reads)."""
    module, trace, report = _open(fmt, path, opts)
    rows, n = _kept_rows(module, trace, opts, report)
    if not n:
        raise InputFileError(trace, "no well-formed row; nothing written")
    pool = pool or load_pool()
    counter = counter or default_counter()
    values = traffic_values(_counted(rows, progress, n), module.SOURCE, opts, pool, counter, report)
    written = write_batches(values, Path(out), blocks=getattr(module, "BLOCKS", False) if blocks is None else blocks)
    if not written:
        raise InputFileError(trace, "no row was kept (check --start-s/--end-s and --keep-fraction); nothing written")
    return report


def _counted(rows, progress, total: int):
    if progress is None:
        yield from rows
        return
    done = 0
    for r in rows:
        yield r
        done += 1
        if done % 1000 == 0:
            progress(done, total)
    progress(total, total)


def default_counter() -> TokenCounter:
    """The served model's tokenizer: the prepared SmolLM2 folder (counted
    without transformers when the folder allows it: ``tokens``)."""
    from specdec.model import prepare_model

    return counter_for(prepare_model().path)


def write_traffic(report: ImportReport, out: str | Path) -> None:
    """Write the report's rows as a traffic Parquet file (atomic)."""
    from specdec.schemas.arrow import table_from_records, write_parquet_atomic
    from specdec.schemas.records import TrafficRow

    if not report.rows:
        raise InputFileError(
            report.path, "no row was kept (check --start-s/--end-s and --keep-fraction); nothing written"
        )
    write_parquet_atomic(table_from_records(TrafficRow, report.rows), Path(out))
