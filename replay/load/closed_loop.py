"""The closed loop: keep exactly C calls in flight until every item is sent.

Shared by the timed requests (``runner.run_level``) and the lossless
lossless pass (``passes.lossless.lossless_pass``), so both see the same batch shape
at a level. What a call sends is the caller's business: ``send(i)`` is awaited
for i = 0 .. count - 1, each index exactly once, by C workers that each take
the next index as soon as their previous call returns.

With ``after`` (index -> index that must finish first, e.g. the previous turn
of a session; ``specdec.replay.load.arrivals.session_predecessors``), a worker
takes the first index in order whose predecessor has finished, so a session
goes turn by turn while other rows fill the free slots; fewer than C calls are
in flight only while every remaining index waits for a call still running.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


async def closed_loop(
    count: int,
    level: int,
    send: Callable[[int], Awaitable[T]],
    on_done: Callable[[T], None] | None = None,
    results: list | None = None,
    after: Sequence[int | None] | None = None,
) -> list[T]:
    """Await ``send(i)`` for every i in range(count) with ``level`` calls in
    flight; return the results in finish order. Pass ``results`` to keep what
    finished if the loop is interrupted (Ctrl-C, a dead server)."""
    results = [] if results is None else results
    if after is not None and any(a is not None for a in after):
        return await _ordered(count, level, send, on_done, results, after)
    next_index = 0

    async def worker() -> None:
        nonlocal next_index
        while next_index < count:
            i = next_index
            next_index += 1
            out = await send(i)
            results.append(out)
            if on_done is not None:
                on_done(out)

    return await _pool(worker, min(level, count), results)


async def _ordered(count: int, level: int, send, on_done, results: list, after: Sequence[int | None]) -> list:
    """closed_loop where index i is not sent before index after[i] finished."""
    pending = list(range(count))
    done: set[int] = set()
    finished = asyncio.Condition()

    async def worker() -> None:
        while pending:
            i = next((j for j in pending if after[j] is None or after[j] in done), None)
            if i is None:  # every remaining index waits for a running call
                async with finished:
                    await finished.wait()
                continue
            pending.remove(i)
            out = await send(i)
            done.add(i)
            async with finished:
                finished.notify_all()
            results.append(out)
            if on_done is not None:
                on_done(out)

    return await _pool(worker, min(level, count), results)


async def _pool(worker, n: int, results: list) -> list:
    """Run n copies of worker until all return; cancel the rest if one fails
    or the caller is cancelled (Ctrl-C): results keeps what finished."""
    tasks = [asyncio.create_task(worker()) for _ in range(n)]
    try:
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        # let every cancelled call settle (a request cut off records its row) before the caller writes
        await asyncio.gather(*tasks, return_exceptions=True)
    return results
