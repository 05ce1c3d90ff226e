"""StreamResult -> RequestResult: per-chunk token counts become a list aligned
with the chunk offsets, or None (unknown) when the server did not report them."""

from specdec.replay.http.client import StreamResult
from specdec.replay.runner import results_table
from specdec.schemas.records import TrafficRow

ROW = TrafficRow(prompt_id="p1", category="code", prompt="hi", max_tokens=4)


def _res(offsets: list[float], tokens: list[int]) -> StreamResult:
    return StreamResult(
        request_id="r",
        wall_send_ns=1,
        success=True,
        ttft_ms=offsets[0] if offsets else None,
        e2e_ms=10.0,
        chunk_offsets_ms=offsets,
        chunk_tokens=tokens,
        output_tokens=4,
    )


def test_chunk_tokens_are_recorded_or_unknown_never_partial():
    table = results_table(
        "t",
        "speculative",
        1,
        [
            (ROW, _res([1.0, 5.0], [1, 4])),  # reported for every chunk
            (ROW, _res([1.0, 5.0], [])),  # not reported: unknown
            (ROW, _res([], [])),  # no content chunk: nothing to count
        ],
    )
    assert table.column("chunk_tokens").to_pylist() == [[1, 4], None, []]
