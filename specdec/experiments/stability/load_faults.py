"""Faults of load for ``specdec stability``: clients that disconnect
mid-stream, and a burst of several times the configured concurrency.

Disconnect: each client starts a long stream, reads one or two events and
closes its connection. The engine should abort those requests: its busy
gauges (``vllm:num_requests_running`` + ``vllm:num_requests_waiting``) go back
to 0 within IDLE_WAIT_S, and a normal request afterwards completes.

Burst: BURST_FACTOR x concurrency requests at once; each must complete or be
refused with 429/503, and none may hang past the client's timeouts.
"""

from __future__ import annotations

import asyncio

import aiohttp

from specdec.experiments.stability.faults import (
    LONG_PROMPT,
    PLAIN_PROMPT,
    Finding,
    Probe,
    Target,
    answer,
    chat,
    failure_label,
    long_tokens,
    say,
    wait_busy,
)
from specdec.replay.http.client import CHAT_PATH, request_headers

BURST_FACTOR = 4
IDLE_WAIT_S = 15.0


async def read_then_drop(t: Target, payload: dict, chunks: int) -> str | None:
    """Start a stream, read ``chunks`` events, close the connection. None when
    it went as planned, else the error label of what went wrong first."""
    ep, s = t.endpoint, t.settings
    try:
        async with t.session.post(
            ep.url(CHAT_PATH),
            params=ep.params or None,
            json=payload,
            headers=request_headers(s, ep, t.request_id("disconnect_mid_stream")),
            timeout=s.timeout(),
        ) as resp:
            if resp.status != 200:
                return f"http_{resp.status}"
            got = 0
            async for line in resp.content:
                if line.startswith(b"data:") and b"[DONE]" not in line:
                    got += 1
                    if got >= chunks:
                        break
            resp.close()  # drop the connection, not just this response
            return None if got >= chunks else "stream_truncated"
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        return "request_timeout" if isinstance(exc, asyncio.TimeoutError) else "connect_error"


def disconnect_probe() -> Probe:
    fault = "disconnect_mid_stream"
    expected = "dropped streams are aborted (busy gauges back to 0) and a normal request then completes"

    async def run(t: Target) -> Finding:
        n = max(2, t.concurrency)
        tokens = long_tokens(t)
        payload = chat(t.model, LONG_PROMPT, tokens)
        drops = await asyncio.gather(*(read_then_drop(t, payload, 1 + i % 2) for i in range(n)))
        for err in drops:
            t.note(err is None, err)
        follow = await t.send(fault, chat(t.model, PLAIN_PROMPT))
        busy = await wait_busy(t, lambda v: v <= 0, IDLE_WAIT_S)
        planned = drops.count(None)
        parts = [f"{planned}/{n} clients closed their connection after 1-2 chunks"]
        if busy is None:
            parts.append("the server exports no busy gauge, so the abort is not checked")
        elif busy > 0:
            parts.append(f"{busy:g} request(s) still running or waiting {IDLE_WAIT_S:g} s later")
        else:
            parts.append("the engine's running and waiting counts went back to 0")
        parts.append("a normal request then " + say(answer(follow)))
        good = planned == n and follow.success and (busy is None or busy <= 0)
        return Finding("ok" if good else "degraded", "; ".join(parts))

    return Probe(fault, expected, run)


def burst_probe() -> Probe:
    fault = "burst"
    expected = f"{BURST_FACTOR} x concurrency requests at once: each completes or is refused with 429/503, none hangs"

    async def run(t: Target) -> Finding:
        n = BURST_FACTOR * t.concurrency
        results = await asyncio.gather(
            *(t.send(fault, chat(t.model, f"Write one short sentence about the number {i}.", 16)) for i in range(n))
        )
        done = sum(r.success for r in results)
        refused = sum(r.http_status in (429, 503) for r in results)
        other = sorted({failure_label(r) for r in results if not r.success and r.http_status not in (429, 503)})
        detail = (
            f"{n} requests at once ({BURST_FACTOR} x concurrency {t.concurrency}): {done} completed, "
            f"{refused} refused with 429/503, {n - done - refused} failed otherwise"
        )
        if other:
            detail += f" ({', '.join(other)})"
        return Finding("ok" if done + refused == n else "degraded", detail)

    return Probe(fault, expected, run)
