"""Reading DuckDB in the tests: a query's rows as dicts (column name -> value).

One helper for every test that reads a built database (it was written out in
about ten test modules).
"""

from __future__ import annotations

from pathlib import Path

import duckdb


def rows(db, sql: str, *params) -> list[dict]:
    """The rows of ``sql`` as dicts. ``db`` is a database file (opened
    read-only, closed again) or an open connection; ``params`` are the
    query's ``?`` parameters, one by one or as a single list."""
    if len(params) == 1 and isinstance(params[0], (list, tuple)):
        params = tuple(params[0])
    if isinstance(db, (str, Path)):
        con = duckdb.connect(str(db), read_only=True)
        try:
            return rows(con, sql, *params)
        finally:
            con.close()
    cur = db.execute(sql, list(params))
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r)) for r in cur.fetchall()]
