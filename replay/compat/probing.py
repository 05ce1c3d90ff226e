"""Send the probe set to one pair of servers (baseline, speculative) and turn
each probe into a ``CompatCell``.

Per probe and arm, one request at a time: the plain twin, then the feature
request(s). On the speculative arm the engine's speculation counters are read
(until two reads agree, ``runner.settled_counters``) before the twin, between
twin and feature and after the feature, so each cell's acceptance is the
counters' difference around its own requests: nothing else may use the
speculative server while the probes run (a shared server: the counters'
differences would include its other traffic).
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from specdec.engines.metrics import read_counters
from specdec.engines.urls import ClientSettings, Endpoint
from specdec.replay.compat import checks, classify
from specdec.replay.compat.probes import Probe, ProbeContext, probe_set
from specdec.replay.compat.send import Reply, get_json, post_json, send
from specdec.schemas.compat import CompatCell

#: A sentence repeated to make the long input; its tokens are counted by the server's /tokenize.
LONG_SENTENCE = "The quick brown fox jumps over the lazy dog near the quiet river bank. "
#: Tokens kept free below max_model_len for the chat template and the reply.
LONG_MARGIN = 96


@dataclass(frozen=True)
class Pair:
    """The two servers under test and what the cells say about them."""

    engine: str
    engine_version: str | None
    spec_method: str
    baseline: Endpoint
    speculative: Endpoint
    counters: Mapping[str, str] | None = None  # the engine's counter names (None: vLLM's)
    settle_s: float = 0.2  # seconds between two counter reads that must agree (stats land after the reply)


async def served_model(
    session: aiohttp.ClientSession, ep: Endpoint, settings: ClientSettings
) -> tuple[str, int | None]:
    """The first model of GET /v1/models and its context length: vLLM's max_model_len there, else
    llama-server's per-slot n_ctx from GET /props; None when neither says."""
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
    return model, length if isinstance(length, int) and not isinstance(length, bool) else None


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


async def probe_pair(
    pair: Pair,
    settings: ClientSettings,
    run_id: str,
    echo: Callable[[str], None] = print,
    only: frozenset[str] | None = None,
) -> tuple[list[CompatCell], list[dict[str, Any]]]:
    """Every probe on ``pair``: (cells, the request bodies sent, one entry per probe). ``only``: probe names to send."""
    seq = itertools.count()
    cells: list[CompatCell] = []
    sent: list[dict[str, Any]] = []
    async with aiohttp.ClientSession() as session:
        model, ctx = await probe_context(session, pair.baseline, settings)
        for probe in probe_set(ctx):
            if only is not None and probe.name not in only:
                continue
            sent.append(
                {
                    "probe": probe.name,
                    "feature": probe.feature,
                    "bodies": probe.bodies(model),
                    "twin": probe.twin_body(model),
                }
            )
            prefix = f"compat.{run_id}.{_slug(pair.engine)}.{probe.name}"
            base, spec = [
                await _arm(session, ep, probe, model, settings, f"{prefix}.{arm}", seq, pair.counters, pair.settle_s)
                for arm, ep in (("baseline", pair.baseline), ("speculative", pair.speculative))
            ]
            cell = _cell(pair, run_id, probe, base, spec)
            cells.append(cell)
            echo(f"  {pair.engine} {probe.name:<22} {cell.outcome:<11} {cell.detail[:100]}")
    return cells, sent


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", text)


@dataclass
class _ArmRun:
    replies: checks.ArmReplies
    plain: dict[str, Any] | None  # counter differences around the twin
    feature: dict[str, Any] | None  # counter differences around the feature requests
    requests: int


async def _arm(
    session: aiohttp.ClientSession,
    ep: Endpoint,
    probe: Probe,
    model: str,
    settings: ClientSettings,
    prefix: str,
    seq: itertools.count[int],
    counters: Mapping[str, str] | None,
    settle_s: float,
) -> _ArmRun:
    speculative = prefix.endswith(".speculative")

    async def read() -> dict[str, Any] | None:
        if not speculative:
            return None
        return await settled(session, ep, settings, counters, settle_s)

    c0 = await read()
    twin_body = probe.twin_body(model)
    twin: Reply | None = None
    if twin_body is not None:
        twin = await send(session, ep, twin_body, settings, f"{prefix}.{next(seq)}")
    c1 = await read()
    feature = [await send(session, ep, body, settings, f"{prefix}.{next(seq)}") for body in probe.bodies(model)]
    c2 = await read()
    requests = len(feature) + (twin is not None)
    return _ArmRun(checks.ArmReplies(feature, twin), _diff(c0, c1) if twin else None, _diff(c1, c2), requests)


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
    names = dict(counters) if counters else None
    try:
        prev = await read_counters(session, ep, settings, names)
        for _ in range(tries):
            await asyncio.sleep(settle_s)
            cur = await read_counters(session, ep, settings, names)
            if cur == prev:
                return cur
            prev = cur
        return prev
    except (aiohttp.ClientError, OSError, TimeoutError):
        return None


