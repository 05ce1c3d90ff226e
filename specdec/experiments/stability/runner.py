"""The probe sequence of ``specdec stability``: preflight, the greedy
reference, then every probe in order within its time budget, ``/health``
after each, one ``StabilityResult`` per probe.

A probe after which the server is unhealthy is ``failed``; an embedded server
is then killed and restarted so the later probes still mean something, and
when that is impossible the later probes are recorded as ``skipped``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Callable

import aiohttp

from specdec.errors import EngineError, SpecdecError
from specdec.experiments.stability.faults import Finding, Probe, Target, clean, input_probes, over_length_probe
from specdec.experiments.stability.load_faults import burst_probe, disconnect_probe
from specdec.experiments.stability.recovery import greedy_probe, greedy_reference, kill_restart_probe
from specdec.experiments.stability.soak import RssTrend, soak_probe
from specdec.schemas.records import StabilityResult


def plan(cfg, reference: dict[str, list[str]]) -> list[Probe]:
    """The probes in the order they run: inputs, disconnects, burst, soak,
    greedy re-check, kill and restart, greedy re-check after the restart."""
    inputs = input_probes()
    cut = next(i for i, p in enumerate(inputs) if p.fault == "odd_unicode")
    soak = soak_probe(cfg.soak_minutes, cfg.rss_interval_s)
    return [
        *inputs[:cut],
        over_length_probe(),
        *inputs[cut:],
        disconnect_probe(),
        burst_probe(),
        dataclasses.replace(soak, budget_s=cfg.soak_minutes * 60 + cfg.probe_timeout_s),
        greedy_probe(reference, "after the faults"),
        kill_restart_probe(),
        greedy_probe(reference, "after the restart"),
    ]


async def run_probe(t: Target, probe: Probe, index: int, run_id: str, budget_s: float) -> StabilityResult:
    """Run one probe within its budget, check health, judge: a StabilityResult."""
    mark, wall, t0 = len(t.log), time.time_ns(), time.perf_counter()
    try:
        finding = await asyncio.wait_for(probe.run(t), budget_s)
    except TimeoutError:
        finding = Finding("degraded", f"the probe did not finish within its budget of {budget_s:g} s")
    except (SpecdecError, OSError) as exc:  # the server could not be killed or started, say
        finding = Finding("failed", f"the probe stopped: {clean(str(exc), 200)}")
    duration_ms = (time.perf_counter() - t0) * 1000
    healthy = await t.healthy()
    outcome = finding.verdict
    detail = finding.detail
    if not healthy and outcome != "skipped":
        outcome, detail = "failed", f"{detail}; GET {t.health_path} did not answer 200 afterwards"
    sent = t.log[mark:]
    rss = finding.rss
    assert rss is None or isinstance(rss, RssTrend)  # only the soak sets it
    return StabilityResult(
        run_id=run_id,
        fault=probe.fault,
        probe_index=index,
        wall_start_ns=wall,
        duration_ms=duration_ms,
        requests_sent=len(sent),
        requests_failed=sum(not s.ok for s in sent),
        error_types=sorted({s.error for s in sent if s.error is not None}),  # set exactly when not ok
        expected=probe.expected,
        outcome=outcome,
        server_healthy_after=healthy,
        detail=detail,
        rss_mb=t.server.rss_mb(),
        rss_samples=rss.samples if rss else None,
        rss_first_mb=rss.first_mb if rss else None,
        rss_last_mb=rss.last_mb if rss else None,
        rss_max_mb=rss.max_mb if rss else None,
        rss_slope_mb_per_min=rss.slope_mb_per_min if rss else None,
    )


async def preflight(t, served_model: str | None, max_model_len: int | None) -> None:
    """Find the health path, the model name and max_model_len; a server that
    does not answer at all stops the run here with a message naming the URL."""
    status, body = await t.get("/v1/models")
    if status != 200:
        hint = " (drop the /v1 suffix from --url)" if t.endpoint.path_ends_with_v1 else ""
        hint += " (is the API key set? see --api-key-env)" if status in (401, 403) else ""
        raise EngineError(f"GET {t.endpoint.display}/v1/models answered {status or body}{hint}")
    try:
        cards = json.loads(body).get("data") or []
    except (ValueError, AttributeError):
        cards = []
    card = next(
        (c for c in cards if isinstance(c, dict) and (served_model is None or c.get("id") == served_model)), None
    )
    if served_model is None and card is None:
        raise EngineError(f"GET {t.endpoint.display}/v1/models lists no model; give --served-model")
    if served_model:
        t.model = served_model
    else:
        assert card is not None  # refused above when no model was named and none is listed
        t.model = card["id"]
    reported = card.get("max_model_len") if card else None
    t.max_model_len = max_model_len or (reported if isinstance(reported, int) and reported > 0 else None)
    if (await t.get("/health"))[0] != 200:
        t.health_path = "/v1/models"  # not vLLM: a server that lists its models is up


async def probe_all(
    cfg, server, run_id: str, settings, sink: Callable, echo: Callable, found: Callable | None = None
) -> list:
    """Preflight, greedy reference, then every probe in order; each row goes to
    sink(row) as soon as it is known, the served model to found(model,
    max_model_len) once known. Returns the rows."""
    rows = []
    async with aiohttp.ClientSession() as session:
        t = Target(session, server, "", None, settings, cfg.concurrency, run_id)
        await preflight(t, cfg.served_model, cfg.max_model_len if cfg.url is None else None)
        if found is not None:
            found(t.model, t.max_model_len)
        reference = await greedy_reference(t)
        counts: dict[str, int] = {}
        down: str | None = None
        for probe in plan(cfg, reference):
            index = counts[probe.fault] = counts.get(probe.fault, -1) + 1
            if down is not None:
                row = StabilityResult(
                    run_id=run_id,
                    fault=probe.fault,
                    probe_index=index,
                    wall_start_ns=time.time_ns(),
                    duration_ms=0.0,
                    requests_sent=0,
                    requests_failed=0,
                    error_types=[],
                    expected=probe.expected,
                    outcome="skipped",
                    server_healthy_after=False,
                    detail=f"not run: the server was not healthy after {down} and could not be restarted",
                )
            else:
                row = await run_probe(t, probe, index, run_id, probe.budget_s or cfg.probe_timeout_s)
                if not row.server_healthy_after:
                    down = await _recover(t, f"{probe.fault} #{index}", echo)
            rows.append(row)
            sink(row)
            echo(f"  {row.fault:<22} #{row.probe_index:<2} {row.outcome:<8} {row.detail}")
    return rows


async def _recover(t, after: str, echo: Callable) -> str | None:
    """After an unhealthy probe: restart an embedded server so the later probes
    still mean something. Returns None when serving again, else `after`."""
    if not getattr(t.server, "restartable", False):
        return after
    echo(f"  server unhealthy after {after}: killing and restarting it")
    try:
        await t.server.kill()
        await t.server.start()
    except Exception:  # noqa: BLE001 - any failure: the later probes are skipped
        return after
    return None if await t.healthy() else after
