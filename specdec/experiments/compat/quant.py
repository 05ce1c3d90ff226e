"""The quantization cells of ``specdec compat`` (issue 22): one cell per
(target bit width, speculative configuration) on llama.cpp, measured against
the same target without speculation.

A cell sends ``QUANT_PROMPTS`` to both servers, ``--repeats`` times (2 by default, as every probe), one
request at a time, the order of the two arms alternating from pair to pair
(counterbalanced), each request greedy at a forced length
(``QUANT_MAX_TOKENS``, ``ignore_eos``) so both arms emit the same number of
tokens. One warm-up request per server goes first and is not counted. It
records:

- acceptance from the speculative server's counters around the measured
  requests: per token (accepted / drafted) and per round (the mean
  acceptance length, 1 + accepted / verify rounds, as ``sql/macros.sql``);
- the paired speedup: the geometric mean over the pairs of baseline e2e /
  speculative e2e, with a 95% Student t interval over the pairs' log ratios
  (``speedup``). The pairs share two server processes, so the interval covers
  request-to-request noise only;
- greedy identity: every prompt's text, both arms.

Outcome (``classify_quant``, first match wins): the target without
speculation did not serve: ``not offered``; the speculative server did not
start or refused: ``refused`` (its error, escaped); the greedy texts differ:
``broken``; the speculative counters not read: ``not tested``; no draft
token while the reference proposed some: ``degrades: no draft``; no draft
token and no reference that drafted (the shipped target's own cells, or a
reference that drafted nothing either): ``not tested`` (the prompts could not
make this configuration draft); acceptance per token below
``DEGRADE_RATIO`` of the reference's: ``degrades``; else ``works`` (the
speculative server drafted: a cell where nothing was drafted is never
``works``). The reference of a cell is the same speculative configuration on
the shipped 4-bit target (``plain_*`` columns); a ``works`` cell may still be
slower than no speculation (a draft as large as its target costs a whole
forward pass per token): the speedup says so.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from specdec.engines import LlamaCpp
from specdec.experiments.compat import classify
from specdec.experiments.compat.cells import SETTLE_S
from specdec.experiments.compat.probing import settled
from specdec.experiments.compat.send import Reply, send
from specdec.experiments.compat.timing import DEFAULT_REPEATS, speedup
from specdec.experiments.compat.validity import ArmReplies
from specdec.http.urls import ClientSettings, Endpoint
from specdec.schemas.compat import OUTPUT_HEAD_CHARS, CompatCell, Outcome

QUANT_FEATURE = "quantization"
#: Prompts with text to copy or continue, so that both a draft model and prompt lookup have something to propose.
QUANT_PROMPTS = (
    "Repeat this list exactly, one item per line: apple, banana, cherry, date, elderberry, fig, grape, honeydew.",
    "Rewrite this function with the argument renamed from x to values:\n"
    "def f(x):\n    total = 0\n    for n in x:\n        total += n * n\n    return total",
    "Count from 1 to 40, separated by commas.",
)
#: Not fewer: at 32 forced tokens ngram-mod proposed no draft token in any target's cell (2026-12-03; 56 drafted
#: and accepted per cell at 48), so the cells would lose their acceptance.
QUANT_MAX_TOKENS = 48
CONSTRAINT = f"none: greedy text at a forced length of {QUANT_MAX_TOKENS} tokens, compared between the arms"


@dataclass(frozen=True)
class QuantArm:
    """One speculative configuration: a draft model at some bit width, or draft-free prompt lookup."""

    method: str  # 'draft-simple' or 'ngram-mod'
    draft_quant: str | None = None
    draft_bits: int | None = None

    @property
    def label(self) -> str:
        return f"draft-{self.draft_quant.lower()}" if self.draft_quant else self.method


def probe_name(target_quant: str, arm: QuantArm) -> str:
    """The cell's probe name, e.g. ``target-q8_0.draft-q4_1``."""
    return f"target-{target_quant.lower()}.{arm.label}"


