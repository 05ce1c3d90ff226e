"""Send the probe set to one pair of servers (baseline, speculative) and turn
each probe into ``CompatCell`` rows (``cells``).

Each probe is sent ``repeats`` times. Within a repeat, its plain twin and then
its feature request(s) go to both arms, one request at a time, the arms'
order alternated from request to request (paired: each body's two sends are
adjacent, and neither arm always goes first). The engines' counters are read
(until two reads agree, ``runner.settled_counters``) on each arm before the
probe and after each of its requests, so every request's counter difference
is its own: a cell's acceptance, hit rate and generation tokens are sums over
its own requests. Nothing else may use the servers while the probes run (a
shared server: the differences would include its other traffic).

Probes whose plain twins are the same body (the three tool probes; the
penalties, ``stream`` and ``stop`` on the code prompt) share the twin's sends:
within a repeat the first such probe sends it, and the later ones reuse its
replies, request ids and counter differences (``Twins``; the manifest names
the probe that sent them). A twin is a fixed greedy body, so a second send
would measure the same thing again; the pair's adjacent sends still cancel
drift in its own log ratio. Sampled twins (``n2``, ``seed``) differ from every
other twin and are never shared.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from specdec.engines.metrics import COUNTERS, parse_counters
from specdec.experiments.compat import cells, lossless_cells, sampling_cells, speed
from specdec.experiments.compat.cells import Pair
from specdec.experiments.compat.probes import Probe, ProbeContext, probe_set
from specdec.experiments.compat.send import NoReply, Reply, answers, fresh_connections, get_json, post_json, send
from specdec.experiments.compat.timing import DEFAULT_REPEATS
from specdec.experiments.compat.together import never
from specdec.experiments.compat.watch import ServerFailed, Watch
from specdec.http.metrics import metrics_text
from specdec.http.urls import ClientSettings, Endpoint
from specdec.schemas.compat import CompatCell

#: A sentence repeated to make the long input; its tokens are counted by the server's /tokenize.
LONG_SENTENCE = "The quick brown fox jumps over the lazy dog near the quiet river bank. "
#: Tokens kept free below max_model_len for the chat template and the reply.
LONG_MARGIN = 96
#: The longest input the long-input probe builds, tokens: a server's max_model_len above it is read as
#: this (a context of 10^12 would otherwise make a prompt of terabytes: a MemoryError); 32k tokens of
#: ``LONG_SENTENCE`` are about 150 kB of prompt. The cell's constraint names the length probed.
LONG_INPUT_CAP = 32768


async def served_model(
    session: aiohttp.ClientSession, ep: Endpoint, settings: ClientSettings
) -> tuple[str, int | None]:
    """The first model of GET /v1/models and its context length: vLLM's max_model_len there, else
    llama-server's per-slot n_ctx from GET /props, at most ``LONG_INPUT_CAP``; None when neither says."""
    data: Any = await get_json(session, ep, "/v1/models", settings)
    try:
        entry = data["data"][0]
        model, length = str(entry["id"]), entry.get("max_model_len")
    except (TypeError, KeyError, IndexError, AttributeError):
        model, length = "default", None
    if not isinstance(length, int):
        props: Any = await get_json(session, ep, "/props", settings)
        try:
            length = props["default_generation_settings"]["n_ctx"]
        except (TypeError, KeyError):
            length = None
    if not isinstance(length, int) or isinstance(length, bool) or length <= 0:
        return model, None
    return model, min(length, LONG_INPUT_CAP)


async def token_ids(
    session: aiohttp.ClientSession, ep: Endpoint, model: str, text: str, settings: ClientSettings
) -> list[int] | None:
    """The server's tokens of ``text`` (vLLM's and llama.cpp's /tokenize); None when it has none."""
    for body in ({"model": model, "prompt": text, "add_special_tokens": False}, {"content": text}):
        data = await post_json(session, ep, "/tokenize", body, settings)
        tokens = data.get("tokens") if isinstance(data, dict) else None
        # non-empty: llama-server answers vLLM's body (no "content") with an empty list
        if isinstance(tokens, list) and tokens and all(isinstance(t, int) for t in tokens):
            return tokens
    return None


