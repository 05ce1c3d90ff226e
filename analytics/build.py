"""``specdec analytics build PATH``: one DuckDB database, ``PATH/specdec.duckdb``,
over the Parquet files of one run or of many, with the SQL models over them.

PATH is a run folder, a folder of run folders, the sidecar's Parquet lake, or
a folder holding run folders and a lake (``sources.py`` says how each is
read). Every record of the run-folder contract (``runfolder.RECORD_FILES``)
and of the lake (``runfolder.LAKE_RECORDS``) becomes a raw relation
``raw_<name>``: a **view over the Parquet files in place** (``read_parquet``
of the listed files, nothing copied), or an empty table with the record's
schema when no file holds that record. ``raw_manifest`` holds one row per run:
``run_id``, ``source_path`` (its run folder, or the lake) and the validated
manifest as JSON (NULL for a run only the lake holds).

**Many runs.** ``run_id`` is in the grain of every intermediate model and
mart (and ``repeat`` wherever a model is per repeat), so nothing pools across
runs: a run's figures in a many-run database equal the same run built alone.

**Not self-contained.** The raw views name the Parquet files by absolute
path: the database reads them at every query, so it breaks when they move
or are deleted (consolidating a run's part files deletes the parts: build
again after it). ``copy=True`` (``--copy``) copies the rows into tables
instead: a self-contained database, as large as the data, slower to build.

**Models.** The macros of ``sql/macros.sql`` are created first, then every
model as a view, in dependency order. Then the *materialized* models
(``sql_models.SqlModel.materialized``: every mart, and the few intermediate
models over the rounds that say so in their header) are computed once each,
in dependency order, into a table ``stored.<name>``, and their view becomes
``select * from stored.<name>``: a mart is computed at build, not at every
query, and a model reads the materialized models before it instead of
computing them again (at tens of millions of rounds the difference is
seconds per query). A materialized *intermediate* model is computed into
``build_work.<name>``, a table of an in-memory database attached for the
build only (``WORK``): writing those large tables into the file and
compressing them cost more than computing them (at 50 million rounds 1.5 s of
the build for three of them), and nothing reads them once the marts are
stored. Such a model is computed as soon as its view is created, so the views
created after it are bound to its table rather than to the Parquet files below
it (DuckDB binds a view when it is created: on a lake of 200 runs, 2,600 files,
binding every view took 1.1 CPU s with the raw views below, 0.4 s once
``stg_requests`` was a table). When the marts are stored, the intermediate model's view gets its SQL
back, so the database file holds the marts and views, and an analyst who
reads ``int_*`` computes it from its inputs. The computed tables below are filled, in a second
connection on a worker thread, while the marts that do not read them are
materialized; the marts that do come last. The table ``sql_models`` holds
every model's SQL and header (name, layer, materialized, path, sql, domain, kind, grain), since
``duckdb_views()`` shows a materialized model's view only.

A few tables are computed in Python rather than SQL (``COMPUTED``), one run
at a time: the speedup intervals ``int_speedup_intervals`` (``intervals.py``)
and the sampling-mode tests ``sampling_tests`` (``sampling_check.py``). Each
module's ``create_table`` makes its table empty before the views, so the marts
over it can be created; its ``fill`` computes the rows once every view exists
and the materialized intermediate models are in place, before the marts are
materialized.

Inputs are checked before anything is written, each problem a named
``InputFileError`` (file, row group or row, column), never a traceback: a
missing required file, a file that is not readable Parquet, a wrong schema
version, a missing or mistyped column, a null in a column the record declares
required, a row of another run, a malformed manifest. Footers are checked for
every file; every page is read (checksums, values) when the inputs are small
or ``validate='full'`` (``input_validation.py`` says exactly what each depth covers).

The database is written under a unique temporary name beside its final name
and renamed (``specdec.atomic.atomic_write_with``), so two builds of the same folder
at once never share a file, and a reader never sees half a database. The
temporary file and DuckDB's ``.wal`` beside it are removed on success and on
failure.

**Signals** (``interruptible``). While a build runs (and a ``specdec plan``, which
uses the same guard), SIGTERM and SIGINT stop it cleanly: a thread woken by the
signal (``signal.set_wakeup_fd``) interrupts the DuckDB queries running
(``watch``: DuckDB does not look at Python's signals while a query runs), the
main thread raises ``Interrupted``, every ``finally`` removes its temporary
file, the previous database stays, and the CLI prints one line and exits
128 + the signal's number (143, 130).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import json
import logging
import re
import shutil
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa

from specdec import arms
from specdec.analytics import intervals, sampling_check
from specdec.analytics import settings as analysis_settings
from specdec.analytics.arrow_tables import create_empty_table, duckdb_columns
from specdec.analytics.input_validation import read_parquet_checked
from specdec.analytics.sources import DERIVED, Depth, Inputs, RawInput, find_inputs, run_kind
from specdec.analytics.sql_models import discover, macros_sql
from specdec.atomic import atomic_write_with
from specdec.errors import InputFileError, SpecdecError
from specdec.runfolder import DB_NAME, RecordFile, files_of
from specdec.schemas.arrow import arrow_schema
from specdec.schemas.records import RunManifest

__all__ = [
    "COMPUTED",
    "DB_NAME",
    "Interrupted",
    "build",
    "build_steps",
    "check_models",
    "interruptible",
    "load_record_file",
    "pending",
    "read_parquet_checked",
    "run_kind",
    "watch",
]

log = logging.getLogger("specdec.analytics.build")

#: Modules that compute a table from the views, each with create_table(con) and fill(con).
COMPUTED = (intervals, sampling_check)

#: The schema of the stored marts, in the database file.
STORED = "stored"
#: The in-memory database attached during the build for the materialized intermediate models.
WORK = "build_work"
#: DuckDB's memory limit during the build (``build(memory_limit=...)``): past it the large
#: hash aggregates over the rounds spill to disk (``<database>.tmp``, removed after), so a
#: build stays within 2 GiB. One run of 800k requests and 50 million rounds peaked at 2.4 GiB
#: with DuckDB's default (80% of RAM) and at 1.6 GiB with this, for about 20% more CPU (issue
#: 21, at load 6). Holistic aggregates (the latency quantiles) cannot spill: they must fit.
MEMORY_LIMIT = "1400MB"
#: The storage format of the database file: DuckDB 1.0's, which every DuckDB from 1.0 reads.
STORAGE_VERSION = "v1.0.0"


class Interrupted(SpecdecError):
    """SIGTERM or SIGINT arrived while a guarded command ran (``interruptible``); ``exit_code``:
    128 + the signal's number, as a shell reports a process the signal ended."""

    def __init__(self, signum: int):
        self.signum = signum
        self.exit_code = 128 + signum
        super().__init__(f"interrupted by {signal.Signals(signum).name}: stopped, temporary files removed")


