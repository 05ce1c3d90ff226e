"""What a server holds while a block runs: its memory and its KV cache,
read about once a second (``ResourceReading`` rows, ``resources.parquet``).

* Memory: the resident set of the server's whole process tree (vLLM's API
  server and its engine core are separate processes), read with psutil from
  the PID of a server specdec started. Shared pages count once per process, so
  the sum is an upper bound of what the tree holds; the peak over a block is
  what capacity planning compares between arms (the speculative arm adds a
  drafter and its buffers). A server specdec did not start has no PID here:
  ``rss_bytes`` is None.
* KV cache: ``vllm:kv_cache_usage_perc`` and ``vllm:num_requests_running``
  from ``/metrics`` (``engine_metrics.GAUGES``).

Sampling must not disturb what it measures: one psutil walk and one
``/metrics`` read per second per block, each bounded by a short timeout; a
failed read gives a row with None in that field, never an error, since the
block's requests already say whether the server was healthy.
"""

from __future__ import annotations

import asyncio
import time

import aiohttp

from specdec.engines.metrics import GAUGES
from specdec.replay.http.metrics import read_gauges

__all__ = ["INTERVAL_S", "process_tree_rss", "watch_block"]

INTERVAL_S = 1.0


def process_tree_rss(pid: int | None) -> int | None:
    """Sum of RSS over ``pid`` and its descendants; None without a PID or when
    the process is gone."""
    if pid is None:
        return None
    import psutil  # heavy: psutil, imported only when used

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue  # a child that ended between the walk and the read
    return total


async def watch_block(
    session: aiohttp.ClientSession,
    ep,
    settings,
    pid: int | None,
    out: list[dict],
    stop: asyncio.Event,
    interval_s: float = INTERVAL_S,
) -> None:
    """Append one reading (t_ms, wall_time_ns, rss_bytes, kv_cache_usage,
    requests_running) at once, one every ``interval_s`` while the block runs,
    and one when ``stop`` is set (the block's end state): at least two per
    block, however short."""
    start = time.monotonic()

    async def take() -> None:
        t_ms = (time.monotonic() - start) * 1000.0
        wall = time.time_ns()
        rss = await asyncio.to_thread(process_tree_rss, pid)
        try:
            gauges = await read_gauges(session, ep, settings, timeout_s=min(interval_s, 5.0))
        except (TimeoutError, aiohttp.ClientError, OSError):
            gauges = {k: None for k in GAUGES}
        out.append({"t_ms": t_ms, "wall_time_ns": wall, "rss_bytes": rss, **gauges})

    await take()
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), timeout=interval_s)
        except TimeoutError:
            await take()
    await take()
