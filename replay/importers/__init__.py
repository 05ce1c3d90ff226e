"""Importers of public LLM traffic traces (Azure LLM inference, Mooncake,
BurstGPT) into a traffic file of ``TrafficRow`` (format version 2).

Each format module parses its file into ``common.TraceRow`` in common units
(its docstring says which unit its timestamps use and how that is known);
``common`` keeps the window, thins, and gives every row real content from the
prompt pool (``specdec.replay.prompt_pool``, ``content``).
"""

from __future__ import annotations

from pathlib import Path

from specdec.errors import InputFileError
from specdec.replay.importers import azure, burstgpt, mooncake
from specdec.replay.importers.common import ImportOptions, ImportReport, read_rows, select, to_traffic
from specdec.replay.prompt_pool import Pool, TokenCounter, load_pool

FORMATS = {"azure": azure, "mooncake": mooncake, "burstgpt": burstgpt}


def import_trace(fmt: str, path: str | Path, opts: ImportOptions, *, pool: Pool | None = None,
                 counter: TokenCounter | None = None) -> ImportReport:
    """Read a trace file and return the report with its traffic rows.

    ``counter`` counts tokens of the composed chats (default: the prepared
    SmolLM2 tokenizer and chat template); ``pool`` defaults to the bundled one.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown trace format {fmt!r} (expected one of {', '.join(FORMATS)})")
    module, path = FORMATS[fmt], Path(path)
    if not path.is_file():
        raise InputFileError(path, "no such file")
    report = ImportReport(fmt, path, module.UNITS, options=opts)
    rows = select(read_rows(path, module.parse(path), report, opts.skip_bad), opts, report)
    if pool is None:
        pool = load_pool()
    if counter is None and rows:
        counter = default_counter()
    report.rows = to_traffic(rows, module.SOURCE, opts, pool, counter, report)
    return report


def default_counter() -> TokenCounter:
    """The served model's tokenizer: the prepared SmolLM2 folder."""
    from specdec.model import prepare_model
    from specdec.replay.prompt_pool import HFTokenCounter

    return HFTokenCounter(prepare_model().path)


def write_traffic(report: ImportReport, out: str | Path) -> None:
    """Write the report's rows as a traffic Parquet file (atomic)."""
    from specdec.schemas.arrow import table_from_records, write_parquet_atomic
    from specdec.schemas.records import TrafficRow

    if not report.rows:
        raise InputFileError(report.path, "no row was kept (check --start-s/--end-s and --sample); nothing written")
    write_parquet_atomic(table_from_records(TrafficRow, report.rows), Path(out))
