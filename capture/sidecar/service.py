"""``specdec-capture sidecar``: one process beside a vLLM server that has the
capture plugin on. It

* compacts the plugin's part files into a Parquet lake every ``compact_s``
  seconds (``sidecar_lake.Compactor``; layout in ``specdec.runfolder``);
* reads the server's ``/metrics`` every ``scrape_s`` seconds into
  ``CounterScrape`` rows, written to the lake at least every
  ``counters_flush_s`` seconds (``sidecar_lake.CounterLake``);
* serves its own Prometheus endpoint (``/metrics``, ``/healthz``) from the
  rows it compacts (``sidecar_metrics``), and from the capture status files
  the engine processes keep beside their part files (hook failures, rows the
  engine-side writer dropped, write errors: counts that live inside vLLM).

With ``--proxy-listen`` the same process also runs the recording proxy
(``capture.proxy``) in front of the same server: one command beside a
staging server records its traffic and its rounds. The rolling gauges and
histograms carry the label ``model`` (the server's ``/v1/models``) once the
server has named it. Round rows do not carry a category; with the proxy, the
sidecar learns each request's category (header, else rules) and the reply id
that vLLM's engine request id embeds (``sidecar_categories``), and exports
the rolling acceptance per category as well (``specdec_category_*``).
Without the proxy there is no per-category series.

``/healthz`` answers 200 with ``"status": "ok"`` while the last read of the
server's ``/metrics`` worked (or none was tried yet), and 503 with
``"status": "degraded"`` and the reason while it fails; ``/metrics`` keeps
answering 200 either way (its failure counters are how Prometheus sees it).
The log says so once per change of state (the first failed read, with its
error; the first read that works again, with the count of failures), never
once per scrape.

Blocking file I/O runs in worker threads; the endpoint stays responsive. It
runs until SIGINT or SIGTERM, then does one last compaction and writes every
buffered counter row, so nothing already recorded is lost. When rows are lost
all the same (counter rows the lake refused at the stop or dropped over the
pending bound; the proxy's traffic rows likewise), ``run_sidecar`` raises
``RowsLost`` after printing its summary: the CLI exits 1 and says how many of
each. A capture part that cannot be read is not lost: it stays in place,
counted (``specdec_sidecar_rows_dropped_total``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, field_validator

from specdec.capture.categories import CategoryBook
from specdec.capture.proxy.service import ProxySettings, RowsLost, exposure, start_proxy
from specdec.capture.sidecar.lake import Compactor, CompactResult, CounterLake, read_capture_status
from specdec.capture.sidecar.metrics import LiveMetrics
from specdec.engines.metrics import COUNTERS, GAUGES, parse_metrics
from specdec.errors import SpecdecError
from specdec.http.metrics import metrics_text
from specdec.listen import warn_if_exposed
from specdec.schemas.counters import CounterScrape

log = logging.getLogger("specdec.capture.sidecar.service")

DEFAULT_PORT = 9464
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class SidecarSettings(BaseModel):
    """The validated options of ``specdec-capture sidecar``."""

    model_config = ConfigDict(extra="forbid")

    capture_dir: Path = Field(description="The plugin's SPECDEC_CAPTURE_DIR, where its part files appear.")
    lake: Path = Field(description="Root of the Parquet lake (rounds/ and counters/ below it).")
    server: str = Field(description="Base URL of the vLLM server whose /metrics is read, e.g. http://127.0.0.1:8000.")
    host: str = Field(
        default="127.0.0.1", description="Address of the sidecar's own endpoint (loopback unless told otherwise)."
    )
    port: int = Field(
        default=DEFAULT_PORT, ge=0, le=65535, description="Port of the sidecar's own endpoint; 0: any free port."
    )
    compact_s: float = Field(default=10.0, gt=0, le=3600, description="Seconds between compaction passes.")
    scrape_s: float = Field(default=5.0, gt=0, le=3600, description="Seconds between reads of the server's /metrics.")
    window_s: float = Field(default=60.0, gt=0, le=86400, description="Window of the rolling acceptance gauges [s].")
    counters_flush_s: float = Field(
        default=30.0, gt=0, le=30, description="Most seconds a counter row waits before it is written to the lake."
    )
    proxy: ProxySettings | None = Field(
        default=None,
        description="The recording proxy to run in the same process (its upstream: this server); None: no proxy.",
    )

    @field_validator("server")
    @classmethod
    def _http(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"{value!r}: expected an http:// or https:// base URL")
        return value.rstrip("/")


class Sidecar:
    """The running parts; ``start`` opens the endpoint, ``serve`` loops until
    told to stop, ``close`` does the final compaction and flush."""

    def __init__(self, settings: SidecarSettings, clock_ns: Callable[[], int] = time.time_ns):
        self.settings = settings
        self.clock_ns = clock_ns  # the window's "now" (tests give a fixed one)
        self.compactor = Compactor(settings.capture_dir, settings.lake)
        self.counter_lake = CounterLake(settings.lake)
        # with the proxy in this process: each request's category, by reply id (per-category gauges)
        self.book = CategoryBook() if settings.proxy is not None else None
        self.metrics = LiveMetrics(settings.server, settings.window_s, self.book)
        self.session: aiohttp.ClientSession | None = None
        self.runner: web.AppRunner | None = None
        self.url = ""
        self._last_counter_flush = time.monotonic()
        self._closed = False
        self.scrape_error: str | None = None  # the last read's error while reads fail; None: healthy
        self.scrapes_failed_in_row = 0

    # ---------------------------------------------------------- endpoint
    async def start(self) -> str:
        self.session = aiohttp.ClientSession()
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        self.runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self.runner.setup()
        try:
            await web.TCPSite(self.runner, self.settings.host, self.settings.port).start()
        except OSError as exc:
            await self.runner.cleanup()
            await self.session.close()
            raise SpecdecError(
                f"--listen {self.settings.host}:{self.settings.port}: cannot listen there ({exc.strerror or exc})"
            ) from None
        host, port = self.runner.addresses[0][:2]
        self.url = f"http://{f'[{host}]' if ':' in host else host}:{port}"
        return self.url

    def _sync_gauges(self) -> None:
        m = self.metrics
        m.gauges["specdec_sidecar_unreadable_files"] = self.compactor.unreadable
        m.gauges["specdec_sidecar_counter_rows_pending"] = len(self.counter_lake.rows)
        m.counters["specdec_sidecar_counter_rows_written_total"] = self.counter_lake.rows_written
        m.counters["specdec_sidecar_counter_rows_dropped_total"] = self.counter_lake.rows_dropped

    async def _metrics(self, request: web.Request) -> web.Response:
        self._sync_gauges()
        return web.Response(
            body=self.metrics.render(self.clock_ns()).encode(), headers={"Content-Type": METRICS_CONTENT_TYPE}
        )

    async def _healthz(self, request: web.Request) -> web.Response:
        self._sync_gauges()
        body: dict[str, object] = {
            "ok": self.scrape_error is None,
            "status": "ok" if self.scrape_error is None else "degraded",
            "counters": self.metrics.counters,
            "gauges": self.metrics.gauges,
        }
        if self.scrape_error is not None:
            body["reasons"] = [
                f"the last {self.scrapes_failed_in_row} read(s) of {self.settings.server}/metrics "
                f"failed; the last: {self.scrape_error}"
            ]
        return web.json_response(body, status=200 if self.scrape_error is None else 503)

    def _note_scrape(self, error: str | None) -> None:
        """Keep the scrape health; log only when it changes (failing <-> working)."""
        if error is not None:
            if self.scrape_error is None:
                log.warning(
                    "specdec-sidecar: cannot read %s/metrics (%s); /healthz says degraded until a read "
                    "works (logged once, not per scrape)",
                    self.settings.server,
                    error,
                )
            self.scrape_error = error
            self.scrapes_failed_in_row += 1
        elif self.scrape_error is not None:
            log.warning(
                "specdec-sidecar: %s/metrics read again after %d failed read(s); /healthz ok",
                self.settings.server,
                self.scrapes_failed_in_row,
            )
            self.scrape_error, self.scrapes_failed_in_row = None, 0

    # -------------------------------------------------------------- work
    async def compact(self) -> CompactResult:
        """One compaction pass (in a worker thread), then the live metrics."""
        result = await asyncio.to_thread(self.compactor.compact_once)
        self.metrics.capture = await asyncio.to_thread(read_capture_status, self.settings.capture_dir)
        c = self.metrics.counters
        c["specdec_sidecar_rows_written_total"] += result.rows
        c["specdec_sidecar_files_compacted_total"] += result.files
        c["specdec_sidecar_rows_dropped_total"] += result.rows_dropped
        c["specdec_sidecar_unreadable_files_total"] += result.unreadable_files
        c["specdec_sidecar_damaged_files_total"] += result.damaged_files
        c["specdec_sidecar_compaction_failures_total"] += result.write_failures
        c["specdec_sidecar_compactions_total"] += 1
        for table in result.tables:
            self.metrics.observe_rounds(table)
        now = time.time()
        self.metrics.gauges["specdec_sidecar_last_compaction_timestamp_seconds"] = now
        if result.rows:
            self.metrics.gauges["specdec_sidecar_last_rows_timestamp_seconds"] = now
        return result

    async def scrape(self) -> CounterScrape:
        """Read the server's /metrics once into a row (a failure is a row too)."""
        wall = time.time_ns()
        values: dict[str, float | None] = dict.fromkeys([*COUNTERS, *GAUGES])
        error = None
        try:
            assert self.session is not None  # start() opened it
            text = await metrics_text(
                self.session, self.settings.server, timeout_s=min(30.0, max(2.0, self.settings.scrape_s))
            )
            if text is None:
                error = f"HTTP 404 from {self.settings.server}/metrics"
            else:
                values = parse_metrics(text)
        except aiohttp.ClientResponseError as exc:
            error = f"HTTP {exc.status} from {self.settings.server}/metrics"
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            error = f"{type(exc).__name__}: {exc}"[:500]
        if error is None and self.metrics.model is None:
            assert self.session is not None  # as above
            self.metrics.model = await served_model(self.session, self.settings.server)
        row = CounterScrape(
            wall_time_ns=wall, server=self.settings.server, scrape_ok=error is None, error=error, **values
        )
        self.metrics.counters["specdec_sidecar_scrapes_total"] += 1
        self._note_scrape(error)
        if error is None:
            self.metrics.server_values = values
        else:
            self.metrics.counters["specdec_sidecar_scrape_failures_total"] += 1
        self.counter_lake.add(row)
        return row

    async def flush_counters(self) -> int:
        """Write the buffered counter rows to the lake (in a worker thread); rows written."""
        self._last_counter_flush = time.monotonic()
        rows = self.counter_lake.take()
        if not rows:
            return 0
        left = await asyncio.to_thread(self.counter_lake.write, rows)
        if left:
            self.counter_lake.put_back(left)
        return len(rows) - len(left)

    async def _scrape_tick(self) -> None:
        await self.scrape()
        if time.monotonic() - self._last_counter_flush >= self.settings.counters_flush_s - self.settings.scrape_s / 2:
            await self.flush_counters()

    # -------------------------------------------------------------- loop
    async def serve(self, stop: asyncio.Event) -> None:
        """Compact and scrape on their intervals until ``stop`` is set, then ``close``."""
        try:
            await asyncio.gather(
                self._every(self.settings.compact_s, self.compact, stop),
                self._every(self.settings.scrape_s, self._scrape_tick, stop),
            )
        finally:
            await self.close()

    @staticmethod
    async def _every(interval: float, work: Callable[[], Awaitable], stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await work()
            except Exception:  # noqa: BLE001 - a failed pass is logged, the next one runs
                log.exception("specdec-sidecar: %s failed", getattr(work, "__name__", work))
            try:
                await asyncio.wait_for(stop.wait(), interval)
            except TimeoutError:
                pass

    async def close(self) -> None:
        """One last compaction, one last scrape (the server's counters as they
        stand at the stop, so the lake's last counter row is not up to
        ``scrape_s`` old), every buffered counter row written, endpoint closed
        (idempotent)."""
        if self._closed:
            return
        self._closed = True
        try:
            await self.compact()
            if self.session is not None:
                await self.scrape()
            await self.flush_counters()
        finally:
            if self.runner is not None:
                await self.runner.cleanup()
            if self.session is not None:
                await self.session.close()

    def summary(self) -> dict:
        self._sync_gauges()
        return {
            **self.metrics.counters,
            "unreadable_files_now": self.compactor.unreadable,
            "counter_rows_not_written": len(self.counter_lake.rows),
        }


async def served_model(session: aiohttp.ClientSession, server: str) -> str | None:
    """The model the server serves (the first id of its /v1/models), for the
    ``model`` label; None when it does not say (asked again at the next scrape)."""
    try:
        async with session.get(f"{server}/v1/models", timeout=aiohttp.ClientTimeout(total=5)) as resp:
            if resp.status != 200:
                return None
            data = (await resp.json(content_type=None)).get("data") or []
            ids = [m.get("id") for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]
            return ids[0] if ids else None
    except (TimeoutError, aiohttp.ClientError, OSError, ValueError, AttributeError):
        return None


def exposed_by_sidecar(settings: SidecarSettings) -> str:
    """What the sidecar's own endpoint shows to whoever can reach it (the
    ``--listen`` warning): read-only, but it names the server and its model."""
    return (
        f"the sidecar's /metrics and /healthz (read-only: live acceptance figures, capture and "
        f"scrape counters, the server URL {settings.server} and the name of the model it serves)"
    )


def run_sidecar(settings: SidecarSettings, announce=print, warn=None) -> dict:
    """Run until SIGINT or SIGTERM; return the final counters. With
    ``settings.proxy`` the recording proxy runs in the same process and loop,
    in front of the same server, and stops (every recorded row written) first.
    ``warn`` takes the warning printed when the endpoint listens beyond
    loopback (``specdec.listen``; default: stderr). Raise ``RowsLost`` (exit 1
    in the CLI) when counter rows or proxy rows were not written (``rows_lost``)."""

    async def main() -> tuple[dict, dict | None]:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        sidecar = Sidecar(settings)
        url = await sidecar.start()
        announce(
            f"specdec sidecar listening on {url} (metrics: {url}/metrics): compacting {settings.capture_dir} "
            f"into {settings.lake} every {settings.compact_s:g} s, reading {settings.server}/metrics "
            f"every {settings.scrape_s:g} s"
        )
        warn_if_exposed(settings.host, exposed_by_sidecar(settings), warn)
        proxy, proxy_stats = None, None
        try:
            if settings.proxy is not None:
                proxy = await start_proxy(settings.proxy, book=sidecar.book)
                announce(
                    f"specdec proxy listening on {proxy.url} -> {settings.server} (recording into "
                    f"{settings.proxy.out_dir}, content: {settings.proxy.content})"
                )
                warn_if_exposed(settings.proxy.host, "the recording proxy: " + exposure(settings.proxy), warn)
            await sidecar.serve(stop)
        finally:
            await sidecar.close()
            if proxy is not None:
                await proxy.stop()
                stats = proxy_stats = proxy.recorder.stats()
                announce(
                    f"specdec proxy stopped: {stats['rows_written']} rows written, "
                    f"{stats['failures_total']} recording failures, {stats['rows_pending']} rows not written"
                )
        summary = sidecar.summary()
        announce("specdec sidecar stopped: " + json.dumps(summary))
        return summary, proxy_stats

    summary, proxy_stats = asyncio.run(main())
    lost = rows_lost(summary, proxy_stats)
    if lost:
        raise RowsLost(lost)
    return summary


def rows_lost(summary: dict, proxy_stats: dict | None) -> str | None:
    """What a stopped sidecar lost, in words (None: nothing): counter rows
    not written at the stop or dropped over the pending bound, and the
    proxy's traffic rows likewise, with the last write error."""
    parts = []
    pending = summary["counter_rows_not_written"]
    dropped = summary.get("specdec_sidecar_counter_rows_dropped_total", 0)
    if pending + dropped:
        parts.append(
            f"{pending + dropped} counter rows not written to the lake ({pending} still pending at the "
            f"stop, {dropped} dropped over the pending limit)"
        )
    if proxy_stats is not None and proxy_stats["rows_pending"] + proxy_stats["rows_dropped"]:
        p, d = proxy_stats["rows_pending"], proxy_stats["rows_dropped"]
        parts.append(
            f"{p + d} recorded proxy rows not written ({p} still pending at the stop, {d} dropped over "
            f"the pending limit; last error: {proxy_stats['last_error']})"
        )
    return "sidecar stopped with rows lost: " + "; ".join(parts) if parts else None
