"""What every trace importer shares: the parsed trace row, the options, the
pipeline (malformed rows -> time window -> down-sampling -> content ->
TrafficRow) and the summary.

Conventions, the same for every format:

* Row numbers are 1-based as a person counts lines: in CSV the header is row 1
  and the first data row is row 2; in JSON Lines a row is its line number
  (blank lines count, and are skipped).
* The trace start is the earliest timestamp among the file's well-formed rows.
  ``--start-s``/``--end-s`` keep rows with ``start <= t - trace_start < end``
  (seconds). ``arrival_ms`` is then measured from the first kept row, so a
  slice starts at 0.
* Down-sampling (``--keep-fraction F``, formerly ``--sample``) is independent thinning by a seeded hash: a
  row is kept when ``unit_hash(seed, key) < F``, where the key is the session
  (all turns of a session are kept or dropped together) or else the row
  number. Thinning keeps the arrival process's shape (bursts, diurnal curve):
  every part of the trace keeps about the fraction F of its rows, so rates
  scale by F; arrival times are not stretched.
* ``max_tokens`` is the recorded output length, clamped to at least 1 (a
  trace's 0, e.g. BurstGPT's failed requests); clamped rows are counted.
  ``input_tokens`` and ``recorded_output_tokens`` are the trace's own values.
* ``--fit-context N`` (the served model's context) caps the composed input so
  that input + max_tokens <= N, the tolerance included; ``--max-input-tokens``
  caps it outright. The trace's ``input_tokens`` is kept; the note says
  ``capped_from``. Rows whose output leaves no room are left out and counted.
* Ranges: a row whose timestamp is not within ``MAX_SPAN_MS`` (30 days) of
  the trace's zero (Mooncake, BurstGPT: the trace start; Azure: midnight of
  the first row's date), whose input length is above ``MAX_INPUT_TOKENS`` or
  whose output length is above ``MAX_TOKENS_CEILING`` is malformed: refused by
  file, row and field, or skipped and counted with ``--skip-bad``.

Rows stream: the file is read twice (the first pass finds the trace start,
counts and checks every row, so a bad row refuses the file before anything
is composed; the second composes and writes), and only a file whose rows are
not in time order is held in memory to be sorted.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from specdec.errors import InputFileError
from specdec.schemas.records import TrafficRow
from specdec.schemas.strict import MAX_ARRIVAL_MS, MAX_TOKENS_CEILING
from specdec.traffic.importers.content import ContentAssigner
from specdec.traffic.importers.utf8 import plain
from specdec.traffic.prompt_pool import Pool, TokenCounter, tolerance, unit_hash

#: Farthest a timestamp may lie from the trace's zero (30 days, in ms).
MAX_SPAN_MS = MAX_ARRIVAL_MS
#: Longest input length a row may give (no served model reads more).
MAX_INPUT_TOKENS = 100_000_000


@dataclass(slots=True)
class TraceRow:
    """One well-formed row of a trace, in common units."""

    row: int  # 1-based row number in the file (see the module docstring)
    time_ms: float  # the row's timestamp on the trace's own clock, in ms
    input_tokens: int
    output_tokens: int
    session: str | None = None
    hash_ids: tuple[int, ...] = ()
    model: str | None = None
    label: str | None = None  # a category the trace itself gives (Azure code / conversation)


@dataclass(slots=True)
class Malformed:
    row: int
    field: str | None
    problem: str


class ImportOptions(BaseModel):
    """What to keep and how to give it content."""

    model_config = ConfigDict(extra="forbid")

    start_s: float = Field(default=0.0, ge=0, description="Window start, seconds from the trace start.")
    end_s: float | None = Field(
        default=None, gt=0, description="Window end (exclusive), seconds from the trace start; None: the end."
    )
    keep_fraction: float = Field(
        default=1.0, gt=0, le=1, description="Fraction of rows (sessions) kept by seeded hash thinning."
    )
    seed: int = Field(default=0, description="Seed of the thinning and of every content choice.")
    skip_bad: bool = Field(
        default=False, description="Skip malformed rows and count them, instead of refusing the file."
    )
    category: str | None = Field(default=None, description="Give every row a prompt of this category (or tier).")
    mix: dict[str, float] | None = Field(
        default=None,
        description="Category (or tier) -> share; normalized to sum to 1 (the CLI's --mix already sums to 1).",
    )
    max_input_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Compose at most this many input tokens per row; rows above are capped and counted.",
    )
    fit_context: int | None = Field(
        default=None,
        ge=2,
        description="The served model's context length: each row's input is capped so that input + max_tokens fits it, the composition's tolerance included; rows whose output leaves no room are left out and counted.",
    )

    @model_validator(mode="after")
    def _check(self) -> ImportOptions:
        if self.end_s is not None and self.end_s <= self.start_s:
            raise ValueError(f"the window end ({self.end_s} s) must be after its start ({self.start_s} s)")
        if self.category and self.mix:
            raise ValueError("give --category or --mix, not both")
        if self.mix is not None and (any(not (w >= 0) for w in self.mix.values()) or not sum(self.mix.values()) > 0):
            raise ValueError("the weights of --mix must be numbers >= 0, not all 0")
        return self


@dataclass
class ImportReport:
    """Counts for the summary a person reads after an import."""

    fmt: str
    path: Path
    units: str
    read: int = 0
    malformed: Counter = field(default_factory=Counter)  # "field: problem" -> rows
    first_malformed: list[str] = field(default_factory=list)
    outside_window: int = 0
    thinned_out: int = 0
    clamped: int = 0
    rows: list[TrafficRow] = field(default_factory=list)
    content: Counter = field(default_factory=Counter)
    capped: int = 0
    unfit: int = 0  # rows left out: their output alone does not fit --fit-context
    options: ImportOptions | None = None
    kept: int = 0  # rows given content (in ``rows``, or written when streamed to a file)
    last_arrival_ms: float = 0.0
    categories: Counter = field(default_factory=Counter)

    def count(self, category: str, arrival_ms: float) -> None:
        """One more row kept."""
        self.kept += 1
        self.last_arrival_ms = arrival_ms
        self.categories[category] += 1

    def lines(self) -> list[str]:
        o = self.options
        assert o is not None  # every report is made with its options (importers._open)
        kept = self.kept
        out = [f"{self.fmt}: read {self.read} rows from {self.path} ({self.units})"]
        skipped = [f"{sum(self.malformed.values())} malformed"]
        window = f"[{o.start_s:g} s, {'end' if o.end_s is None else f'{o.end_s:g} s'})"
        skipped.append(f"{self.outside_window} outside the window {window}")
        skipped.append(
            f"{self.thinned_out} thinned out (--keep-fraction {o.keep_fraction:g}, seeded hash, seed {o.seed})"
        )
        if o.fit_context is not None:
            skipped.append(f"{self.unfit} whose output alone does not fit --fit-context {o.fit_context}")
        out.append(f"kept {kept}; skipped: " + ", ".join(skipped))
        for reason, n in self.malformed.most_common():
            out.append(f"  malformed: {n} x {reason}")
        out.extend(f"  first malformed: {m}" for m in self.first_malformed)
        out.append(f"max_tokens clamped to 1 (recorded output 0): {self.clamped} rows")
        if kept:
            span = self.last_arrival_ms / 1000.0
            rate = f"{kept / span:.2f} req/s" if span > 0 else "one instant"
            out.append(f"time span: {span:.3f} s over {kept} rows ({rate})")
            out.append("categories: " + ", ".join(f"{c} {n}" for c, n in self.categories.most_common()))
            out.append(
                "content: "
                + ", ".join(f"{s} {n}" for s, n in sorted(self.content.items()))
                + " (ok: within tolerance; over: prompt alone longer; short: material exhausted)"
                + f"; input capped (--max-input-tokens, --fit-context): {self.capped}"
            )
        return out


def out_of_range(rec: TraceRow, fields: dict[str, str]) -> Malformed | None:
    """The row's first value outside the ranges the module docstring states;
    ``fields`` names the format's columns (time, input, output)."""
    if not math.isfinite(rec.time_ms) or abs(rec.time_ms) > MAX_SPAN_MS:
        return Malformed(
            rec.row,
            fields["time"],
            f"the timestamp ({rec.time_ms:g} ms from the trace's zero) must be "
            f"finite and within {MAX_SPAN_MS / 86_400_000:g} days of it",
        )
    if rec.input_tokens > MAX_INPUT_TOKENS:
        return Malformed(
            rec.row, fields["input"], f"{rec.input_tokens} input tokens is above the bound of {MAX_INPUT_TOKENS:,}"
        )
    if rec.output_tokens > MAX_TOKENS_CEILING:
        return Malformed(
            rec.row,
            fields["output"],
            f"{rec.output_tokens} output tokens is above the bound of {MAX_TOKENS_CEILING:,} (max_tokens)",
        )
    return None


