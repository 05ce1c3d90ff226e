"""The closed loop: keep exactly C calls in flight until every item is sent.

Shared by the timed requests (``runner.run_level``) and the lossless
verification pass (``verify.verify_pass``), so both see the same batch shape
at a level. What a call sends is the caller's business: ``send(i)`` is awaited
for i = 0 .. count - 1, each index exactly once, by C workers that each take
the next index as soon as their previous call returns.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def closed_loop(count: int, level: int, send: Callable[[int], Awaitable[T]],
                      on_done: Callable[[T], None] | None = None, results: list | None = None) -> list[T]:
    """Await ``send(i)`` for every i in range(count) with ``level`` calls in
    flight; return the results in finish order. Pass ``results`` to keep what
    finished if the loop is interrupted (Ctrl-C, a dead server)."""
    results = [] if results is None else results
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

    tasks = [asyncio.create_task(worker()) for _ in range(min(level, count))]
    try:
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
    return results
