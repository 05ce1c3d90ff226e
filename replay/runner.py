"""Replay of a traffic mix, arm by arm, level by level.

For each arm: reach the server, send warm-up requests (any failure there stops
the run at once with a message that names the URL, the status and the likely
fix), then for each concurrency level C keep exactly C requests in flight
until the level's requests are done (or, in open loop, send each request at
its planned time: ``specdec.replay.load.modes``), bracketed by two reads of the
engine's counters. Results are written per level as soon as the level ends, so an
interrupted run keeps every finished level, the in-flight level's completed
requests, and its requests still in flight as failed rows (``interrupted``);
what was written and lost is counted in ``ledger.LEDGER``.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Mapping
from contextlib import aclosing
from pathlib import Path
from typing import Any, Literal

import aiohttp
import pyarrow as pa

from specdec.engines import engine
from specdec.engines.lifecycle import in_thread
from specdec.errors import EngineError
from specdec.http.metrics import reset_prefix_cache
from specdec.http.urls import Endpoint
from specdec.replay.config import ReplayConfig
from specdec.replay.http.client import ClientSettings, StreamResult, as_endpoint, send_recorded
from specdec.replay.http.event_loop import quiet_gc
from specdec.replay.http.metrics import read_counters
from specdec.replay.http.stream import StreamPool
from specdec.replay.ledger import LEDGER
from specdec.replay.load.arrivals import session_predecessors
from specdec.replay.load.closed_loop import closed_loop
from specdec.replay.load.modes import LoadLevel, load_levels, plans
from specdec.replay.load.open_loop import SendTime, run_open_level
from specdec.replay.load.schedule import Block, interleaved
from specdec.replay.load.sequential_loop import Design, Look, SequentialLoop
from specdec.replay.passes.counters import PassCounterLog, PassKind
from specdec.replay.passes.lossless import greedy_table, lossless_pass
from specdec.replay.passes.rescore import instrument_arm, rescore_pass
from specdec.replay.passes.sampling import derive_seeds, sample_pass, sample_table, sampled_rows
from specdec.replay.progress import Progress
from specdec.replay.resources import watch_block
from specdec.runfolder import counters_part, greedy_part, requests_part, resources_part, samples_part
from specdec.schemas.arrow import table_from_columns, table_from_records, write_parquet_atomic
from specdec.schemas.records import MetricSnapshot, RequestResult, ResourceReading, TrafficRow
from specdec.traffic import Traffic

log = logging.getLogger("specdec.replay")

Position = Literal["before", "after"]  # of a counter read or snapshot, around a level or pass


def request_id(run_id: str, arm: str, level: int, seq: int, repeat: int = 0) -> str:
    """Client request id; vLLM embeds it in its engine request id."""
    return f"sd.{run_id}.{arm}.c{level}.r{repeat}.{seq:05d}"


def request_id_prefix(run_id: str) -> str:
    """What every request id of a run starts with (used to find its captured rows)."""
    return f"sd.{run_id}."


def level_rows(traffic: Traffic, cfg: ReplayConfig) -> list[TrafficRow]:
    n = cfg.requests_per_level or len(traffic.rows)
    rows = [traffic.rows[i % len(traffic.rows)] for i in range(n)]
    if cfg.max_tokens:
        rows = [r.model_copy(update={"max_tokens": cfg.max_tokens}) for r in rows]
    return rows


async def run_level(
    session,
    base_url: str | Endpoint,
    model: str,
    rows: list[TrafficRow],
    level: int,
    make_id,
    settings: ClientSettings | None = None,
    on_done=None,
    results: list | None = None,
    sends: dict | None = None,
) -> list[tuple[TrafficRow, StreamResult]]:
    """Keep `level` requests in flight until all rows are sent, a session's turns
    one after the other; return results in finish order. Pass `results` to keep
    what finished if the level is interrupted, and `sends` to receive request
    id -> SendTime (no intended time: closed loop)."""
    ep = as_endpoint(base_url)
    t0 = time.perf_counter_ns()

    async def send(i: int) -> tuple[TrafficRow, StreamResult]:
        rid = make_id(i)
        if sends is not None:
            sends[rid] = SendTime(None, (time.perf_counter_ns() - t0) / 1e6)
        return rows[i], await send_recorded(session, ep, model, rows[i], rid, settings, results)

    return await closed_loop(
        len(rows),
        level,
        send,
        None if on_done is None else (lambda done: on_done(done[1])),
        results,
        after=session_predecessors(rows),
    )


def failure_hint(ep: Endpoint, res: StreamResult, settings: ClientSettings, model: str) -> str:
    """The likely fix for a failed warm-up request, in one sentence."""
    status = res.http_status
    if res.error_type == "http_status":
        if status in (401, 403):
            return (
                "the server wants credentials: put the API key in the environment variable named by "
                "--api-key-env (default OPENAI_API_KEY)"
                if not settings.api_key
                else "the server refused the API key that was sent: check its value"
            )
        if status == 404 and ep.path_ends_with_v1:
            return "remove the /v1 suffix from the URL: specdec appends /v1/chat/completions itself"
        if status == 404 and "model" in (res.error_message or "").lower():
            return (
                f"the server does not serve a model named {model!r}: check --served-model (GET /v1/models lists them)"
            )
        if status in (404, 405, 501):
            return f"the server has no OpenAI-compatible {ep.display}/v1/chat/completions endpoint"
        if status == 400:
            return "the server rejected the request body: check --served-model and the traffic's max_tokens"
        return "the server failed the request: see its log"
    return {
        "connect_error": "is the server running and listening at that address?",
        "connect_timeout": "the host did not accept a connection: check the address and any firewall",
        "request_timeout": (
            "the server accepted the request but sent nothing for "
            f"{settings.request_timeout_s:g} s: is it hung or overloaded? (--request-timeout)"
        ),
        "not_streamed": "the server ignored stream=true: it does not look like an OpenAI-compatible streaming server",
        "stream_truncated": "the server closed the stream early: see its log",
        "no_usage": "the server ignored stream_options.include_usage, so output tokens cannot be counted",
        "overlong_stream": "the server ignores max_tokens (and vLLM's ignore_eos): it kept streaming past the "
        "requested length; check that it is an OpenAI-compatible server that honours max_tokens",
        "request_wall_timeout": "the server kept the request open past its wall limit (--request-timeout plus "
        "1 s per requested token): is it streaming something other than tokens?",
    }.get(res.error_type or "", "see the error message")


#: Seconds between two reads of /metrics that must agree: an engine records a request's stats just
#: after its last chunk (tests without engine set it to 0: a fake's counters are final with the reply).
SETTLE_S = 0.2


async def settled_counters(
    session, ep: Endpoint, settings: ClientSettings, tries: int = 20, counters: dict[str, str] | None = None, parse=None
) -> dict:
    """Read /metrics until two reads agree (stats are recorded after the last chunk);
    ``counters``: the engine's names (``specdec/engines``; vLLM's by default); ``parse``:
    the engine's ``parse_snapshot`` (counters and per-position counter)."""
    try:
        prev = await read_counters(session, ep, settings, counters, parse)
        for _ in range(tries):
            await asyncio.sleep(SETTLE_S)
            cur = await read_counters(session, ep, settings, counters, parse)
            if cur == prev:
                return cur
            prev = cur
        return prev
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        raise EngineError(
            f"could not read {ep.display}/metrics ({type(exc).__name__}); the server stopped "
            "answering. Requests that finished are saved in the run folder."
        ) from None