def checked(rows: Iterable[TraceRow | Malformed], fields: dict[str, str]) -> Iterator[TraceRow | Malformed]:
    """The parser's rows, those out of range turned Malformed."""
    for rec in rows:
        if not isinstance(rec, Malformed):
            rec = out_of_range(rec, fields) or rec
        yield rec


def read_rows(
    path: Path, rows: Iterable[TraceRow | Malformed], report: ImportReport, skip_bad: bool
) -> Iterator[TraceRow]:
    """Well-formed rows, as they come; refuse the first malformed one
    (InputFileError naming the file, row and field) or count it."""
    for rec in rows:
        report.read += 1
        if isinstance(rec, Malformed):
            if not skip_bad:
                raise InputFileError(
                    path, rec.problem + " (use --skip-bad to skip and count such rows)", row=rec.row, field=rec.field
                )
            report.malformed[f"{rec.field}: {rec.problem}" if rec.field else rec.problem] += 1
            if len(report.first_malformed) < 3:
                report.first_malformed.append(f"row {rec.row}, field {rec.field!r}: {rec.problem}")
            continue
        yield rec


@dataclass
class Survey:
    """What the first pass over a file learns: how many well-formed rows,
    the trace start, whether the rows are in time order."""

    rows: int = 0
    start_ms: float = math.inf
    in_order: bool = True


