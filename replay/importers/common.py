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
* Down-sampling (``--sample F``) is independent thinning by a seeded hash: a
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
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

from pydantic import BaseModel, ConfigDict, Field, model_validator

from specdec.errors import InputFileError
from specdec.replay.importers.content import ContentAssigner
from specdec.replay.prompt_pool import Pool, TokenCounter, tolerance, unit_hash
from specdec.schemas.records import TrafficRow


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
    end_s: float | None = Field(default=None, gt=0, description="Window end (exclusive), seconds from the trace start; None: the end.")
    sample: float = Field(default=1.0, gt=0, le=1, description="Fraction of rows (sessions) kept by seeded hash thinning.")
    seed: int = Field(default=0, description="Seed of the thinning and of every content choice.")
    skip_bad: bool = Field(default=False, description="Skip malformed rows and count them, instead of refusing the file.")
    category: str | None = Field(default=None, description="Give every row a prompt of this category (or tier).")
    mix: dict[str, float] | None = Field(default=None, description="Category (or tier) -> share; normalized to sum to 1 (the CLI's --mix already sums to 1).")
    max_input_tokens: int | None = Field(default=None, ge=1, description="Compose at most this many input tokens per row; rows above are capped and counted.")
    fit_context: int | None = Field(default=None, ge=2, description="The served model's context length: each row's input is capped so that input + max_tokens fits it, the composition's tolerance included; rows whose output leaves no room are left out and counted.")

    @model_validator(mode="after")
    def _check(self) -> "ImportOptions":
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
    sampled_out: int = 0
    clamped: int = 0
    rows: list[TrafficRow] = field(default_factory=list)
    content: Counter = field(default_factory=Counter)
    capped: int = 0
    unfit: int = 0  # rows left out: their output alone does not fit --fit-context
    options: ImportOptions | None = None

    def lines(self) -> list[str]:
        o = self.options
        kept = len(self.rows)
        out = [f"{self.fmt}: read {self.read} rows from {self.path} ({self.units})"]
        skipped = [f"{sum(self.malformed.values())} malformed"]
        window = f"[{o.start_s:g} s, {'end' if o.end_s is None else f'{o.end_s:g} s'})"
        skipped.append(f"{self.outside_window} outside the window {window}")
        skipped.append(f"{self.sampled_out} thinned out (--sample {o.sample:g}, seeded hash, seed {o.seed})")
        if o.fit_context is not None:
            skipped.append(f"{self.unfit} whose output alone does not fit --fit-context {o.fit_context}")
        out.append(f"kept {kept}; skipped: " + ", ".join(skipped))
        for reason, n in self.malformed.most_common():
            out.append(f"  malformed: {n} x {reason}")
        out.extend(f"  first malformed: {m}" for m in self.first_malformed)
        out.append(f"max_tokens clamped to 1 (recorded output 0): {self.clamped} rows")
        if kept:
            span = self.rows[-1].arrival_ms / 1000.0
            rate = f"{kept / span:.2f} req/s" if span > 0 else "one instant"
            out.append(f"time span: {span:.3f} s over {kept} rows ({rate})")
            cats = Counter(r.category for r in self.rows)
            out.append("categories: " + ", ".join(f"{c} {n}" for c, n in cats.most_common()))
            out.append("content: " + ", ".join(f"{s} {n}" for s, n in sorted(self.content.items()))
                       + f" (ok: within tolerance; over: prompt alone longer; short: material exhausted)"
                       + f"; input capped (--max-input-tokens, --fit-context): {self.capped}")
        return out


def read_rows(path: Path, rows: Iterable[TraceRow | Malformed], report: ImportReport,
              skip_bad: bool) -> list[TraceRow]:
    """Collect well-formed rows; refuse the first malformed one (InputFileError
    naming the file, row and field) or count it."""
    good = []
    for rec in rows:
        report.read += 1
        if isinstance(rec, Malformed):
            if not skip_bad:
                raise InputFileError(path, rec.problem + " (use --skip-bad to skip and count such rows)",
                                     row=rec.row, field=rec.field)
            report.malformed[f"{rec.field}: {rec.problem}" if rec.field else rec.problem] += 1
            if len(report.first_malformed) < 3:
                report.first_malformed.append(f"row {rec.row}, field {rec.field!r}: {rec.problem}")
            continue
        good.append(rec)
    return good


def select(rows: list[TraceRow], opts: ImportOptions, report: ImportReport) -> list[TraceRow]:
    """Sort by time (stable), keep the window, thin by the seeded hash."""
    if not rows:
        return []
    rows = sorted(rows, key=lambda r: r.time_ms)
    start = rows[0].time_ms
    lo = start + opts.start_s * 1000.0
    hi = None if opts.end_s is None else start + opts.end_s * 1000.0
    kept = []
    for r in rows:
        if r.time_ms < lo or (hi is not None and r.time_ms >= hi):
            report.outside_window += 1
        elif opts.sample < 1.0 and unit_hash(opts.seed, "sample", f"s:{r.session}" if r.session else f"r:{r.row}") >= opts.sample:
            report.sampled_out += 1
        else:
            kept.append(r)
    return kept


def to_traffic(rows: list[TraceRow], source: str, opts: ImportOptions, pool: Pool, counter: TokenCounter,
               report: ImportReport) -> list[TrafficRow]:
    """Traffic rows with content, arrival from the first kept row, sessions
    numbered by turn among the kept rows."""
    assigner = ContentAssigner(pool, counter, opts.seed, opts.category, opts.mix, opts.max_input_tokens)
    out, turns = [], Counter()
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
        done = assigner.assign(key, r.input_tokens, r.output_tokens, label=r.label, hash_ids=r.hash_ids,
                               session=r.session, cap=cap)
        if r.output_tokens < 1:
            report.clamped += 1
        session = turn = None
        if r.session is not None:
            session, turn = r.session, turns[r.session]
            turns[r.session] += 1
        t0 = r.time_ms if t0 is None else t0
        content = ({"prompt": done.messages[0]["content"]} if len(done.messages) == 1
                   else {"messages": _json(done.messages)})
        out.append(TrafficRow(
            prompt_id=key, category=done.category, max_tokens=max(1, r.output_tokens), temperature=0.0,
            model=r.model, arrival_ms=round(r.time_ms - t0, 6), session_id=session, turn_index=turn,
            input_tokens=r.input_tokens, recorded_output_tokens=r.output_tokens, tier=done.tier,
            source=source, content_note=done.note, **content,
        ))
    report.content.update(assigner.statuses)
    report.capped = assigner.capped
    return out


def _json(value) -> str:
    import json

    return json.dumps(value, ensure_ascii=False)


def number_rows(lines: Iterator[str], first: int) -> Iterator[tuple[int, str]]:
    """Pair lines with their 1-based row numbers, skipping blank lines."""
    for i, line in enumerate(lines, start=first):
        if line.strip():
            yield i, line
