"""Closed-loop replay of a traffic mix, arm by arm, level by level.

For each arm: start (or reach) the server, send warm-up requests, then for
each concurrency level C keep exactly C requests in flight until the level's
requests are done, bracketed by two reads of the engine's counters. Results
are written per level as soon as the level ends, so an interrupted run keeps
every finished level (and the in-flight level's completed requests).
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import aiohttp

from specdec.errors import EngineError
from specdec.replay.client import StreamResult, stream_chat
from specdec.replay.config import ReplayConfig
from specdec.replay.engine_metrics import read_counters
from specdec.replay.progress import Progress
from specdec.replay.traffic import Traffic
from specdec.runfolder import counters_part, requests_part
from specdec.runfolder import counters_part, requests_part
from specdec.schemas.arrow import table_from_columns, table_from_records, write_parquet_atomic
from specdec.schemas.records import MetricSnapshot, RequestResult, TrafficRow

log = logging.getLogger("specdec.replay")


def request_id(run_id: str, arm: str, level: int, seq: int) -> str:
    """Client request id; vLLM embeds it in its engine request id."""
    return f"sd.{run_id}.{arm}.c{level}.{seq:05d}"


def level_rows(traffic: Traffic, cfg: ReplayConfig) -> list[TrafficRow]:
    n = cfg.requests_per_level or len(traffic.rows)
    rows = [traffic.rows[i % len(traffic.rows)] for i in range(n)]
    if cfg.max_tokens:
        rows = [r.model_copy(update={"max_tokens": cfg.max_tokens}) for r in rows]
    return rows


async def run_level(session, base_url: str, model: str, rows: list[TrafficRow], level: int,
                    make_id, timeout_s: float, on_done=None,
                    results: list | None = None) -> list[tuple[TrafficRow, StreamResult]]:
    """Keep `level` requests in flight until all rows are sent; return results in
    finish order. Pass `results` to keep what finished if the level is interrupted."""
    results = [] if results is None else results
    next_index = 0

    async def worker() -> None:
        nonlocal next_index
        while next_index < len(rows):
            i = next_index
            next_index += 1
            res = await stream_chat(session, base_url, model, rows[i], make_id(i), timeout_s)
            results.append((rows[i], res))
            if on_done is not None:
                on_done(res)

    tasks = [asyncio.create_task(worker()) for _ in range(min(level, len(rows)))]
    try:
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
    return results


async def settled_counters(session, base_url: str, tries: int = 20) -> dict:
    """Read /metrics until two reads agree (stats are recorded after the last chunk)."""
    try:
        prev = await read_counters(session, base_url)
        for _ in range(tries):
            await asyncio.sleep(0.2)
            cur = await read_counters(session, base_url)
            if cur == prev:
                return cur
            prev = cur
        return prev
    except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
        raise EngineError(
            f"could not read {base_url}/metrics ({type(exc).__name__}: {exc}); the server stopped "
            "answering. Requests that finished are saved in the run folder."
        ) from None


def results_table(run_id: str, arm: str, level: int, results) -> "pa.Table":  # noqa: F821
    cols: dict[str, list] = {f: [] for f in RequestResult.model_fields}
    for row, res in results:
        values = {
            "run_id": run_id, "arm": arm, "concurrency": level, "prompt_id": row.prompt_id,
            "category": row.category, "max_tokens": row.max_tokens, "temperature": row.temperature,
        }
        for f in cols:
            cols[f].append(values[f] if f in values else getattr(res, f))
    return table_from_columns(RequestResult, cols)


class ArmRunner:
    """Runs every level of one arm against one base URL and writes its files."""

    def __init__(self, cfg: ReplayConfig, run_id: str, run_dir: Path, traffic: Traffic,
                 progress: Progress):
        self.cfg, self.run_id, self.run_dir, self.traffic = cfg, run_id, run_dir, traffic
        self.progress = progress
        self.snapshots: list[MetricSnapshot] = []

    async def run(self, arm: str, base_url: str) -> None:
        cfg = self.cfg
        rows = level_rows(self.traffic, cfg)
        requests_part(self.run_dir, arm, 0).parent.mkdir(parents=True, exist_ok=True)
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as session:
            if cfg.warmup_requests:
                warm = rows[: cfg.warmup_requests]
                await run_level(session, base_url, cfg.served_model, warm, 1,
                                lambda i: request_id(self.run_id, arm, 0, i) + ".warmup",
                                cfg.request_timeout_s)
            for level in cfg.levels:
                await self._level(session, arm, base_url, rows, level)

    async def _level(self, session, arm: str, base_url: str, rows, level: int) -> None:
        cfg = self.cfg
        self._snapshot(arm, level, "before", await settled_counters(session, base_url))
        task = self.progress.start_level(arm, level, len(rows))
        results: list = []
        try:
            await run_level(
                session, base_url, cfg.served_model, rows, level,
                lambda i: request_id(self.run_id, arm, level, i), cfg.request_timeout_s,
                on_done=lambda res: self.progress.advance(task, res), results=results,
            )
        finally:
            # keep whatever finished, even on Ctrl-C or a dead server
            if results:
                write_parquet_atomic(results_table(self.run_id, arm, level, results),
                                     requests_part(self.run_dir, arm, level))
        self._snapshot(arm, level, "after", await settled_counters(session, base_url))
        self.progress.end_level(task)

    def _snapshot(self, arm: str, level: int, position: str, counters: dict) -> None:
        self.snapshots.append(MetricSnapshot(
            run_id=self.run_id, arm=arm, concurrency=level, position=position,
            wall_time_ns=time.time_ns(), **counters,
        ))
        write_parquet_atomic(table_from_records(MetricSnapshot, self.snapshots),
                             counters_part(self.run_dir, arm))

