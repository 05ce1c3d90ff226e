"""Load and validate a traffic mix (Parquet or JSON Lines of TrafficRow).

Every problem is reported with the file, the row number (1-based, as a person
counts) and the field.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from specdec.errors import InputFileError
from specdec.schemas.records import TrafficRow

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


def load_traffic(path: str | Path) -> Traffic:
    path = Path(path)
    if not path.is_file():
        raise InputFileError(path, "no such file")
    raw = path.read_bytes()
    if path.suffix == ".parquet":
        records = _read_parquet(path)
    elif path.suffix in (".jsonl", ".ndjson"):
        records = _read_jsonl(path, raw)
    else:
        raise InputFileError(path, "unknown format: expected .parquet or .jsonl")
    if not records:
        raise InputFileError(path, "the file holds no rows")
    rows: list[TrafficRow] = []
    seen: dict[str, int] = {}
    for i, rec in enumerate(records, start=1):
        try:
            row = TrafficRow.model_validate(rec)
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(p) for p in err["loc"]) or None
            raise InputFileError(path, err["msg"], row=i, field=field) from None
        if row.prompt_id in seen:
            raise InputFileError(
                path, f"duplicate prompt_id {row.prompt_id!r} (first at row {seen[row.prompt_id]})",
                row=i, field="prompt_id",
            )
        seen[row.prompt_id] = i
        rows.append(row)
    return Traffic(path=path, sha256=hashlib.sha256(raw).hexdigest(), rows=rows)


def _read_jsonl(path: Path, raw: bytes) -> list[dict]:
    out = []
    for i, line in enumerate(raw.decode("utf-8", errors="strict").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputFileError(path, f"invalid JSON ({exc.msg} at column {exc.colno})", row=i) from None
        if not isinstance(obj, dict):
            raise InputFileError(path, "each line must be a JSON object", row=i)
        out.append(obj)
    return out


def _read_parquet(path: Path) -> list[dict]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:
        raise InputFileError(path, f"not a readable Parquet file ({exc})") from None
    return table.to_pylist()


def write_traffic_parquet(traffic: Traffic, out: Path) -> None:
    from specdec.schemas.arrow import table_from_records, write_parquet_atomic

    write_parquet_atomic(table_from_records(TrafficRow, traffic.rows), out)