async def probe_context(
    session: aiohttp.ClientSession, ep: Endpoint, settings: ClientSettings
) -> tuple[str, ProbeContext]:
    """The served model name and what the probes need to know about it."""
    model, max_len = await served_model(session, ep, settings)
    ctx = ProbeContext(max_model_len=max_len)
    bias = await token_ids(session, ep, model, ctx.bias_token_text, settings)
    if bias is not None and len(bias) == 1:
        ctx = ProbeContext(max_model_len=max_len, bias_token_id=bias[0])
    sentence = await token_ids(session, ep, model, LONG_SENTENCE, settings)
    if max_len is not None and sentence:
        reps = max(1, (max_len - LONG_MARGIN) // len(sentence))
        ctx = ProbeContext(max_len, LONG_SENTENCE * reps, ctx.bias_token_id, ctx.bias_token_text)
    return model, ctx


@dataclass
class Twins:
    """The twins already sent on one pair, by (body, repeat): per arm the request id, the reply and the
    counter difference, and the probe that sent them (module docstring)."""

    sent: dict[tuple[str, int], tuple[str, dict[str, tuple[str, Reply, dict[str, Any] | None]]]] = field(
        default_factory=dict
    )

    @staticmethod
    def key(body: dict[str, Any], repeat: int) -> tuple[str, int]:
        return json.dumps(body, sort_keys=True), repeat


async def probe_pair(
    pair: Pair,
    settings: ClientSettings,
    run_id: str,
    echo: Callable[[str], None] = print,
    only: frozenset[str] | None = None,
    repeats: int = DEFAULT_REPEATS,
    checkpoint: Callable[[], None] = never,
    keep: Callable[[list[CompatCell]], None] = lambda _cells: None,
    machinery: speed.Machinery | None = None,
    sampling: sampling_cells.Test | None = None,
    sampling_levels: tuple[int, ...] = (),
    sampling_seeds: int = sampling_cells.SEEDS,
    lossless_levels: tuple[int, ...] = (),
) -> tuple[list[CompatCell], list[dict[str, Any]]]:
    """Every probe on ``pair``: (cells, one manifest entry per probe: its request bodies, and per cell
    each arm's request ids and counter differences, which ``capture_check`` reconciles). ``only``:
    probe names to send (a session's name sends all its turns); ``checkpoint`` is called before
    each probe (``together``: it raises when the run ends early); ``keep`` gets the cells so far after
    each probe (the run writes them as they are measured). A server that does not serve ends the
    run with ``watch.ServerFailed`` (its cells so far already kept). Once every probe is in, each
    feature cell's speed is decided with the verdict's ``machinery`` (``speed``; None: not judged).
    Then the sampling-distribution cells at ``sampling_levels`` (``sampling_cells``; judged by the
    ``sampling`` test handed in, None: not judged; ``()``: none sent), and the lossless cells at
    ``lossless_levels`` (``lossless_cells``: greedy token ids and top-2 logprobs; ``()``: none sent)."""
    seq = itertools.count()
    ids = f"compat.{run_id}.{_slug(pair.id_tag or pair.engine)}"  # the requests' id prefix
    found: list[CompatCell] = []
    sent: list[dict[str, Any]] = []
    twins = Twins()
    watch = Watch()

    def took(made: list[tuple[CompatCell, Any]]) -> None:
        """A probe's cells: kept, and said."""
        for cell, _ in made:
            found.append(cell)
            echo(f"  {pair.engine} {cell.probe:<24} {cell.outcome:<11} {cell.detail[:100]}")
        keep(list(found))

    async with aiohttp.ClientSession(connector=fresh_connections()) as session:
        for arm, ep in (("baseline", pair.baseline), ("speculative", pair.speculative)):
            await reachable(session, arm, ep, settings)
        model, ctx = await probe_context(session, pair.baseline, settings)
        read = _counter_reader(session, pair, settings)  # the passes' counters, read around each arm's requests
        for probe in probe_set(ctx):
            if only is not None and probe.name not in only:
                continue
            checkpoint()
            prefix = f"{ids}.{probe.name}"
            logs, twin_from = await _send_probe(
                session, pair, probe, model, settings, prefix, seq, repeats, twins, watch
            )
            made = cells.probe_cells(pair, run_id, probe, logs, repeats)
            sent.append(
                {
                    "probe": probe.name,
                    "feature": probe.feature,
                    "repeats": repeats,
                    "bodies": probe.bodies(model, f"{prefix}.r0"),
                    "twin": probe.twin_body(model),
                    # the probe whose sends of the same twin body this probe's cells reuse; None: sent here
                    "twin_sent_by": twin_from,
                    "cells": {c.probe: {a: ev[a] for a in ("baseline", "speculative")} for c, ev in made},
                    # per cell, [body, repeat, ln(baseline e2e / speculative e2e)] of each timed pair (``speed``)
                    "log_ratios": {c.probe: ev["log_ratios"] for c, ev in made},
                }
            )
            took(made)
        levels = sampling_cells.wanted(only, sampling_levels)
        if levels:
            checkpoint()
            made = await sampling_cells.sampling_cells(
                session, pair, model, settings, run_id, ids, read, _diff, sampling, levels, sampling_seeds
            )
            design = {
                "prompts": list(sampling_cells.PROMPTS),
                "seeds_per_prompt": sampling_seeds,
                "max_tokens": sampling_cells.MAX_TOKENS,
                "temperature": sampling_cells.TEMPERATURE,
                "levels": list(levels),
            }
            sent.append(_pass_entry(sampling_cells.NAME, sampling_cells.FEATURE, design, made))
            took(made)
        levels = lossless_cells.wanted(only, lossless_levels)
        if levels:
            checkpoint()
            made = await lossless_cells.lossless_cells(session, pair, model, settings, run_id, ids, read, _diff, levels)
            design = {
                "prompts": list(lossless_cells.PROMPTS),
                "max_tokens": lossless_cells.MAX_TOKENS,
                "levels": list(levels),
                "near_tie_threshold": lossless_cells.near_tie_threshold(pair.dtype),
            }
            sent.append(_pass_entry(lossless_cells.NAME, lossless_cells.FEATURE, design, made))
            took(made)
    ratios = {name: rows for entry in sent for name, rows in entry["log_ratios"].items()}
    found = speed.judge_cells(found, ratios, machinery)
    if machinery is not None:
        keep(list(found))
    return found, sent


def _pass_entry(probe: str, feature: str, design: dict[str, Any], made: list[tuple[CompatCell, Any]]) -> dict[str, Any]:
    """The manifest entry of a pass the matrix runs beside the probes (sampling, lossless): its design,
    and per cell each arm's request ids and counter differences; no twin, no timed pair (no speed)."""
    return {
        "probe": probe,
        "feature": feature,
        "repeats": 1,
        "design": design,
        "twin_sent_by": None,
        "cells": {c.probe: {a: ev[a] for a in ("baseline", "speculative")} for c, ev in made},
        "log_ratios": {},
    }


async def reachable(session: aiohttp.ClientSession, arm: str, ep: Endpoint, settings: ClientSettings) -> None:
    """``ServerFailed`` naming the arm's server when GET /v1/models gets no HTTP reply at all (a down
    or hung server): the run stops within one request's bounds, before any probe waits on it."""
    try:
        await answers(session, ep, "/v1/models", settings)
    except NoReply as exc:
        raise ServerFailed(
            f"the {arm} server at {ep.display} gave no reply to GET /v1/models ({exc}); is it running, and is "
            "the URL right?"
        ) from None


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", text)


async def _send_probe(
    session: aiohttp.ClientSession,
    pair: Pair,
    probe: Probe,
    model: str,
    settings: ClientSettings,
    prefix: str,
    seq: itertools.count[int],
    repeats: int,
    twins: Twins,
    watch: Watch,
) -> tuple[dict[str, cells.ArmLog], str | None]:
    """Both arms' requests of one probe, paired and interleaved, and the probe whose twin sends it
    reused (None: it sent its own, or has no twin) (module docstring)."""
    eps = {"baseline": pair.baseline, "speculative": pair.speculative}
    logs = {arm: cells.ArmLog() for arm in eps}
    reused: str | None = None
    read = _counter_reader(session, pair, settings)

    last = {arm: await read(arm) for arm in eps}
    twin_body = probe.twin_body(model)
    for r in range(repeats):
        units = [("twin", twin_body)] if twin_body is not None else []
        units += [(f"f{i}", body) for i, body in enumerate(probe.bodies(model, f"{prefix}.r{r}"))]
        for log in logs.values():
            log.feature.append([])
        for j, (bucket, body) in enumerate(units):
            key = Twins.key(body, r) if bucket == "twin" else None
            if key is not None and key in twins.sent:
                reused, earlier = twins.sent[key]
                for arm, (rid, reply, diff) in earlier.items():
                    logs[arm].add(bucket, rid, diff)
                    logs[arm].twins.append(reply)
                continue
            done: dict[str, tuple[str, Reply, dict[str, Any] | None]] = {}
            for arm in list(eps) if (r + j) % 2 == 0 else list(eps)[::-1]:
                rid = f"{prefix}.{arm}.{next(seq)}"
                reply = await send(session, eps[arm], body, settings, rid)
                watch.saw(arm, eps[arm], reply)
                now = await read(arm)
                diff = _diff(last[arm], now)
                logs[arm].add(bucket, rid, diff)
                last[arm] = now
                done[arm] = (rid, reply, diff)
                if bucket == "twin":
                    logs[arm].twins.append(reply)
                else:
                    logs[arm].feature[-1].append(reply)
            if key is not None:
                twins.sent[key] = (probe.name, done)
    return logs, reused


def _counter_reader(
    session: aiohttp.ClientSession, pair: Pair, settings: ClientSettings
) -> Callable[[str], Awaitable[dict[str, Any] | None]]:
    """``read(arm)``: that arm's counters now, once settled (``settled``)."""
    eps = {"baseline": pair.baseline, "speculative": pair.speculative}

    async def read(arm: str) -> dict[str, Any] | None:
        return await settled(session, eps[arm], settings, pair.counters, pair.settle_s)

    return read


async def settled(
    session: aiohttp.ClientSession,
    ep: Endpoint,
    settings: ClientSettings,
    counters: Mapping[str, str] | None,
    settle_s: float,
    tries: int = 20,
) -> dict[str, Any] | None:
    """The counters once two reads ``settle_s`` apart agree (as ``runner.settled_counters``, the
    pause a parameter so the tests need not wait); None when /metrics cannot be read."""
    names = dict(counters) if counters else COUNTERS
    try:
        prev = await read_counters(session, ep, settings, names)
        for _ in range(tries):
            await asyncio.sleep(settle_s)
            cur = await read_counters(session, ep, settings, names)
            if cur == prev:
                return cur
            prev = cur
        return prev
    except (aiohttp.ClientError, OSError, TimeoutError, ValueError):
        return None


async def read_counters(
    session: aiohttp.ClientSession, ep: Endpoint, settings: ClientSettings, names: Mapping[str, str]
) -> dict[str, float | None]:
    """The counters ``names`` on /metrics, each None where the server exports none, or exports a
    value no counter has (NaN, infinite, negative: not measured). The read is bounded by the
    connect and request timeouts together (``--request-timeout``, not a fixed wait)."""
    text = await metrics_text(session, ep, settings, timeout_s=settings.connect_timeout_s + settings.request_timeout_s)
    if text is None:
        return {k: None for k in names}
    return {
        k: v if v is not None and math.isfinite(v) and v >= 0 else None
        for k, v in parse_counters(text, dict(names)).items()
    }


def _diff(before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, Any] | None:
    if before is None or after is None:
        return None
    out: dict[str, Any] = {}
    for key, value in after.items():
        prev = before.get(key)
        ok = isinstance(value, int | float) and isinstance(prev, int | float) and value >= prev
        out[key] = value - prev if ok else None  # a counter that went back (a restart): not measured
    return out
