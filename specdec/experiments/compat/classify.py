"""One cell's outcome from its evidence: what each arm answered, whether each
output obeys the feature's constraint, whether the arms agree, and the
speculative arm's acceptance with and without the feature.

Rules, first match wins (``classify``):

1. the baseline refused the feature: ``not offered`` (the engine's own reply
   says so; nothing about speculation can be learnt);
2. a reply of either arm failed without the server saying no (malformed,
   overlong, timed out, cut off: ``replies.FAULTS``): ``broken``, with its
   type and reason; the speculative arm refused what the baseline accepted:
   ``refused``, with the server's error text (escaped);
3. neither arm's output obeys the constraint: ``not offered`` (the engine
   accepted the field and ignored it, or could not meet it within the
   probe's max_tokens, with or without speculation);
4. one arm's output does not: ``broken``;
5. a greedy probe whose outputs differ between the arms: ``broken`` (under
   float32 speculation changes no greedy token; a divergence is not told
   from a near-tie here: the probes ask for no logprobs). Where the
   speculative arm proposed no draft token for the cell's requests the
   detail says the divergence is not speculation's own;
6. the speculative counters were not read (the server exports none, or a
   read failed): ``not tested`` (nothing shows that speculation ran);
7. the speculative arm proposed no draft token with the feature while it
   did on the plain twin: ``degrades: no draft`` (the feature stops
   speculation); no draft token with the feature nor on the twin (or the
   twin's counters unread): ``not tested`` (the probe could not make the
   engine draft: the gain is not tested here). Rules 6 and 7 are ``no_draft``,
   which the quantization cells share (``quant.classify_quant``);
8. its acceptance per token fell below ``DEGRADE_RATIO`` of the twin's:
   ``degrades`` (by how much, in the detail);
9. the paired speedup with the feature over the plain twin's
   (``timing.relative``) has a 95% interval wholly below
   1 / (1 + ``DEGRADE_SPEED_MARGIN``): ``degrades`` (by how much: 1 - the
   ratio). The margin keeps timer noise on fast requests and the many
   cells of a run (pointwise intervals) from calling a cell degraded for a
   loss too small to matter. Only a ``works`` cell is read so: a
   ``not tested`` cell stays so, its speed in the detail;
10. else ``works``: valid, lossless, and the speculative arm drafted in the
    cell (its counters moved). A cell where nothing was drafted is never
    ``works``.

After the pair's servers have stopped and their capture is flushed,
``with_capture`` turns a ``works``, ``degrades`` or ``not tested`` cell whose
captured rows reconcile with the engine's counters in one arm and not in the
other into ``broken`` (the speculative path miscounts, or the capture does;
either way the cell's evidence disagrees with itself). Where no capture is active the
flags stay None and the outcome is unchanged: never a pass for rows that
were not there.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specdec.experiments.compat import timing
from specdec.experiments.compat.validity import ArmReplies, Verdict
from specdec.schemas.compat import DEGRADE_RATIO, DEGRADE_SPEED_MARGIN, CompatCell, Outcome

#: Characters of an error body quoted in a cell's detail (the full body is in its own column).
DETAIL_ERROR_CHARS = 300


@dataclass(frozen=True)
class Acceptance:
    """Speculation counter differences around some requests of the speculative arm;
    None when the server exports no such counter."""

    draft_tokens: int | None = None
    accepted_tokens: int | None = None
    drafts: int | None = None

    @property
    def rate(self) -> float | None:
        """Accepted / proposed draft tokens; None when nothing was proposed or not measured."""
        if not self.draft_tokens or self.accepted_tokens is None:
            return None
        return self.accepted_tokens / self.draft_tokens

    @classmethod
    def of(cls, diff: dict[str, Any] | None) -> Acceptance:
        """From the speculative arm's counter differences (``probing``'s reads; None: unread)."""
        return cls(
            counter(diff, "spec_num_draft_tokens"),
            counter(diff, "spec_num_accepted_tokens"),
            counter(diff, "spec_num_drafts"),
        )


def counter(diff: Mapping[str, Any] | None, key: str) -> int | None:
    """One counter's difference as a count; None when the counters were not read or lack ``key``."""
    value = None if diff is None else diff.get(key)
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
        return None  # not read, or no count (NaN, infinite, negative): not measured
    return int(round(value))


