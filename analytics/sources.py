"""What ``specdec analytics build PATH`` reads: the layout of PATH, the runs
in it, and every input file of every raw table, each one checked.

PATH is one of (``find_inputs``):

* a **run folder** (``PATH/manifest.json``): one run, its record files
  (``runfolder.RECORD_FILES``: the consolidated file, or else its part files);
* a **folder of run folders** (``PATH/*/manifest.json``; symbolic links such
  as ``latest`` are skipped, so no run is read twice): every run (a compat
  run stopped before it wrote any cell is named in a warning and skipped);
* the sidecar's **Parquet lake** (``PATH/rounds/date=*/run_id=*/part-*.parquet``
  and ``PATH/counters/date=*/part-*.parquet``, ``runfolder.LAKE_RECORDS``):
  each ``run_id`` partition is a run whose rounds the lake holds (it has no
  manifest and no requests); the counter scrapes belong to a server, not a run;
* a folder holding **run folders and a lake** together: the lake's rounds of a
  run whose folder has no rounds of its own join that run's requests (the
  sidecar's plugin ran with the replay's run id); a run with rounds in both
  places is refused (they would count twice).

Every run has exactly one ``run_id``: two run folders with the same one are
refused, and every row of a run folder's files, or of a lake partition, must
hold its run's id (``input_validation.check_file``; from footer statistics, cheap).

Files are listed once, here, with absolute paths; the raw views of the
database read exactly these files (``build``). Each is checked by
``input_validation.check_file``: the footer checks always, and a full read of every
page when ``validate`` is 'full', or 'auto' and the inputs together are at most
``checks.FULL_CHECK_BYTES`` (one run's files usually are; a lake of millions
of rounds is not, and its pages are then first read by the queries).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pyarrow as pa

from specdec.analytics.input_validation import FULL_CHECK_BYTES, check_file
from specdec.errors import InputFileError, SpecdecError
from specdec.runfolder import (
    LAKE_RECORDS,
    MANIFEST,
    RECORD_FILES,
    files_of,
    is_lake,
    lake_files,
    lake_run_id,
    read_manifest,
)
from specdec.schemas.arrow import arrow_schema
from specdec.schemas.records import RunManifest

__all__ = ["Depth", "Inputs", "RawInput", "Run", "find_inputs", "run_kind"]

Depth = Literal["auto", "full", "footer"]
log = logging.getLogger("specdec.analytics")


#: Columns a writer derives from other columns of the same row and stores, so that the
#: build need not read those (a digest instead of a text of kilobytes): per raw table,
#: column -> the DuckDB expression that computes it from the row. The raw view reads the
#: stored column where every file has it free of nulls (footer statistics), and else
#: ``coalesce(column, expression)`` (files written before the column existed).
DERIVED: dict[str, dict[str, str]] = {"raw_requests": {"output_text_sha256": "sha256(output_text)"}}


@dataclass(frozen=True)
class Run:
    """One run of the build: its id, where it was found, its manifest (None
    for a run only the lake holds)."""

    run_id: str
    source_path: Path
    manifest: RunManifest | None


@dataclass(frozen=True)
class RawInput:
    """One raw table: its record's Arrow schema and the files it reads, in order;
    ``absent``: per column some of the files lack (``absent_as_null``, read as
    NULL), how many of them lack it (from the checks' footer reads); ``partial``:
    per ``DERIVED`` column, how many files have it but may hold a null in it;
    ``former``: per column some files hold under a former name (an older
    ``schema_version``: ``FORMER_NAMES``), that name and how many files do."""

    table: str
    schema: pa.Schema
    files: tuple[Path, ...]
    absent: Mapping[str, int] = field(default_factory=dict)
    partial: Mapping[str, int] = field(default_factory=dict)  # DERIVED columns a file holds with nulls
    former: Mapping[str, tuple[str, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class Inputs:
    root: Path  # absolute
    layout: str  # 'run folder' | 'folder of run folders' | 'lake' | 'folder of run folders and a lake'
    runs: tuple[Run, ...]  # by run_id
    raw: tuple[RawInput, ...]
    full_check: bool  # whether every page was read


def run_kind(manifest) -> str:
    """The manifest's run kind ('replay' unless it says otherwise)."""
    return getattr(manifest, "kind", None) or "replay"


def _run_dirs(root: Path) -> list[Path]:
    return [
        d
        for d in sorted(root.iterdir())
        if not d.name.startswith(".") and not d.is_symlink() and d.is_dir() and (d / MANIFEST).is_file()
    ]


def _layout(root: Path) -> tuple[str, list[Path], bool]:
    if (root / MANIFEST).is_file():
        return "run folder", [root], False
    run_dirs, lake = _run_dirs(root), is_lake(root)
    if not run_dirs and not lake:
        raise InputFileError(
            root / MANIFEST,
            "missing: is this a specdec run folder? (nor does the folder hold "
            "run folders, */manifest.json, or a Parquet lake, rounds/ or counters/)",
        )
    if run_dirs and lake:
        return "folder of run folders and a lake", run_dirs, True
    return ("lake", [], True) if lake else ("folder of run folders", run_dirs, False)


def _run_folder_files(run_dir: Path, manifest) -> dict[str, list[Path]]:
    """Per raw table, the run folder's files (absolute); an error for a record its kind requires."""
    out = {}
    for rec in RECORD_FILES:
        files = [f.absolute() for f in files_of(run_dir, rec)]
        if not files and run_kind(manifest) in rec.required_for:
            raise InputFileError(
                run_dir / rec.consolidated,
                f"missing, and no part files {rec.part_glob} either: the run recorded no {rec.name} (did it start?)",
            )
        out[rec.raw_table] = files
    return out


def _unfinished_compat(run_dir: Path, manifest) -> bool:
    """A ``specdec compat`` run stopped before it wrote any cell (killed: ``manifest.json`` only): in
    a folder of runs it is named and skipped, so the other runs still build."""
    rec = next(r for r in RECORD_FILES if r.name == "compat")
    if run_kind(manifest) != "compat" or manifest.finished or files_of(run_dir, rec):
        return False
    log.warning("%s: an unfinished compat run without %s (stopped before any cell); skipped", run_dir, rec.consolidated)
    return True


def find_inputs(path: Path, validate: Depth = "auto") -> Inputs:
    """Find and check everything PATH holds (module docstring)."""
    root = Path(path).absolute()
    if not root.is_dir():
        raise SpecdecError(f"{path}: no such run folder")
    layout, run_dirs, lake = _layout(root)
    schemas = {rec.raw_table: arrow_schema(rec.record()) for rec in RECORD_FILES} | {
        rec.raw_table: arrow_schema(rec.record()) for rec in LAKE_RECORDS
    }
    files: dict[str, list[tuple[Path, str | None, str]]] = {t: [] for t in schemas}  # (file, run_id, whose)
    runs: dict[str, Run] = {}
    with_rounds: set[str] = set()
    for run_dir in run_dirs:
        manifest = read_manifest(run_dir)
        if layout != "run folder" and _unfinished_compat(run_dir, manifest):
            continue
        if manifest.run_id in runs:
            raise InputFileError(
                run_dir / MANIFEST,
                f"run_id {manifest.run_id!r} is also the run of "
                f"{runs[manifest.run_id].source_path}: each run is built once "
                "(is one folder a copy of the other?)",
                field="run_id",
            )
        runs[manifest.run_id] = Run(manifest.run_id, run_dir.resolve(), manifest)
        whose = f"the run folder's manifest.json ({run_dir / MANIFEST}) says the run"
        for table, found in _run_folder_files(run_dir, manifest).items():
            files[table] += [(f, manifest.run_id, whose) for f in found]
            if table == "raw_rounds" and found:
                with_rounds.add(manifest.run_id)
    if lake:
        for rec in LAKE_RECORDS:
            for f in lake_files(root, rec):
                run_id = lake_run_id(f) if rec.run_partitioned else None
                files[rec.raw_table].append((f.absolute(), run_id, "its run_id= partition folder"))
                if run_id is None:
                    continue
                if run_id in with_rounds:
                    raise InputFileError(
                        f,
                        f"the lake holds rounds of run {run_id!r}, and so does its run folder "
                        f"{runs[run_id].source_path}: they would count twice "
                        "(move one of them away)",
                        field="run_id",
                    )
                runs.setdefault(run_id, Run(run_id, root.resolve(), None))
    every = [f for listed in files.values() for f, _, _ in listed]
    full = validate == "full" or (validate == "auto" and sum(f.stat().st_size for f in every) <= FULL_CHECK_BYTES)
    absent: dict[str, Counter] = {t: Counter() for t in schemas}
    partial: dict[str, Counter] = {t: Counter() for t in schemas}
    former: dict[str, Counter] = {t: Counter() for t in schemas}
    for table, listed in files.items():
        derived = tuple(DERIVED.get(table, ()))
        for f, run_id, whose in listed:
            checked = check_file(f, schemas[table], run_id=run_id, whose=whose, full=full, derived=derived)
            absent[table].update(checked.absent)
            partial[table].update(checked.partial)
            former[table].update(checked.renamed)
    raw = tuple(
        RawInput(
            t,
            schemas[t],
            tuple(f for f, _, _ in files[t]),
            dict(absent[t]),
            dict(partial[t]),
            {now: (then, n) for (now, then), n in former[t].items()},
        )
        for t in schemas
    )
    return Inputs(root, layout, tuple(runs[r] for r in sorted(runs)), raw, full)
