"""Closed-loop replay of a traffic mix, arm by arm, level by level.

For each arm: reach the server, send warm-up requests (any failure there stops
the run at once with a message that names the URL, the status and the likely
fix), then for each concurrency level C keep exactly C requests in flight
until the level's requests are done, bracketed by two reads of the engine's
counters. Results are written per level as soon as the level ends, so an
interrupted run keeps every finished level (and the in-flight level's
completed requests).
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import aiohttp
import pyarrow as pa

from specdec.errors import EngineError
from specdec.replay.client import ClientSettings, StreamResult, as_endpoint, stream_chat
from specdec.replay.config import ReplayConfig
from specdec.replay.engine_metrics import read_counters
from specdec.replay.progress import Progress
from specdec.replay.traffic import Traffic
from specdec.replay.urls import Endpoint
from specdec.runfolder import counters_part, requests_part
from specdec.schemas.arrow import table_from_columns, table_from_records, write_parquet_atomic
from specdec.schemas.records import MetricSnapshot, RequestResult, TrafficRow

log = logging.getLogger("specdec.replay")


def request_id(run_id: str, arm: str, level: int, seq: int) -> str:
    """Client request id; vLLM embeds it in its engine request id."""
    return f"sd.{run_id}.{arm}.c{level}.{seq:05d}"


def request_id_prefix(run_id: str) -> str:
    """What every request id of a run starts with (used to find its captured rows)."""
    return f"sd.{run_id}."


def level_rows(traffic: Traffic, cfg: ReplayConfig) -> list[TrafficRow]:
    n = cfg.requests_per_level or len(traffic.rows)
    rows = [traffic.rows[i % len(traffic.rows)] for i in range(n)]
    if cfg.max_tokens:
        rows = [r.model_copy(update={"max_tokens": cfg.max_tokens}) for r in rows]
    return rows


async def run_level(session, base_url: str | Endpoint, model: str, rows: list[TrafficRow], level: int,
                    make_id, settings: ClientSettings | None = None, on_done=None,
                    results: list | None = None) -> list[tuple[TrafficRow, StreamResult]]:
    """Keep `level` requests in flight until all rows are sent; return results in
    finish order. Pass `results` to keep what finished if the level is interrupted."""
    results = [] if results is None else results
    ep = as_endpoint(base_url)
    next_index = 0

    async def worker() -> None:
        nonlocal next_index
        while next_index < len(rows):
            i = next_index
            next_index += 1
            res = await stream_chat(session, ep, model, rows[i], make_id(i), settings)
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


def failure_hint(ep: Endpoint, res: StreamResult, settings: ClientSettings, model: str) -> str:
    """The likely fix for a failed warm-up request, in one sentence."""
    status = res.http_status
    if res.error_type == "http_status":
        if status in (401, 403):
            return ("the server wants credentials: put the API key in the environment variable named by "
                    "--api-key-env (default OPENAI_API_KEY)" if not settings.api_key else
                    "the server refused the API key that was sent: check its value")
        if status == 404 and ep.path_ends_with_v1:
            return "remove the /v1 suffix from the URL: specdec appends /v1/chat/completions itself"
        if status == 404 and "model" in (res.error_message or "").lower():
            return f"the server does not serve a model named {model!r}: check --served-model (GET /v1/models lists them)"
        if status in (404, 405, 501):
            return f"the server has no OpenAI-compatible {ep.display}/v1/chat/completions endpoint"
        if status == 400:
            return "the server rejected the request body: check --served-model and the traffic's max_tokens"
        return "the server failed the request: see its log"
    return {
        "connect_error": "is the server running and listening at that address?",
        "connect_timeout": "the host did not accept a connection: check the address and any firewall",
        "request_timeout": ("the server accepted the request but sent nothing for "
                            f"{settings.request_timeout_s:g} s: is it hung or overloaded? (--request-timeout)"),
        "not_streamed": "the server ignored stream=true: it does not look like an OpenAI-compatible streaming server",
        "stream_truncated": "the server closed the stream early: see its log",
        "no_usage": "the server ignored stream_options.include_usage, so output tokens cannot be counted",
    }.get(res.error_type or "", "see the error message")


async def settled_counters(session, ep: Endpoint, settings: ClientSettings, tries: int = 20) -> dict:
    """Read /metrics until two reads agree (stats are recorded after the last chunk)."""
    try:
        prev = await read_counters(session, ep, settings)
        for _ in range(tries):
            await asyncio.sleep(0.2)
            cur = await read_counters(session, ep, settings)
            if cur == prev:
                return cur
            prev = cur
        return prev
    except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
        raise EngineError(
            f"could not read {ep.display}/metrics ({type(exc).__name__}); the server stopped "
            "answering. Requests that finished are saved in the run folder."
        ) from None


def results_table(run_id: str, arm: str, level: int, results) -> pa.Table:
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
    """Runs every level of one arm against one server and writes its files."""

    def __init__(self, cfg: ReplayConfig, run_id: str, run_dir: Path, traffic: Traffic,
                 progress: Progress):
        self.cfg, self.run_id, self.run_dir, self.traffic = cfg, run_id, run_dir, traffic
        self.progress = progress
        self.settings = cfg.client_settings()
        self.snapshots: dict[str, list[MetricSnapshot]] = {}
        self.failed: dict[tuple[str, int], int] = {}  # (arm, level) -> failed requests

    async def run(self, arm: str, base_url: str | Endpoint) -> None:
        cfg = self.cfg
        ep = as_endpoint(base_url)
        rows = level_rows(self.traffic, cfg)
        requests_part(self.run_dir, arm, 0).parent.mkdir(parents=True, exist_ok=True)
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as session:
            await self._warmup(session, arm, ep, rows)
            for level in cfg.levels:
                await self._level(session, arm, ep, rows, level)

    async def _warmup(self, session, arm: str, ep: Endpoint, rows: list[TrafficRow]) -> None:
        """Unrecorded requests before the first level; ``--warmup 0`` still sends
        one, so a misconfigured server stops the run before anything is measured."""
        warm = rows[: max(self.cfg.warmup_requests, 1)]
        results = await run_level(session, ep, self.cfg.served_model, warm, 1,
                                  lambda i: request_id(self.run_id, arm, 0, i) + ".warmup", self.settings)
        for _, res in results:
            if not res.success:
                status = f"HTTP {res.http_status}" if res.http_status is not None else res.error_type
                raise EngineError(
                    f"the {arm} server at {ep.display} failed the warm-up request ({status}): "
                    f"{res.error_message}\nLikely fix: "
                    f"{failure_hint(ep, res, self.settings, self.cfg.served_model)}"
                )

    async def _level(self, session, arm: str, ep: Endpoint, rows, level: int) -> None:
        self._snapshot(arm, level, "before", await settled_counters(session, ep, self.settings))
        task = self.progress.start_level(arm, level, len(rows))
        results: list = []
        try:
            await run_level(
                session, ep, self.cfg.served_model, rows, level,
                lambda i: request_id(self.run_id, arm, level, i), self.settings,
                on_done=lambda res: self.progress.advance(task, res), results=results,
            )
        finally:
            # keep whatever finished, even on Ctrl-C or a dead server
            if results:
                write_parquet_atomic(results_table(self.run_id, arm, level, results),
                                     requests_part(self.run_dir, arm, level))
            self.failed[(arm, level)] = sum(not res.success for _, res in results)
        self._snapshot(arm, level, "after", await settled_counters(session, ep, self.settings))
        self.progress.end_level(task)

    def _snapshot(self, arm: str, level: int, position: str, counters: dict) -> None:
        """One snapshot per arm, level and position; each arm has its own file."""
        snaps = [s for s in self.snapshots.get(arm, [])
                 if (s.concurrency, s.position) != (level, position)]
        snaps.append(MetricSnapshot(
            run_id=self.run_id, arm=arm, concurrency=level, position=position,
            wall_time_ns=time.time_ns(), **counters,
        ))
        self.snapshots[arm] = snaps
        write_parquet_atomic(table_from_records(MetricSnapshot, snaps), counters_part(self.run_dir, arm))