class _Guard:
    """The state of ``interruptible`` while it runs: the first signal received and the DuckDB
    connections to interrupt when one arrives."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.raised = False  # the main thread's handler raised Interrupted already (it alone sets it)
        self.connections: list = []
        self.lock = threading.Lock()

    def note(self, signum: int) -> None:
        """Record ``signum`` if it is the first signal."""
        with self.lock:
            if self.received is None:
                self.received = signum

    def interrupt_all(self) -> None:
        with self.lock:
            connections = list(self.connections)
        for con in connections:
            with contextlib.suppress(Exception):  # closed already
                con.interrupt()


_guard: _Guard | None = None
_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def pending() -> int | None:
    """The signal received since ``interruptible`` began, if any."""
    return None if _guard is None else _guard.received


def watch(con) -> None:
    """Interrupt ``con`` (a DuckDB connection or cursor) when a signal arrives (``interruptible``;
    nothing outside it)."""
    guard = _guard
    if guard is not None:
        with guard.lock:
            guard.connections.append(con)


def _wake(guard: _Guard, reader: socket.socket) -> None:
    """The thread that hears a signal while the main thread waits in DuckDB: Python's C handler
    writes the signal's number to the wakeup socket at once; the Python handler would run only
    when the query returns."""
    while data := reader.recv(16):
        for signum in data:
            if signum in _SIGNALS:
                guard.note(signum)
                guard.interrupt_all()


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """SIGTERM and SIGINT end the block with ``Interrupted``, whose ``finally`` clauses have run:
    the first signal raises it in the main thread (a later one only adds to it), and interrupts the
    DuckDB connections given to ``watch``; whatever the interrupted code raised instead (DuckDB's
    'Query interrupted', an error of a half-written file) becomes ``Interrupted``, and so does a
    block that swallowed the signal and ended. Nested or off the main thread: no effect."""
    global _guard
    if _guard is not None or threading.current_thread() is not threading.main_thread():
        yield
        return
    guard = _Guard()

    def handler(signum, frame):
        guard.note(signum)  # the waker may have noted it first: the handler raises all the same, once
        if not guard.raised:
            guard.raised = True
            raise Interrupted(signum)

    reader, writer = socket.socketpair()
    writer.setblocking(False)
    previous = {s: signal.getsignal(s) for s in _SIGNALS}
    _guard = guard
    old_fd = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    for s in _SIGNALS:
        signal.signal(s, handler)
    waker = threading.Thread(target=_wake, args=(guard, reader), name="specdec-signals", daemon=True)
    waker.start()
    try:
        yield
    except Interrupted:
        raise
    except BaseException as exc:
        if guard.received is not None:
            raise Interrupted(guard.received) from exc
        raise
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        signal.set_wakeup_fd(old_fd)
        _guard = None
        writer.close()  # the waker's recv ends
        waker.join(timeout=5)
        reader.close()
    if guard.received is not None:
        raise Interrupted(guard.received)


def load_record_file(run_dir: Path, rec: RecordFile, kind: str = "replay", files: list[Path] | None = None) -> pa.Table:
    """All rows of one record type of one run folder, read and checked in full:
    the consolidated file or its part files (``files``, when the caller has
    listed them: ``files_of``). An absent record gives an empty table with the
    right schema, unless a run of this kind must have it
    (``RecordFile.required_for``): then it is an error naming the file."""
    schema = arrow_schema(rec.record())
    files = files_of(run_dir, rec) if files is None else files
    if not files:
        if kind in rec.required_for:
            raise InputFileError(
                Path(run_dir) / rec.consolidated,
                f"missing, and no part files {rec.part_glob} either: the run recorded no {rec.name} (did it start?)",
            )
        return schema.empty_table()
    return pa.concat_tables([read_parquet_checked(f, schema) for f in files])


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _ident(name: str) -> str:
    return f'"{name}"'


def raw_select(con, raw: RawInput) -> str:
    """The query of one raw relation: the record's columns, cast to its types,
    from exactly the listed files (absolute paths). Hive partitioning is off:
    DuckDB would replace the file's run_id by the folder's, auto-typed ('001'
    would read 1); the build has checked that the two agree. The paths are resolved
    (``runs/latest`` is a link that moves on to the next run: the view must not).
    A column a file may lack (``absent_as_null``) reads as NULL from it; a derived
    column (``sources.DERIVED``) is computed where a file lacks it or may hold a null;
    a column files of an older version hold under a former name (``raw.former``)
    is read from that name, or from either where the files' versions differ."""
    nowhere = {name for name, count in raw.absent.items() if count == len(raw.files)}
    derived = DERIVED.get(raw.table, {})
    mixed = {name for name, (_, count) in raw.former.items() if count < len(raw.files)}

    def column(name: str) -> str:
        if name in raw.former:
            then = _ident(raw.former[name][0])
            return f"coalesce({_ident(name)}, {then})" if name in mixed else then
        if name in derived and name in nowhere:
            return derived[name]
        if name in derived and (name in raw.absent or name in raw.partial):
            return f"coalesce({_ident(name)}, {derived[name]})"
        return "null" if name in nowhere else _ident(name)

    cols = ", ".join(f'cast({column(name)} as {dtype}) as "{name}"' for name, dtype in duckdb_columns(con, raw.schema))
    files = ", ".join(_quoted(str(f.resolve())) for f in raw.files)
    union = ", union_by_name = true" if len(raw.absent) > len(nowhere) or mixed else ""
    return f"select {cols} from read_parquet([{files}], hive_partitioning = false{union})"


