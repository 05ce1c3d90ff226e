"""Load and validate a traffic mix (Parquet or JSON Lines of TrafficRow,
format version ``TRAFFIC_SCHEMA_VERSION``; a version-1 file is a valid
version-2 file).

Every problem is reported with the file, the row and the field. A row is
1-based, as a person counts: in JSON Lines it is the line number (blank lines
count), in Parquet the row index + 1. The field rules are strict
(``specdec.schemas.strict``); how the file itself is read: ``specdec.traffic.raw``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from specdec.errors import InputFileError
from specdec.schemas.records import TrafficRow
from specdec.traffic.raw import describe_error, read_traffic_records

BUNDLED = Path(__file__).parent / "data" / "demo_traffic.jsonl"


@dataclass(frozen=True)
class Traffic:
    path: Path
    sha256: str
    rows: list[TrafficRow]

    @property
    def categories(self) -> list[str]:
        return sorted({r.category for r in self.rows})

    def summary(self) -> dict:
        return {
            "path": str(self.path),
            "sha256": self.sha256,
            "rows": len(self.rows),
            "categories": {c: sum(r.category == c for r in self.rows) for c in self.categories},
        }


def load_traffic(path: str | Path, max_model_len: int | None = None) -> Traffic:
    """Read and validate a traffic file; raise InputFileError naming file, row
    and field on the first problem.

    ``max_model_len``: the served model's context length, when known. A row
    whose ``max_tokens`` is ``>= max_model_len`` is refused: it leaves no room
    for even a one-token prompt. The prompt's own length is not checked here:
    it is known only after the server's tokenizer and chat template have run,
    so a prompt that makes a row overflow fails as a request (a recorded
    failure), not here.
    """
    path = Path(path)
    if max_model_len is not None and (
        isinstance(max_model_len, bool) or not isinstance(max_model_len, int) or max_model_len < 2
    ):
        raise ValueError(f"max_model_len must be an integer >= 2, got {max_model_len!r}")
    if not path.is_file():
        raise InputFileError(path, "no such file")
    raw = path.read_bytes()  # parsed (JSON Lines) and hashed for the manifest: one read
    records = read_traffic_records(path, raw)
    if not records:
        raise InputFileError(path, "the file holds no rows")
    rows: list[TrafficRow] = []
    seen: dict[str, int] = {}
    for row_no, rec in records:
        try:
            row = TrafficRow.model_validate(rec)
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(p) for p in err["loc"]) or None
            raise InputFileError(path, describe_error(err), row=row_no, field=field) from None
        if max_model_len is not None and row.max_tokens >= max_model_len:
            raise InputFileError(
                path,
                f"max_tokens {row.max_tokens} does not fit the model's context of {max_model_len} "
                f"tokens (max_model_len), which must also hold the prompt; use less than {max_model_len}",
                row=row_no,
                field="max_tokens",
            )
        if row.prompt_id in seen:
            raise InputFileError(
                path,
                f"duplicate prompt_id {row.prompt_id!r} (first at row {seen[row.prompt_id]})",
                row=row_no,
                field="prompt_id",
            )
        seen[row.prompt_id] = row_no
        rows.append(row)
    return Traffic(path=path, sha256=hashlib.sha256(raw).hexdigest(), rows=rows)


def write_traffic_parquet(traffic: Traffic, out: Path) -> None:
    from specdec.schemas.arrow import table_from_records, write_parquet_atomic  # heavy: pyarrow, only when written

    write_parquet_atomic(table_from_records(TrafficRow, traffic.rows), out)
