"""A probe's ``CompatCell`` rows from what both arms answered (``probing``
sends): one cell per probe, or one per turn for a multi-turn session.

A cell's evidence pools its requests over the repeats: the output check runs
on each repeat (a cell is valid only if every repeat is), greedy identity
compares every repeat's outputs, the acceptance and the prefix cache hit rate
sum the counters' differences around the cell's own requests, and the
speedups pair each body's two sends (``timing``).

After ``classify``, two silent degradations measured in both arms turn a
valid, lossless cell that drafted (``works`` or ``degrades``) into
``degrades``: a stall near the end of a streamed structured-output or tool
reply (``stall``) and a multi-turn cell's prefix-cache hit rate below the
baseline's (``prefix``). The cell's speed label is decided later, once the
pair's every cell is in (``speed``, from ``probing``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specdec.experiments.compat import classify, prefix, stall, timing, validity
from specdec.experiments.compat.probes import Probe
from specdec.experiments.compat.send import Reply
from specdec.http.urls import Endpoint
from specdec.schemas.compat import OUTPUT_HEAD_CHARS, CompatCell

#: Seconds between two counter reads that must agree after a request (``probing.settled``). Both engines
#: have counted a request by the time its reply is read (vLLM records a step's stats before the reply's
#: handler runs; llama-server answers /metrics from the same task loop that finished the request): of 252
#: reads after a reply on vLLM CPU at 0.2 s (2026-12-03), none needed a third read. The read that must
#: agree stays, as a guard; each read costs about 10 ms. 0.2 s before: about 60 s per engine and run.
SETTLE_S = 0.05


@dataclass(frozen=True)
class Pair:
    """The two servers under test and what the cells say about them."""

    engine: str
    engine_version: str | None
    spec_method: str
    baseline: Endpoint
    speculative: Endpoint
    counters: Mapping[str, str] | None = None  # the engine's counter names (None: vLLM's)
    settle_s: float = SETTLE_S  # seconds between two counter reads that must agree
    #: how the lossless cell asks for token ids (an engine's ``lossless_protocol``; None: found on the baseline)
    lossless_protocol: str | None = None
    dtype: str | None = None  # the servers' model dtype where known (the lossless cell's near-tie margin)
    #: the engine's name in request ids (None: ``engine``); a further pair of one engine has its own
    id_tag: str | None = None


@dataclass
class ArmLog:
    """One arm's requests of one probe: per repeat its twin's reply and its feature replies (one per
    body), and per bucket ('twin', 'f0', 'f1', ...: the body) the request ids and summed counter
    differences (None once any difference of the bucket could not be read)."""

    twins: list[Reply] = field(default_factory=list)
    feature: list[list[Reply]] = field(default_factory=list)
    ids: dict[str, list[str]] = field(default_factory=dict)
    counters: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    diffs: dict[str, list[dict[str, Any] | None]] = field(default_factory=dict)  # per bucket, one per repeat

    def add(self, bucket: str, request_id: str, diff: dict[str, Any] | None) -> None:
        self.ids.setdefault(bucket, []).append(request_id)
        self.diffs.setdefault(bucket, []).append(diff)
        if bucket in self.counters and self.counters[bucket] is None:
            return
        self.counters[bucket] = _sum(self.counters.get(bucket, {}), diff)

    def total(self, buckets: Sequence[str]) -> dict[str, Any] | None:
        out: dict[str, Any] | None = {}
        for b in buckets:
            if b in self.counters:
                out = _sum(out, self.counters[b]) if out is not None else None
        return out


def _sum(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any] | None:
    if a is None or b is None:
        return None
    keys = set(a) | set(b)
    return {k: None if a.get(k, 0) is None or b.get(k, 0) is None else a.get(k, 0) + b.get(k, 0) for k in keys}


def probe_cells(
    pair: Pair, run_id: str, probe: Probe, logs: Mapping[str, ArmLog], repeats: int
) -> list[tuple[CompatCell, dict[str, Any]]]:
    """(cell, its evidence for the manifest and ``capture_check``) per cell of ``probe``."""
    n = len(logs["baseline"].feature[0]) if logs["baseline"].feature else 0
    if probe.session:
        return [_cell(pair, run_id, probe, logs, repeats, [i], turn=i + 1) for i in range(n)]
    return [_cell(pair, run_id, probe, logs, repeats, list(range(n)), turn=None)]


def _cell(
    pair: Pair,
    run_id: str,
    probe: Probe,
    logs: Mapping[str, ArmLog],
    repeats: int,
    index: list[int],
    turn: int | None,
) -> tuple[CompatCell, dict[str, Any]]:
    b, s = logs["baseline"], logs["speculative"]
    per_b = [[rep[i] for i in index] for rep in b.feature]
    per_s = [[rep[i] for i in index] for rep in s.feature]
    rb, rs = _replies(per_b, b.twins), _replies(per_s, s.twins)
    bv, sv = _verdict(probe, per_b, b.twins), _verdict(probe, per_s, s.twins)
    buckets = [f"f{i}" for i in index]
    with_twin = buckets + (["twin"] if b.twins else [])
    spec_counters = s.total(buckets)
    feature = classify.Acceptance.of(spec_counters)
    plain = classify.Acceptance.of(s.counters.get("twin") if s.twins else None)
    flat_b, flat_s = [r for rep in per_b for r in rep], [r for rep in per_s for r in rep]
    sp = timing.speedup(flat_b, flat_s)
    plain_sp = timing.speedup(b.twins, s.twins) if b.twins else None
    rel = (
        timing.relative([list(zip(x, y)) for x, y in zip(per_b, per_s)], list(zip(b.twins, s.twins)))
        if b.twins
        else None
    )
    ev = classify.Evidence(probe.identity_expected, rb, rs, bv, sv, feature, plain, sp, plain_sp, rel)
    out = classify.classify(ev)
    st = stall.judge(flat_b, flat_s) if probe.feature in stall.STALL_FEATURES else stall.Stall(None, None, None)
    if out.outcome in ("works", "degrades") and st.why is not None:
        head, sep, rest = out.detail.partition("; ") if out.detail.startswith("speedup ") else ("", "", out.detail)
        out = classify.Classified("degrades", f"{head}{sep}{st.why}; {rest}", out.identical, out.first_divergence_char)
    hit = prefix.judge(b, s, buckets) if probe.session else prefix.Hits(None, None, None, None)
    if hit.why is not None and out.outcome in ("works", "degrades"):
        head, sep, rest = out.detail.partition("; ") if out.detail.startswith("speedup ") else ("", "", out.detail)
        out = classify.Classified("degrades", f"{head}{sep}{hit.why}; {rest}", out.identical, out.first_divergence_char)
    elif hit.said is not None:
        out = classify.Classified(out.outcome, f"{out.detail}; {hit.said}", out.identical, out.first_divergence_char)
    name = probe.name if turn is None else f"{probe.name}.turn{turn}"
    cell = CompatCell(
        run_id=run_id,
        engine=pair.engine,
        engine_version=pair.engine_version,
        spec_method=pair.spec_method,
        feature=probe.feature,
        probe=name,
        output_constraint=probe.constraint,
        identity_expected=probe.identity_expected,
        **_arm_fields("baseline", rb, bv),
        **_arm_fields("speculative", rs, sv),
        identical=out.identical,
        first_divergence_char=out.first_divergence_char,
        **_acceptance_fields("", feature),
        **_acceptance_fields("plain_", plain),
        prefix_cache_hit_rate=hit.speculative,
        baseline_prefix_cache_hit_rate=hit.baseline,
        speculative_prefix_cache_hit_rate=hit.speculative,
        **_interval("speedup", sp),
        speedup_pairs=sp[3] or None,
        repeats=repeats,
        **(_interval("plain_speedup", plain_sp) if plain_sp else {}),
        **(_interval("speedup_vs_plain", rel) if rel else {}),
        baseline_stall_ratio=st.baseline_ratio,
        speculative_stall_ratio=st.speculative_ratio,
        turn=turn,
        prefix_caching=probe.prefix_caching,
        outcome=out.outcome,
        detail=out.detail,
        requests_sent=sum(len(log.ids.get(k, [])) for log in (b, s) for k in with_twin),
    )
    evidence: dict[str, Any] = {
        arm: {"request_ids": [i for k in with_twin for i in log.ids.get(k, [])], "counters": log.total(with_twin)}
        for arm, log in logs.items()
    }
    evidence["log_ratios"] = timing.log_ratios(per_b, per_s)  # [body, repeat, ln(b / s)]: ``speed``'s input
    return cell, evidence


def _interval(name: str, iv: timing.Interval) -> dict[str, Any]:
    return {name: iv[0], f"{name}_ci_low": iv[1], f"{name}_ci_high": iv[2]}


def _replies(per_repeat: list[list[Reply]], twins: list[Reply]) -> validity.ArmReplies:
    """Every repeat's replies in sending order, with the first twin."""
    return validity.ArmReplies([r for rep in per_repeat for r in rep], twins[0] if twins else None)