def results_table(
    run_id: str,
    arm: str,
    level: int,
    results,
    repeat: int = 0,
    load: LoadLevel | None = None,
    sends: dict[str, SendTime] | None = None,
) -> pa.Table:
    """One block's RequestResult table; ``load`` (default: closed loop at
    ``level``) and ``sends`` (request id -> SendTime) fill the load columns."""
    load = load or LoadLevel(level, "closed", float(level))
    sends = sends or {}
    cols: dict[str, list] = {f: [] for f in RequestResult.model_fields}
    for row, res in results:
        when = sends.get(res.request_id)
        values = {
            "run_id": run_id,
            "arm": arm,
            "level": level,
            "repeat": repeat,
            "prompt_id": row.prompt_id,
            "category": row.category,
            "max_tokens": row.max_tokens,
            "temperature": row.temperature,
            "session_id": row.session_id,
            "turn_index": row.turn_index,
            # None (unknown) unless the server reported a running count for every content chunk
            "chunk_tokens": res.chunk_tokens if len(res.chunk_tokens) == len(res.chunk_offsets_ms) else None,
            "load_mode": load.mode,
            "level_value": load.value,
            "intended_send_ms": when and when.intended_ms,
            "actual_send_ms": when and when.actual_ms,
            "schedule_lag_ms": when and when.lag_ms,
            "session_wait_ms": when and when.session_wait_ms,
            # the analytics compare outputs by this digest instead of reading the texts
            "output_text_sha256": hashlib.sha256(res.output_text.encode()).hexdigest(),
        }
        for f in cols:
            cols[f].append(values[f] if f in values else getattr(res, f))
    return table_from_columns(RequestResult, cols)