def _create_raw(con, raw: RawInput, copy: bool) -> None:
    if not raw.files:
        create_empty_table(con, raw.table, raw.schema)
        return
    con.execute(f"create {'table' if copy else 'view'} {raw.table} as {raw_select(con, raw)}")


def _create_manifest(con, inputs: Inputs) -> None:
    """``raw_manifest``, and ``raw_arm_roles``: the analysis runs of the runs of named arms
    (``specdec.arms``: one per comparison; a classic run has no rows, its ids are kept)."""
    con.execute("create table raw_manifest (run_id varchar, source_path varchar, manifest json)")
    rows = [
        (r.run_id, str(r.source_path), None if r.manifest is None else r.manifest.model_dump_json())
        for r in inputs.runs
    ]
    if rows:
        con.executemany("insert into raw_manifest values (?, ?, ?)", rows)
    arms.create_roles_table(
        con,
        [
            row
            for r in inputs.runs
            if r.manifest is not None
            for row in arms.role_rows(r.run_id, arms.specs_of(r.manifest.arms, _engine_name(r.manifest)))
        ],
    )


def _engine_name(manifest) -> str:
    """The engine of a manifest's arms that do not name one (a run before arms had engines)."""
    name = (manifest.engine or {}).get("name")
    return name if name in arms.ENGINE_NAMES else "vllm"