def _verdict(probe: Probe, per_repeat: list[list[Reply]], twins: list[Reply]) -> validity.Verdict:
    """The probe's check on each repeat: (None, "refused") when a request was refused; else the first
    invalid repeat's verdict, or the first repeat's (all valid or not assessed)."""
    verdicts = []
    for r, replies in enumerate(per_repeat):
        arm = validity.ArmReplies(replies, twins[r] if r < len(twins) else None)
        if classify.refusal(arm) is not None:
            return None, "refused"
        if classify.failure(arm) is not None:
            return None, "failed: no reply to judge"
        verdicts.append(probe.check(arm))
    bad = [(i, v) for i, v in enumerate(verdicts) if v[0] is False]
    if bad:
        i, (_, why) = bad[0]
        return False, why if len(per_repeat) == 1 else f"{why} (repeat {i + 1} of {len(per_repeat)})"
    return verdicts[0]


def _arm_fields(arm: str, replies: validity.ArmReplies, verdict: validity.Verdict) -> dict[str, Any]:
    """The cell's ``<arm>_*`` columns: what the arm's (first) feature reply was, and its output
    (digest and head; None when a feature request was refused)."""
    first, accepted = replies.first, all(r.accepted for r in replies.feature)
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


def untimed_cell(
    pair: Pair,
    run_id: str,
    results: Mapping[str, list],
    counters: Mapping[str, Any] | None,
    judged_by: str,
    **fields: Any,
) -> CompatCell:
    """A cell of a pass the matrix runs beside the probes (the sampling and lossless cells): many
    untimed requests per arm (``results``: per arm, (row, result) with the result's ``stream``), no
    single output, no twin, no speed. ``judged_by``: what judges the outputs (each arm's validity
    detail); ``fields``: the cell's own (feature, probe, outcome, detail, ...)."""
    ok = {arm: [res for _row, res in got if passed(res)] for arm, got in results.items()}
    return CompatCell(
        run_id=run_id,
        engine=pair.engine,
        engine_version=pair.engine_version,
        spec_method=pair.spec_method,
        baseline_accepted=bool(ok["baseline"]),
        speculative_accepted=bool(ok["speculative"]),
        baseline_http_status=first_status(results["baseline"]),
        speculative_http_status=first_status(results["speculative"]),
        baseline_error=None if ok["baseline"] else first_failure(results["baseline"]),
        speculative_error=None if ok["speculative"] else first_failure(results["speculative"]),
        baseline_valid=None,
        speculative_valid=None,
        baseline_validity_detail=judged_by,
        speculative_validity_detail=judged_by,
        first_divergence_char=None,
        baseline_output_sha256=None,
        speculative_output_sha256=None,
        baseline_completion_tokens=_token_count(ok["baseline"]),
        speculative_completion_tokens=_token_count(ok["speculative"]),
        baseline_e2e_ms=None,
        speculative_e2e_ms=None,
        draft_tokens=classify.counter(counters, "spec_num_draft_tokens"),
        accepted_tokens=classify.counter(counters, "spec_num_accepted_tokens"),
        drafts=classify.counter(counters, "spec_num_drafts"),
        plain_draft_tokens=None,
        plain_accepted_tokens=None,
        plain_drafts=None,
        prefix_cache_hit_rate=None,
        repeats=1,
        requests_sent=sum(len(got) for got in results.values()),
        **fields,
    )


def passed(res: Any) -> bool:
    """An untimed pass's request that succeeded."""
    return res.stream is not None and res.stream.success


def first_status(got: list) -> int | None:
    """The first HTTP status among an arm's (row, result) pairs."""
    return next(
        (res.stream.http_status for _row, res in got if res.stream is not None and res.stream.http_status), None
    )


def first_failure(got: list) -> str | None:
    """The first failed request's type and message among an arm's (row, result) pairs."""
    return next((failure_text(res) for _row, res in got if not passed(res)), None)


def failure_text(res: Any) -> str:
    s = res.stream
    if s is None:
        return "no reply"
    return f"{s.error_type or 'failed'}: {(s.error_message or '')[:200]}".rstrip(": ")


def _token_count(ok: list) -> int | None:
    return sum(len(res.token_ids or ()) for res in ok) if ok else None
