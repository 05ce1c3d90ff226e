"""The event loop the replay runs on: asyncio's, with each poll of the
sockets capped at ``MAX_EVENTS`` ready connections.

Why: an engine decodes all its running requests in one step, so their
tokens reach the client together; with a hundred streams open, asyncio's
loop handles every ready socket from one ``epoll_wait`` before it looks at
its timers again, and a send planned for that moment waits for the whole
burst. Capped, the loop comes back to its timers (the open loop's next
send) every ``MAX_EVENTS`` reads; sockets left over are still ready and come
in the next poll (epoll is level-triggered), so nothing is lost or starved,
and each chunk's arrival is stamped closer to when it came. Measured with
``benchmarks/replay_client.py`` (open loop, 150 req/s, 64 tokens, the stub
ticking every stream each 8 ms; BENCHMARKS.md).

``quiet_gc`` goes around each timed block: Python's cyclic garbage collector
walks every object the process holds when it collects its oldest generation,
and with vLLM's, pyarrow's and pydantic's modules loaded that walk paused the
client for 45-53 ms once per open-loop run of 1500 requests (the run's
largest schedule lag). Frozen (``gc.freeze``) before the block starts, those
long-lived objects are left out of every collection during the block; the
block's own objects are collected as usual, and ``gc.unfreeze`` hands the
frozen ones back afterwards. Only the young generations are collected before
the freeze: a whole-heap walk there would cost the same pause between blocks,
once per block (in the tests' processes 4.7% of their CPU, 2026-12-07), and
what the oldest generation holds of garbage is collected at its next natural
collection once unfrozen.

Only Linux's epoll selector has the cap (``epoll_wait``'s ``maxevents``);
elsewhere this is asyncio's default loop. The cap wraps the selector's poll
object (``EpollSelector._selector``, unchanged since Python 3.4).
"""

from __future__ import annotations

import asyncio
import gc
import selectors
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")

#: Most ready sockets handled per poll (a trade-off: fewer means timers are
#: looked at more often, at the price of one more epoll_wait per MAX_EVENTS reads).
MAX_EVENTS = 8


class _CappedPoll:
    """An epoll object whose ``poll`` returns at most ``cap`` events."""

    __slots__ = ("_ep", "_cap")

    def __init__(self, ep, cap: int):
        self._ep, self._cap = ep, cap

    def poll(self, timeout=-1, maxevents=-1):
        return self._ep.poll(timeout, self._cap if maxevents <= 0 else min(maxevents, self._cap))

    def __getattr__(self, name):  # register, modify, unregister, fileno, close
        return getattr(self._ep, name)


def new_loop(max_events: int = MAX_EVENTS) -> asyncio.AbstractEventLoop:
    """A selector event loop whose polls are capped (Linux), else asyncio's default."""
    if not hasattr(selectors, "EpollSelector"):
        return asyncio.new_event_loop()
    selector = selectors.EpollSelector()
    # typeshed leaves out EpollSelector's private ``_selector`` (the select.epoll it polls)
    selector._selector = _CappedPoll(selector._selector, max_events)  # type: ignore[attr-defined]
    return asyncio.SelectorEventLoop(selector)


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on the replay's loop."""
    with asyncio.Runner(loop_factory=new_loop) as runner:
        return runner.run(main)


@contextmanager
def quiet_gc() -> Iterator[None]:
    """Collect the young generations, then freeze what is alive, for the duration of a timed block."""
    gc.collect(1)
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