class _Steps:
    """The build's steps (each materialized model, each computed table), counted for a
    caller's ``progress(done, total, name)``; the computed tables fill on a thread, so
    the count is locked."""

    def __init__(self, progress: Callable[[int, int, str], None] | None, total: int):
        self.progress, self.total, self.done = progress, total, 0
        self._lock = threading.Lock()

    def step(self, name: str) -> None:
        if self.progress is None:
            return
        with self._lock:
            self.done += 1
            done = self.done
        self.progress(done, self.total, name)


_NO_STEPS = _Steps(None, 0)


def _materialize(con, m, schema: str = STORED, steps: _Steps = _NO_STEPS, *, from_view: bool = True) -> None:
    """Compute a model once into <schema>.<name>; its view reads the table from now on.
    ``from_view``: the model's view exists and the table is computed from it; False (a mart,
    whose view is created here): from the model's SQL, bound once instead of twice."""
    import duckdb  # heavy: duckdb, imported only when used

    started = time.perf_counter()
    query = f'select * from "{m.name}"' if from_view else m.sql
    try:
        con.execute(f'create table {schema}."{m.name}" as\n{query}')
    except duckdb.Error as exc:
        raise SpecdecError(f"{m.path}: {' '.join(str(exc).split())}") from None
    con.execute(f'create or replace view "{m.name}" as select * from {schema}."{m.name}"')
    log.debug("materialized %s in %.3f s", m.name, time.perf_counter() - started)
    steps.step(m.name)


def _reads_computed(models) -> set[str]:
    """Names of the models that read a computed table, directly or through other models."""
    tables = [c.TABLE for c in COMPUTED]
    out: set[str] = set()
    for m in models:  # dependency order: a model's dependencies are decided before it
        body = re.sub(r"--[^\n]*", "", m.sql)
        if m.depends_on & out or any(re.search(rf"\b{t}\b", body) for t in tables):
            out.add(m.name)
    return out