def bodies(model: str) -> list[dict[str, Any]]:
    """The request bodies of one repeat, one per prompt."""
    return [
        {
            "model": model,
            "messages": [{"role": "user", "content": p}],
            "max_tokens": QUANT_MAX_TOKENS,
            "temperature": 0,
            "ignore_eos": True,
        }
        for p in QUANT_PROMPTS
    ]


@dataclass
class QuantMeasure:
    """One cell's replies (measured requests, in prompt-major order per repeat) and counters."""

    baseline: list[Reply]
    speculative: list[Reply]
    counters: dict[str, Any] | None  # speculative counters' differences around the measured requests
    requests: int  # sent, warm-ups included


def failed(error: str) -> list[Reply]:
    """An arm whose server never answered: one reply that carries why."""
    return [Reply(None, error)]


async def measure(
    session: aiohttp.ClientSession,
    baseline: Endpoint,
    speculative: Endpoint | None,
    settings: ClientSettings,
    model: str,
    prefix: str,
    counters: Mapping[str, str] | None,
    settle_s: float = SETTLE_S,
    repeats: int = DEFAULT_REPEATS,
) -> QuantMeasure:
    """Warm both servers up, then send the pairs (module docstring). ``speculative`` None (its
    server did not start): the baseline's requests only, the evidence that the target served."""
    seq = itertools.count()
    arms = [(baseline, "baseline")] + ([(speculative, "speculative")] if speculative is not None else [])
    for ep, arm in arms:
        await send(session, ep, bodies(model)[0], settings, f"{prefix}.{arm}.warmup")
    sent = len(arms)
    c0 = None if speculative is None else await settled(session, speculative, settings, counters, settle_s)
    out: dict[str, list[Reply]] = {"baseline": [], "speculative": []}
    for r in range(repeats):
        for i, body in enumerate(bodies(model)):
            for ep, arm in arms if (r + i) % 2 == 0 else arms[::-1]:
                out[arm].append(await send(session, ep, body, settings, f"{prefix}.{arm}.{next(seq)}"))
                sent += 1
    c1 = None if speculative is None else await settled(session, speculative, settings, counters, settle_s)
    diff = None
    if c0 is not None and c1 is not None:
        diff = {k: (None if v is None or c0.get(k) is None else v - c0[k]) for k, v in c1.items()}
    return QuantMeasure(out["baseline"], out["speculative"], diff, sent)


def acceptance(m: QuantMeasure) -> classify.Acceptance:
    return classify.Acceptance.of(m.counters)


def classify_quant(
    base: ArmReplies, spec: ArmReplies, acc: classify.Acceptance, ref: classify.Acceptance | None
) -> tuple[Outcome, str, bool | None, int | None]:
    """(outcome, detail, identical, first divergence) of one quantization cell (module docstring)."""
    b_err, s_err = classify.refusal(base), classify.refusal(spec)
    if b_err is not None:
        return "not offered", f"the target without speculation did not serve ({b_err})", None, None
    for arm, replies in (("speculative", spec), ("baseline", base)):
        failed = classify.failure(replies)
        if failed is not None:
            return "broken", f"the {arm} server's reply failed ({failed})", None, None
    if s_err is not None:
        return "refused", f"the speculative server did not serve what the baseline did: {s_err}", None, None
    a, b = classify.output(base), classify.output(spec)
    first = classify.divergence(a, b)
    if first is not None:
        return "broken", f"greedy outputs differ between the arms at character {first}", False, first
    per_token, ref_rate = acc.rate, ref.rate if ref is not None else None
    idle = classify.no_draft(acc, ref, "the shipped target")
    if idle is not None:
        return idle[0], f"identical greedy text in both arms; {idle[1]}", True, None
    if per_token is not None and ref_rate and per_token < classify.DEGRADE_RATIO * ref_rate:
        return (
            "degrades",
            f"acceptance per token {per_token:.2f} against {ref_rate:.2f} on the shipped target "
            f"(x{per_token / ref_rate:.2f})",
            True,
            None,
        )
    return "works", "identical greedy text in both arms", True, None