class Replayer:
    """Runs a replay's schedule (``specdec.replay.load.schedule``) against one server
    per arm, all kept up, and writes each block's files as soon as it ends."""

    def __init__(
        self,
        cfg: ReplayConfig,
        run_id: str,
        run_dir: Path,
        traffic: Traffic,
        progress: Progress,
        eos_token_ids: frozenset[int] | None = None,
        pid_of: Callable[[str], int | None] | None = None,
        save_looks: Callable[[list[dict[str, Any]]], None] | None = None,
    ):
        """``pid_of(arm)``: the PID of the server process specdec started for
        that arm (its memory is sampled during each block), None otherwise.
        ``save_looks(looks)``: a sequential run's looks so far, after each look
        (the run writes them into the manifest)."""
        self.cfg, self.run_id, self.run_dir, self.traffic = cfg, run_id, run_dir, traffic
        self.pid_of = pid_of or (lambda arm: None)
        self.progress = progress
        self.settings = cfg.client_settings()
        # each arm's engine adapter (specdec/engines): its /metrics names, its per-request stats
        self.engines = {arm.name: engine(arm.engine) for arm in cfg.arm_specs()}
        self.speculating = {arm.name: arm.speculation is not None for arm in cfg.arm_specs()}
        self.eos_token_ids = eos_token_ids
        self.snapshots: dict[str, list[MetricSnapshot]] = {}
        self.pass_counters = PassCounterLog(run_id, run_dir)  # counters around the untimed passes
        self.failed: dict[tuple[str, int, int], int] = {}  # (arm, level, repeat) -> failed requests
        self.loads = {lv.key: lv for lv in load_levels(cfg)}  # level key -> LoadLevel
        self._plans: dict | None = None  # level key -> arrival plan (None: closed loop), same for every block
        self.streams: StreamPool | None = None  # the streaming transport, open while run() runs
        self.looks: list[dict[str, Any]] = []  # a sequential run's looks, in order (sequential_loop.py)
        self.save_looks = save_looks

    async def run(
        self,
        endpoints: Mapping[str, str | Endpoint],
        restart: Callable[[int], dict[str, str]] | None = None,
        look: Look | None = None,
    ) -> None:
        """``restart(repeat)``, when given, stops the servers and starts fresh
        ones (blocking; run in a thread), returning their endpoints: the
        schedule is then repeat-major, with a restart before every repeat
        after the first, and each fresh server is warmed up like the first.
        With ``cfg.max_repeats`` the design is sequential (``load/sequential_loop.py``):
        repeat-major, with or without restarts, and ``look(repeats_done, open_levels,
        final)`` (blocking; run in a thread) after each repeat from ``cfg.repeats`` on
        says which levels run again; its records go to ``self.looks``. Without
        ``look`` a sequential run runs ``max_repeats`` repeats (or fewer: the budget)."""
        cfg = self.cfg
        eps = {arm: as_endpoint(url) for arm, url in endpoints.items()}
        rows = level_rows(self.traffic, cfg)
        self._plans = plans(cfg, self.traffic, rows)  # traffic unfit for the load mode stops the run here
        greedy = [r for r in rows if r.temperature == 0]
        sampled = sampled_rows(rows) if cfg.samples else []
        requests_part(self.run_dir, "x", 0).parent.mkdir(parents=True, exist_ok=True)
        # streaming requests go over specdec's own transport (replay/http/stream.py:
        # aiohttp alone cost more than half of vLLM's whole client); the small
        # requests (metrics, prefix-cache resets) over aiohttp
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as session, StreamPool() as self.streams:
            for arm, ep in eps.items():
                await self._warmup(session, arm, ep, rows)
            schedule = self._schedule(list(eps), cfg.lossless_pass and bool(greedy), bool(sampled), restart, look)
            async with aclosing(schedule) as blocks:
                async for block in blocks:
                    if block.kind == "restart":
                        assert restart is not None  # the schedules yield restart blocks only with restart
                        eps = {arm: as_endpoint(url) for arm, url in (await in_thread(restart, block.repeat)).items()}
                        for arm, ep in eps.items():
                            await self._warmup(session, arm, ep, rows)
                        continue
                    ep = eps[block.arm]
                    if block.kind == "timed":
                        await self._block(session, block.arm, ep, rows, block.level, block.repeat)
                    elif block.kind == "lossless_pass":
                        await self._lossless_pass(session, block.arm, ep, greedy, block.level)
                    else:
                        ref = instrument_arm(block.arm, cfg.arm_specs())
                        await self._sampling_pass(session, block.arm, ep, sampled, block.level, (ref, eps[ref]))

    def _schedule(
        self, arms: list[str], lossless: bool, sample: bool, restart: Callable | None, look: Look | None
    ) -> AsyncGenerator[Block, None]:
        """The run's blocks: the fixed design's (``schedule.interleaved``), or a
        sequential design's, made repeat by repeat as the looks answer."""
        cfg = self.cfg
        if cfg.max_repeats is None:
            return _each(interleaved(cfg.levels, cfg.repeats, arms, lossless, sample, restart=restart is not None))
        design = Design(cfg.levels, cfg.repeats, cfg.max_repeats, cfg.budget_minutes)
        loop = SequentialLoop(design, arms, self.progress.message, look, self.looks, self.save_looks)
        return loop.blocks(lossless, sample, restart is not None)

    def _streaming(self, session):
        """The transport of the streamed requests: run()'s StreamPool, or the
        aiohttp session a caller of a single block passed (stream_payload takes either)."""
        return self.streams if self.streams is not None else session

    async def _warmup(self, session, arm: str, ep: Endpoint, rows: list[TrafficRow]) -> None:
        """Unrecorded requests before the first level; ``--warmup 0`` still sends
        one, so a misconfigured server stops the run before anything is measured."""
        warm = rows[: max(self.cfg.warmup_requests, 1)]
        results = await run_level(
            self._streaming(session),
            ep,
            self.cfg.served_model,
            warm,
            1,
            lambda i: request_id(self.run_id, arm, 0, i) + ".warmup",
            self.settings,
        )
        for _, res in results:
            if not res.success:
                status = f"HTTP {res.http_status}" if res.http_status is not None else res.error_type
                raise EngineError(
                    f"the {arm} server at {ep.display} failed the warm-up request ({status}): "
                    f"{res.error_message}\nLikely fix: "
                    f"{failure_hint(ep, res, self.settings, self.cfg.served_model)}"
                )

    async def _prepare(self, session, ep: Endpoint, arm: str) -> bool | None:
        """Before a block: empty the prefix cache (``--prefix-cache reset``) so no
        block is faster because an earlier one warmed it. True if the server
        did it, False if it refused (then said in the snapshot), None if not asked."""
        if self.cfg.prefix_cache != "reset" or not self.engines[arm].resets_prefix_cache:
            return None
        return await reset_prefix_cache(session, ep, self.settings)

    def _plan(self, rows, level: int):
        """The level's arrival plan (None: closed loop), computed once for all levels."""
        if self._plans is None:
            self._plans = plans(self.cfg, self.traffic, rows)
        return self._plans.get(level)

    async def _block(self, session, arm: str, ep: Endpoint, rows, level: int, repeat: int = 0) -> None:
        load = self.loads.get(level) or LoadLevel(level, "closed", float(level))
        plan = self._plan(rows, level)
        reset = await self._prepare(session, ep, arm)
        eng = self.engines[arm]
        self._snapshot(
            arm,
            level,
            repeat,
            "before",
            await settled_counters(session, ep, self.settings, counters=dict(eng.counters), parse=eng.parse_snapshot),
            reset,
        )
        if load.mode != "closed":
            self.progress.message(f"{arm} {load.label}")
        task = self.progress.start_level(arm, level, len(rows), repeat if self.cfg.repeats > 1 else None)
        results: list = []
        sends: dict[str, SendTime] = {}
        # closed loop: run_level(..., concurrency, ...); open loop: run_open_level(..., plan, ...)
        run: Callable[..., Awaitable[list]] = run_level if plan is None else run_open_level
        samples: list[dict] = []
        stop = asyncio.Event()
        sampler = asyncio.create_task(watch_block(session, ep, self.settings, self.pid_of(arm), samples, stop))
        try:
            with quiet_gc():  # no whole-heap collection pauses the block (replay/http/event_loop.py)
                await run(
                    self._streaming(session),
                    ep,
                    self.cfg.served_model,
                    rows,
                    level if plan is None else plan,
                    lambda i: request_id(self.run_id, arm, level, i, repeat),
                    self.settings,
                    on_done=lambda res: self.progress.advance(task, res),
                    results=results,
                    sends=sends,
                )
        finally:
            # keep whatever finished, and what was in flight as failed rows, even on Ctrl-C or a dead server
            self._write_block(arm, level, repeat, results, load, sends)
            await self._end_sampling(sampler, stop, samples, arm, level, repeat)
        self._snapshot(
            arm,
            level,
            repeat,
            "after",
            await settled_counters(session, ep, self.settings, counters=dict(eng.counters), parse=eng.parse_snapshot),
        )
        self.progress.end_level(task)

    def _write_block(
        self, arm: str, level: int, repeat: int, results: list, load: LoadLevel, sends: dict[str, SendTime]
    ) -> None:
        """Write one block's rows and count them in the ledger; a file that
        cannot be written stops the run with the number of rows lost."""
        eng = self.engines[arm]
        for _row, res in results:
            eng.settle_stats(res, self.speculating[arm])
        lost = max(0, len(sends) - len(results))  # sent, never settled (none, unless something else broke)
        LEDGER.lost += lost
        self.failed[(arm, level, repeat)] = sum(not res.success for _, res in results)
        if not results:
            return
        path = requests_part(self.run_dir, arm, level, repeat)
        try:
            write_parquet_atomic(results_table(self.run_id, arm, level, results, repeat, load, sends), path)
        except OSError as exc:
            LEDGER.lost += len(results)
            raise EngineError(
                f"could not write {path} ({exc.strerror or exc}): the {len(results)} request rows "
                f"of {arm} level {level} repeat {repeat} are lost"
            ) from None
        LEDGER.written += len(results)
        LEDGER.interrupted += sum(res.error_type == "interrupted" for _, res in results)

    async def _end_sampling(
        self, sampler: asyncio.Task, stop: asyncio.Event, samples: list[dict], arm: str, level: int, repeat: int
    ) -> None:
        """Stop the block's resource sampler (one last sample) and write what it took."""
        stop.set()
        try:
            await asyncio.wait_for(sampler, timeout=10)
        except (asyncio.CancelledError, Exception) as exc:  # a timeout included: sampling never fails a block
            log.warning("resource sampling of %s c%d r%d ended with %s", arm, level, repeat, type(exc).__name__)
        if samples:
            rows = [ResourceReading(run_id=self.run_id, arm=arm, level=level, repeat=repeat, **s) for s in samples]
            path = resources_part(self.run_dir, arm, level, repeat)
            path.parent.mkdir(parents=True, exist_ok=True)
            write_parquet_atomic(table_from_records(ResourceReading, rows), path)

    async def _lossless_pass(self, session, arm: str, ep: Endpoint, rows, level: int) -> None:
        """The lossless pass of one arm at one level (logprobs on)."""
        await self._prepare(session, ep, arm)
        self.progress.message(f"{arm} c={level}: lossless pass ({len(rows)} greedy requests, logprobs on)")
        await self._pass_counters(session, arm, ep, level, "lossless_pass", "before")
        results: list = []
        try:
            protocol = self.engines[arm].lossless_protocol
            await lossless_pass(
                self._streaming(session) if protocol == "chat" else session,  # "completion": not streamed
                ep,
                self.cfg.served_model,
                rows,
                level,
                lambda i: f"{request_id(self.run_id, arm, level, i)}.lossless",
                self.settings,
                self.eos_token_ids,
                results=results,
                protocol=protocol,
            )
        finally:  # keep the checks that finished, even on Ctrl-C
            if results:
                path = greedy_part(self.run_dir, arm, level, 0)
                path.parent.mkdir(parents=True, exist_ok=True)
                write_parquet_atomic(greedy_table(self.run_id, arm, level, 0, results), path)
        await self._pass_counters(session, arm, ep, level, "lossless_pass", "after")

    async def _sampling_pass(
        self, session, arm: str, ep: Endpoint, rows, level: int, instrument: tuple[str, Endpoint] | None = None
    ) -> None:
        """The sampling-mode pass of one arm at one level: each prompt with
        temperature > 0 once per seed of the same fixed list in every arm; then
        each sample re-scored on ``instrument`` (arm, endpoint: the arm's
        reference, ``replay/passes/rescore.py``), so one server scores both arms."""
        await self._prepare(session, ep, arm)
        seeds = derive_seeds(0, self.cfg.samples)
        self.progress.message(f"{arm} c={level}: sampling pass ({len(rows)} prompts x {len(seeds)} seeds, logprobs on)")
        await self._pass_counters(session, arm, ep, level, "sampling_pass", "before")
        results: list = []
        try:
            await sample_pass(
                self._streaming(session),
                ep,
                self.cfg.served_model,
                rows,
                level,
                lambda i: f"{request_id(self.run_id, arm, level, i)}.sample",
                self.settings,
                seeds,
                self.eos_token_ids,
                results=results,
            )
            if instrument is not None:
                await rescore_pass(
                    session, instrument[1], self.cfg.served_model, results, level, self.settings, by=instrument[0]
                )
        finally:  # keep the samples that finished, even on Ctrl-C
            if results:
                path = samples_part(self.run_dir, arm, level)
                path.parent.mkdir(parents=True, exist_ok=True)
                write_parquet_atomic(sample_table(self.run_id, arm, level, results), path)
        await self._pass_counters(session, arm, ep, level, "sampling_pass", "after")

    async def _pass_counters(
        self, session, arm: str, ep: Endpoint, level: int, kind: PassKind, position: Position
    ) -> None:
        """Read the arm's counters before or after an untimed pass (``replay/passes/counters.py``).
        A server that stopped answering /metrics leaves the read out (the pass is then
        'not known' to have speculated), and its requests fail on their own."""
        eng = self.engines[arm]
        try:
            counters = await settled_counters(session, ep, self.settings, counters=dict(eng.counters))
        except EngineError as exc:
            log.warning("%s c%d: counters %s the %s not read: %s", arm, level, position, kind, exc)
            return
        self.pass_counters.record(arm, level, kind, position, counters)

    def _snapshot(
        self, arm: str, level: int, repeat: int, position: Position, counters: dict, reset: bool | None = None
    ) -> None:
        """One snapshot per arm, level, repeat and position; each arm has its own file."""
        snaps = [s for s in self.snapshots.get(arm, []) if (s.level, s.repeat, s.position) != (level, repeat, position)]
        snaps.append(
            MetricSnapshot(
                run_id=self.run_id,
                arm=arm,
                level=level,
                repeat=repeat,
                position=position,
                wall_time_ns=time.time_ns(),
                prefix_cache_reset=reset,
                **counters,
            )
        )
        self.snapshots[arm] = snaps
        write_parquet_atomic(table_from_records(MetricSnapshot, snaps), counters_part(self.run_dir, arm))


async def _each(blocks: Iterable[Block]) -> AsyncGenerator[Block, None]:
    """A fixed schedule as the async iterator a sequential one is."""
    for block in blocks:
        yield block