@dataclass(frozen=True)
class Evidence:
    identity_expected: bool
    baseline: ArmReplies
    speculative: ArmReplies
    baseline_verdict: Verdict
    speculative_verdict: Verdict
    feature: Acceptance
    plain: Acceptance
    speedup: timing.Interval | None = None  # the feature requests' paired speedup
    plain_speedup: timing.Interval | None = None  # the plain twin's
    relative: timing.Interval | None = None  # speedup / plain_speedup, per repeat (timing.relative)


@dataclass(frozen=True)
class Classified:
    outcome: Outcome
    detail: str
    identical: bool | None
    first_divergence_char: int | None


def escape(text: str, limit: int = DETAIL_ERROR_CHARS) -> str:
    """An error body on one line: control characters and non-ASCII escaped as in JSON, cut at ``limit``."""
    out = json.dumps(text, ensure_ascii=True)[1:-1]
    return out if len(out) <= limit else out[:limit] + "..."


def refusal(replies: ArmReplies) -> str | None:
    """The first refused feature request's status and error, or None when none was refused (a
    failure the server did not choose is no refusal: ``failure``)."""
    for r in replies.feature:
        if not r.accepted and not r.fault:
            status = f"HTTP {r.status}" if r.status is not None else "no reply"
            return f"{status}: {escape(r.error or '')}"
    return None


def failure(replies: ArmReplies) -> str | None:
    """The first feature request that failed without the server saying no (``replies.FAULTS``: a
    malformed or overlong reply, a timeout, a broken connection): its type and why; else None."""
    for r in replies.feature:
        if r.fault:
            status = f"HTTP {r.status}, " if r.status is not None else ""
            return f"{status}{r.error_type}: {escape(r.error or '')}"
    return None


def output(replies: ArmReplies) -> str:
    """The arm's whole output (every feature reply, normalized, in order)."""
    return "\n".join(r.normalized() for r in replies.feature)


def divergence(a: str, b: str) -> int | None:
    """First index at which the texts differ; None when equal."""
    if a == b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def classify(ev: Evidence) -> Classified:
    """The cell's outcome and why (module docstring)."""
    b_refused, s_refused = refusal(ev.baseline), refusal(ev.speculative)
    if b_refused is not None:
        also = "the speculative arm accepted it" if s_refused is None else "the speculative arm refused it too"
        return Classified("not offered", f"the baseline refused it ({b_refused}); {also}", None, None)
    for arm, replies in (("speculative", ev.speculative), ("baseline", ev.baseline)):
        failed = failure(replies)
        if failed is not None:
            return Classified("broken", f"the {arm} arm's reply failed ({failed})", None, None)
    if s_refused is not None:
        return Classified(
            "refused", f"the speculative server refused what the baseline accepted: {s_refused}", None, None
        )
    a, b = output(ev.baseline), output(ev.speculative)
    identical = a == b if ev.identity_expected else None
    first = divergence(a, b) if ev.identity_expected else None
    (bv, bd), (sv, sd) = ev.baseline_verdict, ev.speculative_verdict
    if bv is False and sv is False:
        return Classified(
            "not offered", f"no valid output in either arm: baseline {bd}; speculative {sd}", identical, first
        )
    if sv is False:
        return Classified("broken", f"invalid with speculation only: {sd} (baseline: {bd})", identical, first)
    if bv is False:
        return Classified("broken", f"invalid in the baseline only: {bd} (speculative: {sd})", identical, first)
    if identical is False:
        # no draft token around the cell's requests: speculation cannot have changed a token, so the
        # divergence is the engine's own (e.g. a prompt cache reused in one arm); still a broken cell
        idle = (
            "; the speculative arm proposed no draft token for these requests: the divergence is not "
            "speculation's own (engine nondeterminism, e.g. a reused prompt cache)"
            if ev.feature.draft_tokens == 0
            else ""
        )
        return Classified(
            "broken",
            f"greedy outputs differ between the arms at character {first} (valid in both: {sd}){idle}",
            identical,
            first,
        )
    return _by_speed(ev, _by_acceptance(ev, sd, identical, first))