def _working_inputs(models, working: set[str]) -> dict[str, set[str]]:
    """Per model: the working (materialized intermediate) models it reads while the build
    runs, directly or through models that stay views; a stored mart it reads stops the
    walk (it reads the stored table)."""
    by_name = {m.name: m for m in models}
    out: dict[str, set[str]] = {}
    for m in models:  # dependency order: a model's dependencies are decided before it
        found: set[str] = set()
        for d in m.depends_on:
            dep = by_name[d]
            if d in working:
                found.add(d)
            elif not dep.materialized:
                found |= out[d]
        out[m.name] = found
    return out


def _fill_inputs(models, working_inputs: dict[str, set[str]], working: set[str]) -> set[str]:
    """The working models the computed tables' fills read: every model their modules' string
    literals name (``_named_by_fills``), if it is one, and the working models those read (a mart
    named there counts with its inputs whether or not it is stored yet)."""
    out: set[str] = set()
    for m in _named_by_fills(models):
        out |= working_inputs[m.name] | ({m.name} & working)
    return out


@functools.cache
def _computed_words() -> frozenset[str]:
    """The words of the string literals of the computed tables' modules, their docstrings left out:
    the SQL their fills run (and a name they ask ``has_view`` about) is there, their prose is not."""
    texts: list[str] = []
    for module in COMPUTED:
        tree = ast.parse(inspect.getsource(module))
        docs = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        texts += [
            node.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
        ]
    return frozenset(re.findall(r"\w+", "\n".join(texts)))


def _named_by_fills(models) -> list:
    """The models the computed tables' fills may read: those their modules' string literals name
    as a word (the names are found, not declared, so they cannot go stale)."""
    words = _computed_words()
    return [m for m in models if m.name in words]


class _Working:
    """The materialized intermediate models' tables in the build's in-memory database, each
    released (its view gets its SQL back, its table is dropped) as soon as nothing still to
    run reads it, so they do not add to the memory of the heavy marts late in the build."""

    def __init__(self, con, models, steps: _Steps = _NO_STEPS):
        self.con = con
        self.steps = steps
        self.models = [m for m in models if m.materialized and m.layer != "marts"]
        self.names = {m.name for m in self.models}
        self.inputs = _working_inputs(models, self.names)
        self.fill_inputs = _fill_inputs(models, self.inputs, self.names)
        self.pending: dict[str, set[str]] = {}  # working model -> readers still to run
        self.held: set[str] = set()

    def materialize(self, m) -> None:
        _materialize(self.con, m, WORK, self.steps)
        self.held.add(m.name)

    def track(self, marts) -> None:
        """Note which marts read each working model, once every working model is in place."""
        for mart in marts:
            for w in self.inputs[mart.name]:
                self.pending.setdefault(w, set()).add(mart.name)

    def done(self, mart: str, fill_running: bool) -> None:
        for readers in self.pending.values():
            readers.discard(mart)
        for m in self.models:
            if (
                m.name in self.held
                and not self.pending.get(m.name)
                and not (fill_running and m.name in self.fill_inputs)
            ):
                self.release(m)

    def release(self, m) -> None:
        self.con.execute(f"create or replace view {m.name} as\n{m.sql}")
        self.con.execute(f'drop table {WORK}."{m.name}"')
        self.held.discard(m.name)
        log.debug("released %s", m.name)

    def close(self) -> None:
        for m in self.models:
            if m.name in self.held:
                self.release(m)
        self.con.execute(f"detach {WORK}")


def _fill(con, steps: _Steps = _NO_STEPS) -> None:
    watch(con)
    try:
        con.execute("set enable_progress_bar = false")  # a cursor is a session of its own
        for computed in COMPUTED:
            started = time.perf_counter()
            computed.fill(con)
            log.debug("filled %s in %.3f s", computed.TABLE, time.perf_counter() - started)
            steps.step(computed.TABLE)
    finally:
        con.close()