def _diff(before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, Any] | None:
    if before is None or after is None:
        return None
    out: dict[str, Any] = {}
    for key, value in after.items():
        prev = before.get(key)
        out[key] = None if value is None or prev is None or not isinstance(value, int | float) else value - prev
    return out


def _count(diff: dict[str, Any] | None, key: str) -> int | None:
    value = None if diff is None else diff.get(key)
    return None if value is None else int(round(value))


def _acceptance(diff: dict[str, Any] | None) -> classify.Acceptance:
    return classify.Acceptance(
        _count(diff, "spec_num_draft_tokens"), _count(diff, "spec_num_accepted_tokens"), _count(diff, "spec_num_drafts")
    )


def _cell(pair: Pair, run_id: str, probe: Probe, base: _ArmRun, spec: _ArmRun) -> CompatCell:
    bv, sv = _verdict(probe, base.replies), _verdict(probe, spec.replies)
    feature, plain = _acceptance(spec.feature), _acceptance(spec.plain)
    ev = classify.Evidence(probe.identity_expected, base.replies, spec.replies, bv, sv, feature, plain)
    out = classify.classify(ev)
    hits, queries = _count(spec.feature, "prefix_cache_hits"), _count(spec.feature, "prefix_cache_queries")
    return CompatCell(
        run_id=run_id,
        engine=pair.engine,
        engine_version=pair.engine_version,
        spec_method=pair.spec_method,
        feature=probe.feature,
        probe=probe.name,
        output_constraint=probe.constraint,
        identity_expected=probe.identity_expected,
        **_arm_fields("baseline", base.replies, bv),
        **_arm_fields("speculative", spec.replies, sv),
        identical=out.identical,
        first_divergence_char=out.first_divergence_char,
        **_acceptance_fields("", feature),
        **_acceptance_fields("plain_", plain),
        prefix_cache_hit_rate=hits / queries if probe.session and hits is not None and queries else None,
        outcome=out.outcome,
        detail=out.detail,
        requests_sent=base.requests + spec.requests,
    )


def _verdict(probe: Probe, replies: checks.ArmReplies) -> checks.Verdict:
    """The probe's check of one arm; (None, "refused") when a feature request was refused."""
    verdict = probe.check(replies)
    return verdict if classify.refusal(replies) is None else (None, "refused")


#: Characters of each arm's output kept in the cell (the digest covers all of it).
OUTPUT_HEAD_CHARS = 300


def _arm_fields(arm: str, replies: checks.ArmReplies, verdict: checks.Verdict) -> dict[str, Any]:
    """The cell's ``<arm>_*`` columns: what the arm's (first) feature reply was, and its output
    (digest and head; None when a feature request was refused)."""
    first, accepted = replies.first, classify.refusal(replies) is None
    text = classify.output(replies) if accepted else None
    return {
        f"{arm}_accepted": accepted,
        f"{arm}_http_status": first.status,
        f"{arm}_error": next((r.error for r in replies.feature if r.error is not None), None),
        f"{arm}_valid": verdict[0],
        f"{arm}_validity_detail": verdict[1],
        f"{arm}_output_sha256": None if text is None else hashlib.sha256(text.encode()).hexdigest(),
        f"{arm}_output_head": None if text is None else text[:OUTPUT_HEAD_CHARS],
        f"{arm}_completion_tokens": first.completion_tokens,
        f"{arm}_e2e_ms": first.e2e_ms,
    }


def _acceptance_fields(prefix: str, acceptance: classify.Acceptance) -> dict[str, Any]:
    """The cell's ``<prefix>draft_tokens``, ``<prefix>accepted_tokens`` and ``<prefix>drafts``."""
    return {
        f"{prefix}draft_tokens": acceptance.draft_tokens,
        f"{prefix}accepted_tokens": acceptance.accepted_tokens,
        f"{prefix}drafts": acceptance.drafts,
    }