def survey(rows: Iterable[TraceRow]) -> Survey:
    out, last = Survey(), -math.inf
    for r in rows:
        out.rows += 1
        t = r.time_ms
        if t < last:
            out.in_order = False
        last = t
        if t < out.start_ms:
            out.start_ms = t
    return out


def in_time_order(rows: Iterable[TraceRow], known: Survey) -> Iterable[TraceRow]:
    """The rows by time (stable): as they come when the file is in order,
    else all held and sorted (only then does memory grow with the file)."""
    return rows if known.in_order else sorted(rows, key=lambda r: r.time_ms)


def select(
    rows: Iterable[TraceRow], opts: ImportOptions, report: ImportReport, start: float | None = None
) -> Iterator[TraceRow]:
    """Keep the window, thin by the seeded hash; ``rows`` in time order,
    ``start`` the trace start (default: the first row's time)."""
    lo = hi = None
    for r in rows:
        if lo is None:
            start = r.time_ms if start is None else start
            lo = start + opts.start_s * 1000.0
            hi = None if opts.end_s is None else start + opts.end_s * 1000.0
        if r.time_ms < lo or (hi is not None and r.time_ms >= hi):
            report.outside_window += 1
        elif (
            opts.keep_fraction < 1.0
            # the salt "sample" is the option's former name, kept so a seed keeps the same sessions
            and unit_hash(opts.seed, "sample", f"s:{r.session}" if r.session else f"r:{r.row}") >= opts.keep_fraction
        ):
            report.thinned_out += 1
        else:
            yield r


def traffic_values(
    rows: Iterable[TraceRow], source: str, opts: ImportOptions, pool: Pool, counter: TokenCounter, report: ImportReport
) -> Iterator[dict]:
    """Each kept row's TrafficRow fields (a dict, so a writer can fill
    column buffers without a model object per row; ``prompt`` and ``messages`` may be
    ``utf8.Utf8Parts``, which ``writer`` takes as it is): content, arrival from the
    first kept row, sessions numbered by turn among the kept rows."""
    assigner = ContentAssigner(pool, counter, opts.seed, opts.category, opts.mix, opts.max_input_tokens)
    turns: Counter = Counter()
    t0 = None
    for r in rows:
        key = f"{source}-r{r.row}"
        cap = None
        if opts.fit_context is not None:
            room = opts.fit_context - max(1, r.output_tokens)
            cap = room - tolerance(room)  # so that even a composition at the top of the tolerance fits
            if cap < 1:
                report.unfit += 1
                continue
        done = assigner.assign(
            key, r.input_tokens, r.output_tokens, label=r.label, hash_ids=r.hash_ids, session=r.session, cap=cap
        )
        if r.output_tokens < 1:
            report.clamped += 1
        session = turn = None
        if r.session is not None:
            session, turn = r.session, turns[r.session]
            turns[r.session] += 1
        t0 = r.time_ms if t0 is None else t0
        arrival = round(r.time_ms - t0, 6)
        report.count(done.category, arrival)
        yield {
            "prompt_id": key,
            "category": done.category,
            "max_tokens": max(1, r.output_tokens),
            "temperature": 0.0,
            "model": r.model,
            "arrival_ms": arrival,
            "session_id": session,
            "turn_index": turn,
            "input_tokens": r.input_tokens,
            "recorded_output_tokens": r.output_tokens,
            "tier": done.tier,
            "source": source,
            "content_note": done.note,
            "prompt": done.prompt,
            "messages": done.messages,
        }
        report.content[done.status] += 1
    report.capped = assigner.capped


def to_traffic(
    rows: Iterable[TraceRow], source: str, opts: ImportOptions, pool: Pool, counter: TokenCounter, report: ImportReport
) -> list[TrafficRow]:
    """``traffic_values`` as validated TrafficRow records (small imports, the tests)."""
    return [
        TrafficRow(**{**v, "prompt": plain(v["prompt"]), "messages": plain(v["messages"])})
        for v in traffic_values(rows, source, opts, pool, counter, report)
    ]


def _json(value) -> str:
    import json

    return json.dumps(value, ensure_ascii=False)


def number_rows(lines: Iterator[str], first: int) -> Iterator[tuple[int, str]]:
    """Pair lines with their 1-based row numbers, skipping blank lines."""
    for i, line in enumerate(lines, start=first):
        if line.strip():
            yield i, line