def build_steps(models) -> int:
    """How many steps a build of ``models`` reports to its ``progress``: every materialized
    model and every computed table."""
    return sum(m.materialized for m in models) + len(COMPUTED)


def _create_models(con, models, steps: _Steps = _NO_STEPS) -> None:
    """Views, each materialized intermediate model computed as soon as its view exists, then
    the computed tables and the marts that do not read them at once (the intervals are Python,
    mostly on one core; the marts DuckDB's), then the marts that read the computed tables."""
    import duckdb  # heavy: duckdb, imported only when used

    con.execute(macros_sql())
    con.execute(f"create schema {STORED}")
    con.execute(f"attach ':memory:' as {WORK}")
    marts = [m for m in models if m.materialized and m.layer == "marts"]
    working = _Working(con, models, steps)
    # a mart's view comes with its table (_materialize), its SQL bound once (a fifth less time for
    # a small run's build): the marts are stored in dependency order, so each is in place before a
    # mart that reads it. One that a model outside the marts or a computed table's fill may read
    # (which runs beside the marts) gets its view here.
    read_early = {d for m in models if m.layer != "marts" for d in m.depends_on}
    read_early |= {m.name for m in _named_by_fills(models)}
    for m in reversed(models):  # and what those read
        if m.name in read_early:
            read_early |= m.depends_on
    lazy = {m.name for m in marts if m.name not in read_early}
    for m in models:
        if m.name in lazy:
            continue
        try:
            con.execute(f"create view {m.name} as\n{m.sql}")
        except duckdb.Error as exc:
            raise SpecdecError(f"{m.path}: {exc}") from None
        if m.name in working.names:
            # at once: the views after it are bound (at their creation) to its table instead of
            # to the Parquet files under it
            working.materialize(m)
    working.track(marts)
    later = _reads_computed(models)
    with ThreadPoolExecutor(max_workers=1) as pool:
        filled = pool.submit(_fill, con.cursor(), steps)
        try:
            for m in marts:
                if m.name not in later:
                    _materialize(con, m, steps=steps, from_view=m.name not in lazy)
                    working.done(m.name, fill_running=not filled.done())
        finally:
            filled.result()
    for m in marts:
        if m.name in later:
            _materialize(con, m, steps=steps, from_view=m.name not in lazy)
            working.done(m.name, fill_running=False)
    working.close()  # the marts are stored: the working tables go, the views compute again
    con.execute(
        "create table sql_models (name varchar, layer varchar, materialized boolean, path varchar, sql varchar, "
        "domain varchar, kind varchar, grain varchar[])"
    )
    con.executemany(
        "insert into sql_models values (?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (m.name, m.layer, m.materialized, str(m.path), m.sql, m.domain, m.header.kind, list(m.header.grain))
            for m in models
        ],
    )


def check_models(con, db: Path) -> None:
    """A database built already (``specdec plan --db``) is read with this specdec's SQL only if
    the same SQL models built it: the ``sql_models`` table it holds against the models here. Else
    a ``SpecdecError`` naming the database and a model that differs, since the queries would
    fail on a renamed column or, worse, read figures computed by other definitions."""
    import duckdb  # heavy: duckdb, imported only when used

    try:
        have: dict[str, str] | None = dict(con.execute("select name, sql from sql_models").fetchall())
    except duckdb.Error:
        have = None
    want = {m.name: m.sql for m in discover()}
    if have == want:
        return
    if have is None:
        why = "it holds no sql_models table"
    else:
        differ = sorted(n for n in want.keys() | have.keys() if have.get(n) != want.get(n))
        why = f"{len(differ)} of its {len(have)} SQL models differ from this specdec's, {differ[0]} first"
    raise SpecdecError(
        f"{db}: built by another version of specdec ({why}); rebuild it with `specdec analytics build RUN_DIR`"
    )