def _rates(acc: classify.Acceptance) -> str:
    if acc.draft_tokens is None:
        return "acceptance not measured (no counters)"
    if not acc.draft_tokens or acc.accepted_tokens is None:
        return "no draft token proposed"
    # per round: mean acceptance length, 1 + accepted / rounds (sql/macros.sql, the bonus token included)
    per_round = (
        f", mean acceptance length {1 + acc.accepted_tokens / acc.drafts:.2f} over {acc.drafts} rounds"
        if acc.drafts
        else ""
    )
    return f"acceptance per token {acc.rate:.2f} ({acc.accepted_tokens}/{acc.draft_tokens}){per_round}"


def quant_cell(
    run_id: str,
    engine_version: str | None,
    target: tuple[str, int],
    arm: QuantArm,
    m: QuantMeasure,
    ref: classify.Acceptance | None,
) -> CompatCell:
    """One quantization cell from its measurement; ``ref``: the same arm's acceptance on the shipped target."""
    base, spec = ArmReplies(m.baseline, None), ArmReplies(m.speculative, None)
    acc = acceptance(m)
    outcome, why, identical, first = classify_quant(base, spec, acc, ref)
    sp, lo, hi, pairs = speedup(m.baseline, m.speculative)
    timing = ""
    if sp is not None:
        interval = f" [{lo:.2f}, {hi:.2f}]" if lo is not None and hi is not None else ""
        timing = f"speedup x{sp:.2f}{interval} over {pairs} pairs; "
    # the figures first: a terminal line cuts the detail short
    detail = why if outcome in ("not offered", "refused") else f"{timing}{_rates(acc)}; {why}"
    b, s = base.first, spec.first
    ok_b, ok_s = all(r.accepted for r in m.baseline), all(r.accepted for r in m.speculative)
    out_b, out_s = classify.output(base), classify.output(spec)
    ref = ref or classify.Acceptance()
    return CompatCell(
        run_id=run_id,
        engine=LlamaCpp.name,  # the quantization cells are llama.cpp's (llama-quantize)
        engine_version=engine_version,
        spec_method=arm.method,
        feature=QUANT_FEATURE,
        probe=probe_name(target[0], arm),
        output_constraint=CONSTRAINT,
        identity_expected=True,
        baseline_accepted=ok_b,
        speculative_accepted=ok_s,
        baseline_http_status=b.status,
        speculative_http_status=s.status,
        baseline_error=next((r.error for r in m.baseline if r.error is not None), None),
        speculative_error=next((r.error for r in m.speculative if r.error is not None), None),
        baseline_valid=None,
        speculative_valid=None,
        baseline_validity_detail="no output constraint",
        speculative_validity_detail="no output constraint",
        identical=identical,
        first_divergence_char=first,
        baseline_output_sha256=_sha(out_b) if ok_b else None,
        speculative_output_sha256=_sha(out_s) if ok_s else None,
        baseline_output_head=out_b[:OUTPUT_HEAD_CHARS] if ok_b else None,
        speculative_output_head=out_s[:OUTPUT_HEAD_CHARS] if ok_s else None,
        baseline_completion_tokens=b.completion_tokens,
        speculative_completion_tokens=s.completion_tokens,
        baseline_e2e_ms=b.e2e_ms,
        speculative_e2e_ms=s.e2e_ms,
        draft_tokens=acc.draft_tokens,
        accepted_tokens=acc.accepted_tokens,
        drafts=acc.drafts,
        plain_draft_tokens=ref.draft_tokens,
        plain_accepted_tokens=ref.accepted_tokens,
        plain_drafts=ref.drafts,
        prefix_cache_hit_rate=None,
        target_quant=target[0],
        target_bits=target[1],
        draft_quant=arm.draft_quant,
        draft_bits=arm.draft_bits,
        speedup=sp,
        speedup_ci_low=lo,
        speedup_ci_high=hi,
        speedup_pairs=pairs or None,
        outcome=outcome,
        detail=detail,
        requests_sent=m.requests,
    )


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