def _by_speed(ev: Evidence, out: Classified) -> Classified:
    """Rule 9 (read on ``works`` cells only), and every valid cell's speedup put first in its detail
    (a terminal line cuts the rest)."""
    speed = timing.text(ev.speedup) if ev.speedup is not None else ""
    rel = ev.relative
    bound = 1.0 / (1.0 + DEGRADE_SPEED_MARGIN)
    if out.outcome == "works" and rel is not None and rel[0] is not None and rel[2] is not None and rel[2] < bound:
        plain = timing.text(ev.plain_speedup) if ev.plain_speedup is not None else "?"
        return Classified(
            "degrades",
            f"the speedup falls with the feature by {1 - rel[0]:.0%}: {speed} against {plain} on the plain twin "
            f"(ratio x{rel[0]:.2f} [{rel[1]:.2f}, {rel[2]:.2f}], wholly below {bound:.2f}); {out.detail}",
            out.identical,
            out.first_divergence_char,
        )
    if not speed:
        return out
    return Classified(out.outcome, f"speedup {speed}; {out.detail}", out.identical, out.first_divergence_char)


def with_capture(cell: CompatCell, baseline: bool | None, speculative: bool | None, detail: str | None) -> CompatCell:
    """The cell with its capture reconciliation (module docstring): ``broken`` when a valid cell's
    captured rows reconcile in one arm and not in the other; the flags None: not captured."""
    update: dict[str, object] = {
        "baseline_capture_reconciles": baseline,
        "speculative_capture_reconciles": speculative,
        "capture_detail": detail,
    }
    one_arm = {baseline, speculative} == {True, False}
    if cell.outcome in ("works", "degrades", "not tested") and one_arm:
        arm = "speculative" if speculative is False else "baseline"
        update["outcome"] = "broken"
        update["detail"] = (
            f"the captured rows do not reconcile with the engine's counters in the {arm} arm only ({detail}); "
            f"was {cell.outcome}: {cell.detail}"
        )
    return cell.model_copy(update=update)


def no_draft(acc: Acceptance, ref: Acceptance | None, ref_name: str, subject: str = "") -> tuple[Outcome, str] | None:
    """Rules 6 and 7, shared with the quantization cells (``quant.classify_quant``): (outcome, why)
    when ``acc`` shows no draft token, or its counters were not read; None when it drafted.
    ``ref``: the reference's acceptance (the plain twin; the shipped target), None where there is
    none; ``ref_name`` names it, ``subject`` says what ``acc`` covers (" with the feature")."""
    if acc.draft_tokens is None:
        return "not tested", (
            "the speculation counters were not read (the server exports none, or a read failed): "
            "nothing shows that speculation ran"
        )
    if acc.draft_tokens:
        return None
    if ref is not None and ref.draft_tokens:
        return "degrades", f"speculation proposed no draft token{subject} ({ref.draft_tokens} on {ref_name})"
    if ref is None:
        where = ""
    elif ref.draft_tokens == 0:
        where = f" nor on {ref_name}"
    else:
        where = f" ({ref_name}'s counters not read)"
    return "not tested", (
        f"speculation proposed no draft token{subject}{where}: the probe could not make the engine draft "
        "on its prompts (the gain is not tested here)"
    )


def _by_acceptance(ev: Evidence, valid: str, identical: bool | None, first: int | None) -> Classified:
    f, p = ev.feature, ev.plain
    same = "identical in both arms" if identical else "sampled, not compared between arms"
    idle = no_draft(f, p, "the plain twin", " with the feature")
    if idle is not None:
        return Classified(idle[0], f"{valid}; {same}; {idle[1]}", identical, first)
    rf, rp = f.rate, p.rate
    if rf is not None and rp and rf < DEGRADE_RATIO * rp:
        return Classified(
            "degrades",
            f"{valid}; {same}; acceptance per token {rf:.2f} with the feature against {rp:.2f} without "
            f"(x{rf / rp:.2f})",
            identical,
            first,
        )
    plain = f" (plain twin {rp:.2f})" if rp is not None else ""
    rate = f"{rf:.2f}" if rf is not None else f"not measured ({f.draft_tokens} draft tokens proposed)"
    return Classified("works", f"{valid}; {same}; acceptance per token {rate}{plain}", identical, first)
