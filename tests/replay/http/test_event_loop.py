"""The replay's event loop (replay/http/event_loop.py): a poll hands over at most
MAX_EVENTS ready sockets, so a timer that is due (the open loop's next send)
runs after at most that many reads instead of after the whole burst, and
every ready socket is still read."""

from __future__ import annotations

import asyncio
import socket
import sys

import pytest

from specdec.replay.http import event_loop


def order_of_reads_and_timer(loop: asyncio.AbstractEventLoop, n: int = 40) -> list[str]:
    """n sockets with data waiting and a timer due: the order the loop runs them in."""
    pairs = [socket.socketpair() for _ in range(n)]
    seen: list[str] = []

    async def main():
        done = asyncio.Event()
        for i, (a, b) in enumerate(pairs):
            b.send(b"x")
            a.setblocking(False)

            def read(i=i, a=a):
                a.recv(16)
                loop.remove_reader(a)
                seen.append(f"r{i}")
                if sum(s.startswith("r") for s in seen) == n:
                    done.set()

            loop.add_reader(a, read)
        loop.call_later(0, seen.append, "timer")
        await done.wait()

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
        for a, b in pairs:
            a.close()
            b.close()
    return seen


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the cap is epoll's (Linux)")
def test_a_due_timer_waits_for_at_most_max_events_reads():
    capped = order_of_reads_and_timer(event_loop.new_loop())
    default = order_of_reads_and_timer(asyncio.SelectorEventLoop())
    assert sorted(capped) == sorted(default)  # every socket read, nothing lost
    assert capped.index("timer") <= event_loop.MAX_EVENTS
    assert default.index("timer") == 40  # asyncio's own loop: after the whole burst


def test_run_returns_the_result_on_the_replay_loop():
    async def main():
        await asyncio.sleep(0)
        return 42

    assert event_loop.run(main()) == 42


def test_quiet_gc_freezes_what_lives_before_and_still_collects_the_blocks_garbage():
    import gc
    import weakref

    class Node:
        pass

    before = Node()
    with event_loop.quiet_gc():
        assert gc.get_freeze_count() > 0  # the long-lived heap is left out of collections
        cycle = Node()
        cycle.self = cycle
        gone = weakref.ref(cycle)
        del cycle
        gc.collect()
        assert gone() is None  # garbage made during the block is collected as usual
    assert gc.get_freeze_count() == 0 and before is not None
