"""The open loop: send each row at its planned time, however many are in flight.

One dispatcher walks the plan (``specdec.replay.load.arrivals``) in time order,
sleeps until each arrival's time on an injected clock, and starts one task
per request, so a slow reply never delays the next send (connections are not
limited either: the replay's session has ``TCPConnector(limit=0)``). The
task stamps the actual send time on the same clock just before the request
goes out; ``schedule lag = actual - intended`` is then what the client added
(event-loop wake-up, task start), the figure the ``schedule_lag`` mart reports.

A later turn of a session first waits for the previous turn to finish; its
intended time becomes max(planned time, previous turn's finish), and the time
it was held past its plan is kept apart (``session_wait_ms``), so the lag
stays the client's own.

``MonotonicClock.sleep_until`` never returns early: it sleeps to half a
millisecond before the target, then yields to the event loop until the time
is reached, so other requests keep streaming while it waits. Tests pass a
fake clock with the same three methods.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from specdec.replay.http.client import as_endpoint, send_recorded
from specdec.replay.load.arrivals import Arrival

T = TypeVar("T")

#: Below this many ms before a target, sleep_until yields instead of sleeping
#: (asyncio timers fire up to about 1 ms late on Linux). A trade-off, measured
#: with benchmarks/replay_client.py --clients specdec --loads open --spin-ms S
#: (150 req/s, alternating, this 2-core host): S = 1.5 gave 3.22 CPU s per 100k
#: tokens and a p99 schedule lag of 2.06 ms (twice); S = 0.5 gave 2.01-2.62 s
#: and 2.98-3.45 ms. 0.5 is kept: about 25% less client CPU for about 1 ms more
#: lag at p99, small beside request latencies of hundreds of ms.
SPIN_MS = 0.5


@dataclass(frozen=True)
class SendTime:
    """When one request was meant to go and when it went, ms after the block's start."""

    intended_ms: float | None  # None: closed loop (sent when a slot freed)
    actual_ms: float
    session_wait_ms: float | None = None  # held past the plan for the previous turn; None without one

    @property
    def lag_ms(self) -> float | None:
        return None if self.intended_ms is None else self.actual_ms - self.intended_ms


class Clock(Protocol):
    def start(self) -> None: ...
    def elapsed_ms(self) -> float: ...
    async def sleep_until(self, ms: float) -> None: ...


class MonotonicClock:
    """perf_counter time since ``start()``, in ms."""

    def __init__(self) -> None:
        self._t0 = time.perf_counter_ns()

    def start(self) -> None:
        self._t0 = time.perf_counter_ns()

    def elapsed_ms(self) -> float:
        return (time.perf_counter_ns() - self._t0) / 1e6

    async def sleep_until(self, ms: float) -> None:
        while True:
            remaining = ms - self.elapsed_ms()
            if remaining <= 0:
                return
            await asyncio.sleep((remaining - SPIN_MS) / 1000 if remaining > SPIN_MS else 0)


async def open_loop(
    plan: list[Arrival],
    send: Callable[[int, SendTime], Awaitable[T]],
    clock: Clock | None = None,
    on_done: Callable[[T], None] | None = None,
    results: list | None = None,
) -> list[T]:
    """Await ``send(arrival.index, send_time)`` for every arrival at its time;
    return the results in finish order. Pass ``results`` to keep what finished
    if the loop is interrupted (Ctrl-C, a dead server)."""
    clock = clock or MonotonicClock()
    results = [] if results is None else results
    finished_ms: dict[int, float] = {}
    turn_done = {a.after: asyncio.Event() for a in plan if a.after is not None}

    async def one(a: Arrival) -> None:
        intended, wait = a.intended_ms, None
        if a.after is not None:
            await turn_done[a.after].wait()
            intended = max(a.intended_ms, finished_ms[a.after])
            wait = intended - a.intended_ms
            await clock.sleep_until(intended)  # returns at once unless the turn finished early
        try:
            out = await send(a.index, SendTime(intended, clock.elapsed_ms(), wait))
        finally:
            finished_ms[a.index] = clock.elapsed_ms()
            if a.index in turn_done:
                turn_done[a.index].set()
        results.append(out)
        if on_done is not None:
            on_done(out)

    tasks: list[asyncio.Task] = []
    clock.start()
    try:
        for a in sorted(plan, key=lambda a: (a.intended_ms, a.index)):
            await clock.sleep_until(a.intended_ms)
            tasks.append(asyncio.create_task(one(a)))
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        # let every cancelled request settle (a request cut off records its row) before the caller writes
        await asyncio.gather(*tasks, return_exceptions=True)
    return results


async def run_open_level(
    session,
    base_url,
    model: str,
    rows,
    plan: list[Arrival],
    make_id,
    settings=None,
    on_done=None,
    results: list | None = None,
    sends: dict | None = None,
    clock: Clock | None = None,
) -> list:
    """The open-loop counterpart of ``runner.run_level``: (row, StreamResult)
    pairs in finish order; ``sends`` receives request id -> SendTime."""
    ep = as_endpoint(base_url)

    async def send(i: int, when: SendTime):
        rid = make_id(i)
        if sends is not None:
            sends[rid] = when
        return rows[i], await send_recorded(session, ep, model, rows[i], rid, settings, results)

    return await open_loop(plan, send, clock, None if on_done is None else (lambda done: on_done(done[1])), results)
