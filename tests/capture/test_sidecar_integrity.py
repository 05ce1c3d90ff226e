"""The sidecar never launders damaged data into the lake (issue 24, case 2):
a part file written by the capture writer, then damaged on disk (500 zeroed
bytes inside a page, footer intact), still decodes without a checksum check,
with values changed. Compaction must find it, leave it in place, count it and
log it; a sound part beside it is compacted as before."""

import asyncio
import logging
import random

import pyarrow.parquet as pq
import pytest

from specdec.capture.sidecar.lake import Compactor
from specdec.capture.sidecar.service import Sidecar, SidecarSettings
from specdec.capture.writer import RoundWriter
from specdec.runfolder import LAKE_ROUNDS_GLOB, ROUND_PART_GLOB
from tests.support.capture_rows import rows

N = 2000


def _writer_part(folder, seed: int):
    """The one part file the real capture writer writes into the empty
    ``folder``: N rows, random verify_ms (incompressible, so zeroed bytes stay
    inside snappy literals and still decode)."""
    writer = RoundWriter(folder, start_thread=False)
    cols = rows(N)
    rnd = random.Random(seed)
    cols["verify_ms"] = [rnd.uniform(1.0, 90.0) for _ in range(N)]
    writer.append_rows(cols)
    assert writer.flush() == N
    writer.close()
    (part,) = folder.glob(ROUND_PART_GLOB)
    return part


def _zero_inside_a_page(path, column: str = "verify_ms", n: int = 500) -> None:
    """Zero ``n`` bytes inside the first page of ``column``'s chunk, past its page header."""
    rg = pq.ParquetFile(path).metadata.row_group(0)
    chunk = next(rg.column(j) for j in range(rg.num_columns) if rg.column(j).path_in_schema == column)
    first_page = chunk.dictionary_page_offset or chunk.data_page_offset
    start = first_page + 100
    assert start + n < chunk.data_page_offset + chunk.total_compressed_size  # inside the chunk, not the footer
    data = bytearray(path.read_bytes())
    data[start : start + n] = bytes(n)
    path.write_bytes(bytes(data))


def test_a_part_with_a_zeroed_page_is_not_compacted_stays_and_is_counted(tmp_path, caplog):
    cap, lake = tmp_path / "cap", tmp_path / "lake"
    damaged = _writer_part(cap, seed=7)
    before = pq.read_table(damaged)["verify_ms"].to_pylist()
    _zero_inside_a_page(damaged)
    size = damaged.stat().st_size
    # the damage is silent without a checksum check: the file decodes, values differ
    after = pq.read_table(damaged)["verify_ms"].to_pylist()
    assert len(after) == N and sum(a != b for a, b in zip(before, after)) > 10

    comp = Compactor(cap, lake)
    with caplog.at_level(logging.ERROR, logger="specdec.capture.sidecar.service"):
        first = comp.compact_once()
    second = comp.compact_once()

    assert (first.files, first.rows) == (0, 0)
    assert (first.unreadable_files, first.damaged_files, first.rows_dropped) == (1, 1, N)
    assert (second.unreadable_files, second.damaged_files) == (0, 0)  # counted once
    assert damaged.exists() and damaged.stat().st_size == size  # left where it was, untouched
    assert not list(lake.glob(LAKE_ROUNDS_GLOB))
    assert comp.unreadable == 1
    assert any(
        str(damaged) in r.getMessage() and "damaged" in r.getMessage() and "checksum" in r.getMessage()
        for r in caplog.records
    )


def test_a_sound_part_beside_a_damaged_one_is_still_compacted(tmp_path):
    cap, lake = tmp_path / "cap", tmp_path / "lake"
    sound_dir, bad_dir = tmp_path / "s", tmp_path / "b"
    sound = _writer_part(sound_dir, seed=3)
    bad = _writer_part(bad_dir, seed=4)
    _zero_inside_a_page(bad)
    cap.mkdir()
    sound, bad = sound.rename(cap / sound.name), bad.rename(cap / bad.name)

    result = Compactor(cap, lake).compact_once()

    assert (result.files, result.rows, result.damaged_files) == (1, N, 1)
    assert not sound.exists() and bad.exists()
    lake_rows = sum(pq.read_table(f).num_rows for f in lake.glob(LAKE_ROUNDS_GLOB))
    assert lake_rows == N


@pytest.mark.parametrize("column", ["step_index", "round_index"])
def test_damage_in_any_column_is_found(tmp_path, column):
    cap = tmp_path / "cap"
    part = _writer_part(cap, seed=5)
    _zero_inside_a_page(part, column)  # the chunk is about 10 KiB: 2000 distinct integers
    result = Compactor(cap, tmp_path / "lake").compact_once()
    assert (result.files, result.damaged_files) == (0, 1) and part.exists()


def test_the_damaged_count_reaches_the_endpoint(tmp_path):
    cap = tmp_path / "cap"
    _zero_inside_a_page(_writer_part(cap, seed=9))
    settings = SidecarSettings(capture_dir=cap, lake=tmp_path / "lake", server="http://127.0.0.1:9", port=0)

    async def go():
        sc = Sidecar(settings)
        await sc.compact()
        return sc.metrics.render(0)

    text = asyncio.run(go())
    assert "specdec_sidecar_damaged_files_total 1" in text.splitlines()
    assert "specdec_sidecar_unreadable_files_total 1" in text.splitlines()
