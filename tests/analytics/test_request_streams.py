"""The build reads what requests streamed (chunk offsets, texts) only where a model needs
it (issue 21): outputs are compared by the SHA-256 digest the replay writes
(``output_text_sha256``), computed from the text for files written before the column
existed, and the chunk gaps come from the lists without a lambda per element. Every mart
is the same, value for value, whichever way the digest arrives, and the same as the
definitions before the change (texts compared, gaps by the lambda), on a small run with a
chunk per engine step."""

from __future__ import annotations

import hashlib
import math
import shutil
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specdec.analytics.build import build
from specdec.analytics.sql_models import discover
from tests.support.synthetic_run import PROMPTS, repeated_requests, write_run


def _text(arm, prompt_id, level, repeat):
    """Most outputs agree; the speculative arm's p1 at level 2, and repeat 1 of p0, differ."""
    base = f"output of {prompt_id} " * 40
    if (arm, prompt_id, level) == ("speculative", PROMPTS[1][0], 2) or (prompt_id, repeat) == (PROMPTS[0][0], 1):
        return base + "!"
    return base


def _streamed(requests):
    """Each request with a chunk per engine step (uneven gaps) and its running token counts."""
    out = []
    for i, r in enumerate(requests):
        n = 20 + (i * 7) % 25
        gaps = [0.5 + ((i * 31 + j * 17) % 23) / 7 for j in range(n - 1)]
        offsets = [r.ttft_ms]
        for g in gaps:
            offsets.append(offsets[-1] + g)
        counts = [min(r.output_tokens, 1 + j * 3) for j in range(n)]
        out.append(
            r.model_copy(update={"chunk_offsets_ms": offsets, "chunk_tokens": counts, "e2e_ms": offsets[-1] + 1})
        )
    return out


def _requests():
    return _streamed(repeated_requests(lambda arm, pid, level, r: 1000 + 10 * level + 7 * r, text=_text))


def _rewrite(run: Path, change) -> None:
    path = run / "requests.parquet"
    table = pq.read_table(path)
    pq.write_table(change(table), path)


def _replace(table, name: str, values: list):
    return table.set_column(table.schema.get_field_index(name), name, pa.array(values, pa.string()))


def _digests(table):
    return [hashlib.sha256(t.encode()).hexdigest() for t in table.column("output_text").to_pylist()]


def _same(a, b) -> bool:
    """Value for value; a float to its last bits or so: DuckDB's parallel sums and averages
    add in an order of their own, so two builds of the same files can differ in the last
    bit (speedup_weighted's mean e2e times: 72.84214285714286 and ...85)."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or math.isclose(a, b, rel_tol=1e-13)
    if isinstance(a, (list, tuple, dict)):
        if isinstance(a, dict):
            return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _marts(run: Path) -> dict[str, list[tuple]]:
    con = duckdb.connect(str(build(run)), read_only=True)
    try:
        return {
            m.name: con.execute(f"select * from {m.name} order by all").fetchall()
            for m in discover()
            if m.layer == "marts"
        }
    finally:
        con.close()


@pytest.fixture
def runs(tmp_path):
    """The same run three ways: the digest stored by the writer; a file from before the
    column (no column); the column there but null."""
    (tmp_path / "stored").mkdir()
    (tmp_path / "nulls").mkdir()
    stored = write_run(tmp_path / "stored", requests=_requests())
    _rewrite(stored, lambda t: _replace(t, "output_text_sha256", _digests(t)))
    old = tmp_path / "old"
    shutil.copytree(stored, old)
    _rewrite(old, lambda t: t.drop_columns(["output_text_sha256"]))
    nulls = write_run(tmp_path / "nulls", requests=_requests())  # table_from_records: the column, all null
    return stored, old, nulls


def test_the_digest_is_what_python_writes():
    con = duckdb.connect()
    for text in ("", "same", "naïve 東京 \n\t'quoted'", "x" * 5000):
        assert con.execute("select sha256(?)", [text]).fetchone()[0] == hashlib.sha256(text.encode()).hexdigest()


def test_every_mart_is_the_same_whichever_way_the_digest_arrives(runs):
    stored, old, nulls = runs
    assert pq.read_schema(old / "requests.parquet").get_field_index("output_text_sha256") == -1
    marts = _marts(stored)
    assert _same(_marts(old), marts)
    assert _same(_marts(nulls), marts)
    assert marts["output_equality"] and marts["latency"] and marts["lossless"]


def test_the_stored_digest_is_used_and_the_texts_are_not_read(runs, tmp_path):
    stored = runs[0]
    blank = tmp_path / "blank"
    shutil.copytree(stored, blank)
    _rewrite(blank, lambda t: _replace(t, "output_text", [""] * t.num_rows))
    (blank / "specdec.duckdb").unlink(missing_ok=True)
    assert _same(_marts(blank), _marts(stored))


def test_the_marts_equal_the_definitions_before_the_change(runs):
    """Gaps by the former lambda, identity by comparing the texts themselves."""
    old = runs[1]
    con = duckdb.connect(str(build(old)), read_only=True)
    try:
        before = con.execute("""
            select arm, category, level, quantile_cont(g, [0.5, 0.95, 0.99])
            from (select arm, category, level,
                         unnest(list_transform(range(1, len(chunk_offsets_ms)),
                                lambda i: chunk_offsets_ms[i + 1] - chunk_offsets_ms[i])) as g
                  from raw_requests where success and len(chunk_offsets_ms) > 1)
            group by all order by all""").fetchall()
        after = con.execute("""
            select arm, category, level, [itl_chunk_gap_ms_p50, itl_chunk_gap_ms_p95, itl_chunk_gap_ms_p99]
            from latency order by all""").fetchall()
        assert after == before and len(before) == 8
        texts = con.execute("""
            select b.category, b.level, count(*), count(*) filter (where b.output_text = s.output_text)
            from raw_requests b join raw_requests s
              on s.prompt_id = b.prompt_id and s.level = b.level and s.repeat = b.repeat
            where b.arm = 'baseline' and s.arm = 'speculative' group by all order by all""").fetchall()
        marts = con.execute("select category, level, pairs, identical from output_equality order by all").fetchall()
        assert marts == texts and any(pairs != same for _, _, pairs, same in marts)
        aa = con.execute("""
            select count(*) filter (where b.output_text = a.output_text)
            from raw_requests b join raw_requests a
              on a.prompt_id = b.prompt_id and a.level = b.level and a.repeat = b.repeat + 1
            where b.arm = 'baseline' and a.arm = 'baseline'""").fetchone()[0]
        ours = con.execute(
            "select count(*) filter (where identical) from int_baseline_text_pairs where comparison = 'repeat'"
        ).fetchone()[0]
        assert ours == aa > 0
    finally:
        con.close()
