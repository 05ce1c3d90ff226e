"""The soak probe of ``specdec stability``: a closed loop at the configured
concurrency for N minutes, with the server's resident memory sampled every
few seconds and summarised as a trend.

RSS trend (reported, not judged: a short soak on a shared CPU is too noisy to
call a leak): first, last and largest sample in MiB, and the least-squares
slope of RSS over the monotonic clock in MiB per minute,

    slope = sum((t_i - mean t)(r_i - mean r)) / sum((t_i - mean t)^2) * 60

with t in seconds; None with fewer than two samples.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from specdec.experiments.stability.faults import Finding, Probe, Target, chat, failure_label
from specdec.replay.http.client import StreamResult

#: Upper bound of the soak's requests whatever the duration (keeps the loop bounded in count).
SOAK_MAX_REQUESTS = 100_000
SOAK_PROMPTS = (
    "Describe a quiet harbour at dawn.",
    "List five uses for a paper clip.",
    "Explain why the sky is blue, briefly.",
    "Write a limerick about a cat who codes.",
)
SOAK_TOKENS = 32


@dataclass(frozen=True)
class RssTrend:
    samples: int
    first_mb: float
    last_mb: float
    max_mb: float
    slope_mb_per_min: float | None

    def describe(self) -> str:
        slope = "n/a" if self.slope_mb_per_min is None else f"{self.slope_mb_per_min:+.1f} MiB/min"
        return (
            f"server RSS {self.first_mb:.0f} -> {self.last_mb:.0f} MiB (max {self.max_mb:.0f}, "
            f"trend {slope} over {self.samples} samples)"
        )


def rss_trend(samples: list[tuple[float, float]]) -> RssTrend | None:
    """Summarise (monotonic seconds, MiB) samples; None when there are none."""
    if not samples:
        return None
    ts = [t for t, _ in samples]
    rs = [r for _, r in samples]
    slope = None
    if len(samples) >= 2:
        mt, mr = sum(ts) / len(ts), sum(rs) / len(rs)
        var = sum((t - mt) ** 2 for t in ts)
        if var > 0:
            slope = sum((t - mt) * (r - mr) for t, r in samples) / var * 60.0
    return RssTrend(len(samples), rs[0], rs[-1], max(rs), slope)


def soak_probe(minutes: float, interval_s: float, clock: Callable[[], float] = time.monotonic) -> Probe:
    fault = "soak"
    expected = (
        f"closed loop at the configured concurrency for {minutes:g} min: every request completes (RSS trend reported)"
    )

    async def run(t: Target) -> Finding:
        deadline = clock() + minutes * 60.0
        samples: list[tuple[float, float]] = []
        results: list[StreamResult] = []
        stop = asyncio.Event()

        def sample() -> None:
            rss = t.server.rss_mb()
            if rss is not None:
                samples.append((clock(), rss))

        async def sampler() -> None:
            while not stop.is_set():
                sample()
                try:
                    await asyncio.wait_for(stop.wait(), interval_s)
                except TimeoutError:
                    pass

        async def worker(w: int) -> None:
            i = w
            while clock() < deadline and len(results) < SOAK_MAX_REQUESTS:
                prompt = SOAK_PROMPTS[i % len(SOAK_PROMPTS)]
                results.append(await t.send(fault, chat(t.model, prompt, SOAK_TOKENS)))
                i += t.concurrency

        sampling = asyncio.create_task(sampler())
        try:
            await asyncio.gather(*(worker(w) for w in range(t.concurrency)))
        finally:
            stop.set()
            await sampling
        sample()  # the state at the end of the loop
        trend = rss_trend(samples)
        failed = [r for r in results if not r.success]
        detail = f"{len(results)} requests in {minutes:g} min at concurrency {t.concurrency}, {len(failed)} failed"
        if failed:
            detail += f" ({', '.join(sorted({failure_label(r) for r in failed}))})"
        detail += "; " + (trend.describe() if trend else "server RSS not measured (not a process specdec started)")
        return Finding("ok" if not failed and results else "degraded", detail, rss=trend)

    return Probe(fault, expected, run, budget_s=None)