def build(
    path: Path,
    db_path: Path | None = None,
    slo: analysis_settings.Slo | None = None,
    *,
    copy: bool = False,
    validate: Depth = "auto",
    progress: Callable[[int, int, str], None] | None = None,
    memory_limit: str | None = MEMORY_LIMIT,
) -> Path:
    """Check every input, then write the database atomically; return its path.
    ``progress(done, total, name)``: called after each step of the build (each materialized
    model, each computed table; ``build_steps``), from the build's threads.
    ``slo``: the latency SLO of the capacity_under_slo mart (``analytics/settings.py``;
    its defaults when None). ``copy``: copy the rows into the database (self-contained)
    instead of views over the files. ``validate``: 'auto', 'full' or 'footer' (``sources.py``).
    ``memory_limit``: DuckDB's, during the build (``MEMORY_LIMIT``; None: DuckDB's default)."""
    import duckdb  # heavy: duckdb, imported only when used

    with interruptible():  # SIGTERM, SIGINT: Interrupted, no temporary file left, the previous database kept
        started = time.perf_counter()
        inputs = find_inputs(Path(path), validate)
        log.debug(
            "found and checked %s (%s, %s check) in %.3f s",
            inputs.root,
            inputs.layout,
            "full" if inputs.full_check else "footer",
            time.perf_counter() - started,
        )
        models = discover()
        db_path = Path(db_path or inputs.root / DB_NAME)

        def write(tmp: Path) -> None:
            try:
                # Written in DuckDB 1.0's storage format (STORAGE_VERSION), so an analyst's notebook
                # on any DuckDB from 1.0 opens the file: DuckDB 2.0's own format (v2.0.0+) is
                # refused by 1.x ("newer DuckDB version"), checked with 1.5.6. DuckDB 2.0 draws its
                # own bar on the terminal for a query past 2 s (step_timing at 50 million rounds):
                # the build reports its steps through ``progress`` instead.
                con = duckdb.connect(str(tmp), config={"storage_compatibility_version": STORAGE_VERSION})
                watch(con)
                con.execute("set enable_progress_bar = false")
                if memory_limit:
                    con.execute(f"set memory_limit = '{memory_limit}'")
                try:
                    for raw in inputs.raw:
                        _create_raw(con, raw, copy)
                    _create_manifest(con, inputs)
                    analysis_settings.create_table(con, slo)
                    for computed in COMPUTED:
                        computed.create_table(con)
                    _create_models(con, models, _Steps(progress, build_steps(models)))
                finally:
                    con.close()
                if (signum := pending()) is not None:  # a signal the build swallowed: the previous database stays
                    raise Interrupted(signum)
            except BaseException:
                _remove_sidecars(tmp)
                raise
            _remove_sidecars(tmp)

        atomic_write_with(db_path, write)
    return db_path


def runs_of(con) -> list[str]:
    """The run ids a database holds, sorted: its analysis runs (stg_manifest: a classic
    run's id, <run_id>/<arm> per comparison of a run of named arms)."""
    return [r[0] for r in con.execute("select run_id from stg_manifest order by run_id").fetchall()]


def manifest_of(con, run_id: str):
    """The RunManifest of one (analysis) run of a database (of its run folder), as that run
    sees it: one comparison of a run of two engines names its own engine's model and dtype
    (``arms.comparison_manifest``); None for a run only the lake holds."""
    row = con.execute(
        "select manifest, reference_arm, treatment_arm from stg_manifest where run_id = ?", [run_id]
    ).fetchone()
    if row is None:
        raise SpecdecError(f"no run {run_id!r} in this database (it holds: {', '.join(runs_of(con)) or 'none'})")
    if row[0] is None:
        return None
    return arms.comparison_manifest(RunManifest.model_validate(json.loads(row[0])), row[1:])


def _remove_sidecars(db_file: Path) -> None:
    """DuckDB's write-ahead log and spill folder beside a database file."""
    Path(f"{db_file}.wal").unlink(missing_ok=True)
    spill = Path(f"{db_file}.tmp")
    if spill.is_dir():
        shutil.rmtree(spill, ignore_errors=True)
