"""The run-folder contract: every file name, part-file name, capture
environment variable, atomic write, the ``latest`` link and manifest I/O.

A run folder ``runs/<run-id>/`` holds:

  manifest.json            RunManifest (rewritten at the end with finished=true)
  rounds.parquet           RoundTrace rows captured inside the engine(s)
  requests.parquet         RequestResult rows from the client
  engine_counters.parquet  MetricSnapshot rows (before/after each level)
  stability.parquet        StabilityResult rows (``specdec stability`` only)
  compat.parquet           CompatCell rows (``specdec compat`` only)
  greedy_checks.parquet    GreedyCheck rows (the lossless pass)
  sample_checks.parquet    SampleCheck rows (the sampling-mode distribution check)
  pass_counters.parquet    PassCounters rows (speculation counters before/after each untimed pass)
  resources.parquet        ResourceReading rows (server memory and KV-cache use, ~1/s per block)
  capture_status.json      each capturing engine process's own counters (hook failures, rows
                           dropped or written by its writer), merged from capture/status-*.json
  server-<arm>.log         an embedded server's log
  specdec.duckdb           the marts (``specdec analytics build``)
  report.html              the report (``specdec report``)
  charts/<chart>.png       each chart of the report as a PNG (``specdec report``)

While a run is in progress, or if it was interrupted, the same records sit in
part files (``capture/rounds-*.parquet``, ``requests/*.parquet``,
``engine_counters-*.parquet``); ``consolidate`` merges them and the readers
accept either form. This module is the only place those names are spelled.
It imports nothing heavy: the capture plugin loads it inside the engine.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote

from pydantic import BaseModel, ValidationError

from specdec.atomic import atomic_write_text
from specdec.errors import InputFileError, SpecdecError
from specdec.json_limits import JsonLimitError, scan
from specdec.schemas import records
from specdec.schemas.compat import CompatCell
from specdec.schemas.counters import CounterScrape
from specdec.schemas.records import RoundTrace, RunManifest
from specdec.schemas.strict import LATEST

# ------------------------------------------------------------------ names
MANIFEST = "manifest.json"
DB_NAME = "specdec.duckdb"
REPORT = "report.html"
CHARTS_SUBDIR = "charts"
CAPTURE_SUBDIR = "capture"
REQUESTS_SUBDIR = "requests"
GREEDY_SUBDIR = "greedy"
SAMPLES_SUBDIR = "samples"
RESOURCES_SUBDIR = "resources"
#: Folders that hold only part files; removed by consolidation once empty.
PART_SUBDIRS = (CAPTURE_SUBDIR, REQUESTS_SUBDIR, GREEDY_SUBDIR, SAMPLES_SUBDIR, RESOURCES_SUBDIR)

#: Environment of a vLLM process with the capture plugin (read by capture.plugin).
ENV_CAPTURE_DIR = "SPECDEC_CAPTURE_DIR"
ENV_CAPTURE_RUN_ID = "SPECDEC_CAPTURE_RUN_ID"
ENV_CAPTURE_FLUSH_S = "SPECDEC_CAPTURE_FLUSH_S"
ENV_CAPTURE_MAX_ROWS = "SPECDEC_CAPTURE_MAX_ROWS"
ENV_CAPTURE_MAX_BYTES = "SPECDEC_CAPTURE_MAX_BYTES"

ROUND_PART_GLOB = "rounds-*.parquet"


@dataclass(frozen=True)
class RecordFile:
    """One record type of a run folder: its consolidated file, the glob of its
    part files (relative to the run folder) and the raw table it loads into."""

    name: str  # record kind, also the suffix of the raw table (raw_<name>)
    consolidated: str
    part_glob: str
    required_for: tuple[str, ...]  # run kinds (RunManifest.kind) that must have it

    @property
    def raw_table(self) -> str:
        return f"raw_{self.name}"

    def record(self) -> type[BaseModel]:
        """The pydantic model of the rows."""
        models: dict[str, type[BaseModel]] = {
            "rounds": records.RoundTrace,
            "requests": records.RequestResult,
            "engine_counters": records.MetricSnapshot,
            "stability": records.StabilityResult,
            "greedy_checks": records.GreedyCheck,
            "sample_checks": records.SampleCheck,
            "pass_counters": records.PassCounters,
            "resources": records.ResourceReading,
            "compat": CompatCell,
        }
        return models[self.name]


RECORD_FILES: tuple[RecordFile, ...] = (
    RecordFile("rounds", "rounds.parquet", f"{CAPTURE_SUBDIR}/{ROUND_PART_GLOB}", required_for=()),
    RecordFile("requests", "requests.parquet", f"{REQUESTS_SUBDIR}/*.parquet", required_for=("replay",)),
    RecordFile("engine_counters", "engine_counters.parquet", "engine_counters-*.parquet", required_for=()),
    RecordFile("stability", "stability.parquet", "stability-*.parquet", required_for=("stability",)),
    RecordFile("greedy_checks", "greedy_checks.parquet", f"{GREEDY_SUBDIR}/*.parquet", required_for=()),
    RecordFile("sample_checks", "sample_checks.parquet", f"{SAMPLES_SUBDIR}/*.parquet", required_for=()),
    RecordFile("pass_counters", "pass_counters.parquet", "pass_counters-*.parquet", required_for=()),
    RecordFile("resources", "resources.parquet", f"{RESOURCES_SUBDIR}/*.parquet", required_for=()),
    RecordFile("compat", "compat.parquet", "compat-*.parquet", required_for=("compat",)),
)


def record_file(name: str) -> RecordFile:
    return next(r for r in RECORD_FILES if r.name == name)


def chart_png(run_dir: Path, chart: str) -> Path:
    return Path(run_dir) / CHARTS_SUBDIR / f"{chart}.png"


def capture_dir(run_dir: Path) -> Path:
    return Path(run_dir) / CAPTURE_SUBDIR


def requests_part(run_dir: Path, arm: str, level: int, repeat: int = 0) -> Path:
    return Path(run_dir) / REQUESTS_SUBDIR / f"{arm}-c{level:03d}-r{repeat:02d}.parquet"


def greedy_part(run_dir: Path, arm: str, level: int, repeat: int = 0) -> Path:
    return Path(run_dir) / GREEDY_SUBDIR / f"{arm}-c{level:03d}-r{repeat:02d}.parquet"


def samples_part(run_dir: Path, arm: str, level: int) -> Path:
    return Path(run_dir) / SAMPLES_SUBDIR / f"{arm}-c{level:03d}.parquet"


def resources_part(run_dir: Path, arm: str, level: int, repeat: int = 0) -> Path:
    return Path(run_dir) / RESOURCES_SUBDIR / f"{arm}-c{level:03d}-r{repeat:02d}.parquet"


def counters_part(run_dir: Path, arm: str) -> Path:
    return Path(run_dir) / f"engine_counters-{arm}.parquet"


def pass_counters_part(run_dir: Path, arm: str) -> Path:
    return Path(run_dir) / f"pass_counters-{arm}.parquet"


def stability_part(run_dir: Path, tag: str) -> Path:
    return Path(run_dir) / f"stability-{tag}.parquet"


def compat_file(run_dir: Path) -> Path:
    return Path(run_dir) / record_file("compat").consolidated


def server_log(run_dir: Path, arm: str) -> Path:
    return Path(run_dir) / f"server-{arm}.log"


def process_token() -> str:
    """A token unique to this process incarnation: the PID alone repeats across
    container restarts, so a random suffix keeps part files from overwriting."""
    return f"{os.getpid()}-{secrets.token_hex(4)}"


def round_part_name(token: str, seq: int) -> str:
    return f"rounds-{token}-{seq:06d}.parquet"


#: Each capturing engine process's own counters (hook failures, rows dropped
#: by the writer's bound, write errors), a small JSON file in the capture
#: folder rewritten when they change (``capture.writer``); the sidecar reads
#: them (``capture.sidecar``), since those counts live inside the engine.
CAPTURE_STATUS_GLOB = "status-*.json"


def capture_status_name(token: str) -> str:
    return f"status-{token}.json"


#: A run folder's capture status files, merged at the end of the run: a JSON
#: list with one object per engine process (``merge_capture_status``).
CAPTURE_STATUS = "capture_status.json"


def merge_capture_status(run_dir: Path) -> int:
    """Move the capture folder's status files into ``CAPTURE_STATUS`` (added to
    what it already holds); return how many were merged. A file that is not a
    JSON object stays where it is."""
    run_dir = Path(run_dir)
    files = sorted(capture_dir(run_dir).glob(CAPTURE_STATUS_GLOB))
    if not files:
        return 0
    target = run_dir / CAPTURE_STATUS
    merged = json.loads(target.read_text()) if target.exists() else []
    taken = []
    for f in files:
        try:
            status = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(status, dict):
            merged.append(status)
            taken.append(f)
    atomic_write_text(target, json.dumps(merged, indent=1) + "\n")
    for f in taken:
        f.unlink()
    return len(taken)


#: The recording proxy's traffic part files under its ``--out`` folder (UTC
#: date of each request's arrival): ``date=YYYY-MM-DD/part-<token>-<seq>.parquet``.
#: A part file in a date partition (the proxy's traffic, the sidecar's lake):
#: ``date=YYYY-MM-DD/part-<token>-<seq>.parquet`` under its root.
DATED_PART_GLOB = "date=*/part-*.parquet"
TRAFFIC_PART_GLOB = DATED_PART_GLOB
TRAFFIC_PART_LAYOUT = "date=YYYY-MM-DD/part-*.parquet"


def partition_date(wall_time_ns: int) -> str:
    """The ``date=`` partition (UTC, YYYY-MM-DD) of a Unix wall time in ns."""
    return dt.datetime.fromtimestamp(wall_time_ns // 10**9, dt.UTC).strftime("%Y-%m-%d")


def _part_name(token: str, seq: int) -> str:
    return f"part-{token}-{seq:06d}.parquet"


def dated_part(root: Path, date: str, token: str, seq: int) -> Path:
    return Path(root) / f"date={date}" / _part_name(token, seq)


def traffic_part(out_dir: Path, date: str, token: str, seq: int) -> Path:
    return dated_part(out_dir, date, token, seq)


def traffic_part_date(path: Path) -> str:
    """The date of a traffic part file, from its partition folder."""
    return Path(path).parent.name.removeprefix("date=")


def files_of(run_dir: Path, rec: RecordFile) -> list[Path]:
    """The consolidated file if present, else the part files (sorted)."""
    run_dir = Path(run_dir)
    whole = run_dir / rec.consolidated
    if whole.exists():
        return [whole]
    return sorted(p for p in run_dir.glob(rec.part_glob) if not p.name.startswith("."))


def new_run_id() -> str:
    """The default run id: the UTC start time, e.g. 20261129T160526Z."""
    return dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")


def claim_run_dir(runs_dir: Path, run_id: str | None) -> tuple[str, Path]:
    """(run id, run folder) for a new run; refuses a folder that already holds
    files. Creates nothing: callers validate everything first, then
    ``open_run_dir``."""
    run_id = run_id or new_run_id()
    run_dir = Path(runs_dir) / run_id
    if run_dir.exists() and any(run_dir.iterdir()):
        raise SpecdecError(f"run folder {run_dir} already exists and is not empty; choose another --run-id")
    return run_id, run_dir


def open_run_dir(runs_dir: Path, run_dir: Path) -> None:
    """Create the run folder and point ``runs_dir/latest`` at it."""
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    point_latest(runs_dir, run_dir)


def point_latest(runs_dir: Path, run_dir: Path) -> None:
    """Atomically point ``runs_dir/latest`` at ``run_dir``."""
    runs_dir = Path(runs_dir)
    link = runs_dir / LATEST
    tmp = runs_dir / f".{LATEST}.{process_token()}"
    tmp.symlink_to(Path(run_dir).name)
    os.replace(tmp, link)


# --------------------------------------------------------------- manifest
def write_manifest(run_dir: Path, manifest: RunManifest) -> None:
    """Write a RunManifest as ``manifest.json`` atomically."""
    atomic_write_text(Path(run_dir) / MANIFEST, manifest.model_dump_json(indent=2))


#: Bounds on a manifest read back (``read_manifest``). Real ones hold a few KiB,
#: nested 4 or 5 deep, with strings of at most a few hundred characters; the
#: bounds keep a hostile or broken file from recursing the parser (a
#: RecursionError) or carrying a 50 MB string into every message and report.
MANIFEST_MAX_BYTES = 2**20
MANIFEST_MAX_DEPTH = 64
MANIFEST_MAX_STRING = 2**16
#: A file larger than this is refused by its size alone, unread; up to it, the
#: refusal names the offending (or largest) field.
MANIFEST_SCAN_BYTES = 64 * 2**20


def read_manifest(run_dir: Path) -> RunManifest:
    """Read and validate ``manifest.json``; every problem names the file and
    field. Bounded (``MANIFEST_MAX_*``): at most 1 MiB, arrays and objects
    nested at most 64 deep, strings of at most 65,536 characters."""
    path = Path(run_dir) / MANIFEST
    if not path.is_file():
        raise InputFileError(path, "missing: is this a specdec run folder?")
    size = path.stat().st_size
    if size > MANIFEST_SCAN_BYTES:
        raise InputFileError(path, f"{size:,} bytes; a manifest holds at most {MANIFEST_MAX_BYTES:,} (not read)")
    try:
        raw = path.read_bytes()
        text = raw.decode("utf-8")
        sizes = scan(text, max_depth=MANIFEST_MAX_DEPTH, max_string=MANIFEST_MAX_STRING)
        if len(raw) > MANIFEST_MAX_BYTES:
            largest = max(sizes, key=lambda k: sizes[k], default=None)
            raise InputFileError(
                path,
                f"{len(raw):,} bytes; a manifest holds at most {MANIFEST_MAX_BYTES:,}"
                + (f" (the largest field: {sizes[largest]:,} characters)" if largest else ""),
                field=largest,
            )
        data = json.loads(text)
    except JsonLimitError as exc:
        raise InputFileError(path, exc.problem, field=exc.field) from None
    except UnicodeDecodeError as exc:
        raise InputFileError(path, f"not UTF-8 ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise InputFileError(path, f"invalid JSON ({exc.msg}, line {exc.lineno})") from None
    except ValueError as exc:  # e.g. an integer of 5,000 digits
        raise InputFileError(path, f"invalid JSON ({str(exc)[:120]})") from None
    if not isinstance(data, dict):
        raise InputFileError(path, "expected a JSON object")
    try:
        return RunManifest.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or None
        raise InputFileError(path, err["msg"], field=field) from None


# ------------------------------------------------------------------- lake
#: The sidecar's Parquet lake (``specdec-capture sidecar --lake LAKE``), hive
#: layout, date = UTC date of each row's wall_time_ns:
#:   rounds/date=YYYY-MM-DD/run_id=<run_id>/part-<token>-<seq>.parquet  RoundTrace rows
#:   counters/date=YYYY-MM-DD/part-<token>-<seq>.parquet               CounterScrape rows
#: A run_id is percent-encoded in its folder name (``lake_partition_value``).
LAKE_ROUNDS_SUBDIR = "rounds"
LAKE_COUNTERS_SUBDIR = "counters"
LAKE_ROUNDS_GLOB = f"{LAKE_ROUNDS_SUBDIR}/date=*/run_id=*/part-*.parquet"
LAKE_COUNTERS_GLOB = f"{LAKE_COUNTERS_SUBDIR}/{DATED_PART_GLOB}"


def lake_partition_value(value: str) -> str:
    """A hive partition value safe as one folder name: percent-encoded
    (``urllib.parse.quote``, nothing kept but letters, digits and ``_.-~``);
    a value of dots only is encoded too, the empty string is Hive's
    ``__HIVE_DEFAULT_PARTITION__``."""
    text = quote(value, safe="")
    if not text:
        return "__HIVE_DEFAULT_PARTITION__"
    return text.replace(".", "%2E") if set(text) == {"."} else text


def lake_rounds_part(lake: Path, date: str, run_id: str, token: str, seq: int) -> Path:
    return (
        Path(lake)
        / LAKE_ROUNDS_SUBDIR
        / f"date={date}"
        / f"run_id={lake_partition_value(run_id)}"
        / _part_name(token, seq)
    )


def lake_counters_part(lake: Path, date: str, token: str, seq: int) -> Path:
    return dated_part(Path(lake) / LAKE_COUNTERS_SUBDIR, date, token, seq)


@dataclass(frozen=True)
class LakeRecord:
    """One record type of the sidecar's lake: the glob of its files under the
    lake root and the raw table ``specdec analytics build`` reads it as."""

    name: str  # suffix of the raw table (raw_<name>)
    glob: str
    run_partitioned: bool  # files sit in run_id=<run_id> partitions (and hold that run only)

    @property
    def raw_table(self) -> str:
        return f"raw_{self.name}"

    def record(self) -> type[BaseModel]:
        """The pydantic model of the rows."""
        return RoundTrace if self.name == "rounds" else CounterScrape


LAKE_RECORDS: tuple[LakeRecord, ...] = (
    LakeRecord("rounds", LAKE_ROUNDS_GLOB, run_partitioned=True),
    LakeRecord("counter_scrapes", LAKE_COUNTERS_GLOB, run_partitioned=False),
)


def is_lake(path: Path) -> bool:
    """Whether ``path`` is (or holds) the sidecar's lake: a rounds/ or counters/ folder."""
    return (Path(path) / LAKE_ROUNDS_SUBDIR).is_dir() or (Path(path) / LAKE_COUNTERS_SUBDIR).is_dir()


def lake_files(lake: Path, rec: LakeRecord) -> list[Path]:
    """The lake's finished files of one record, sorted (temporary files start with a dot)."""
    return sorted(p for p in Path(lake).glob(rec.glob) if not p.name.startswith("."))


def lake_run_id(path: Path) -> str:
    """The run_id of a lake rounds file, from its ``run_id=`` partition folder:
    the inverse of ``lake_partition_value``."""
    value = Path(path).parent.name.removeprefix("run_id=")
    return "" if value == "__HIVE_DEFAULT_PARTITION__" else unquote(value)


def round_part_key(path: Path) -> tuple[str, int] | None:
    """(process token, sequence) of a capture part file named by
    ``round_part_name``; None for any other name."""
    name = Path(path).name
    if not (name.startswith("rounds-") and name.endswith(".parquet")):
        return None
    token, _, seq = name[len("rounds-") : -len(".parquet")].rpartition("-")
    return (token, int(seq)) if token and seq.isdigit() else None
