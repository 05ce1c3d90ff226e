"""The lossless cell of the matrix (issue 43, item 3): are speculation's greedy outputs the
baseline's, token for token, on either engine, and where they are not, is the first divergence a
near-tie that numerics can flip or something speculation did?

The feature probes compare greedy texts and ask for no logprobs (a logprob request changes the
request under test), so a divergence there is ``broken`` without a second look (``classify``,
rule 5). Here each arm sends ``PROMPTS`` greedily with the replay's lossless pass
(``replay/passes/lossless.py``): token ids and the top-2 log-probabilities of every position, by
the engine's own protocol: vLLM's chat stream with ``logprobs`` and token ids, llama-server's
``/completion`` with ``n_probs`` (its chat stream leaves speculated tokens out of ``logprobs``).
Each prompt's pair is classified as the replay's mart classifies it
(``sql/intermediate/lossless/int_greedy_pairs.sql``):

- ``identical``: the same token ids;
- ``near-tie``: at the first divergence the speculative arm took the baseline's runner-up and the
  baseline's top-1 minus top-2 margin is at most the dtype's near-tie threshold
  (``NEAR_TIE``: ``int_lossless_settings``' reasoned values; an unknown dtype, as an external
  server's or llama.cpp's quantized one, reads bfloat16's 0.25 nats);
- ``suspect``: anything else (another token, a wider margin, or one output a prefix of the other).

One cell per level, ``lossless_greedy.c<level>`` (feature ``lossless``):
- ``broken``: a suspect pair (the detail names the prompt, the position, both tokens and the margin);
- ``works``: no suspect pair and the speculative arm drafted during the cell (its counters moved);
- ``not tested``: nothing was drafted (or the server exports no speculation counter), or no pair
  of both arms had token ids (the detail says which);
- ``refused`` / ``not offered``: the speculative arm failed every request while the baseline
  answered / the baseline failed every request too.

The prompts ask for copies (prompt lookup drafts them, so the accepted path runs) and one open
answer. Both arms send at once: each server is its own, and no pair is timed.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from specdec.experiments.compat import sampling_cells
from specdec.experiments.compat.classify import counter
from specdec.experiments.compat.sampling_cells import Diff, Read  # the same counter reader and difference
from specdec.schemas.compat import CompatCell, Outcome
from specdec.schemas.records import TrafficRow

if TYPE_CHECKING:  # heavy (aiohttp): the pass is imported when a run sends it
    import aiohttp

    from specdec.experiments.compat.cells import Pair
    from specdec.http.urls import ClientSettings

FEATURE = "lossless"
NAME = "lossless_greedy"
PROMPTS = (
    "Repeat this Python code exactly, with nothing else:\n\n"
    "def mean(values):\n    total = 0\n    for v in values:\n        total += v\n    return total / len(values)\n",
    "Repeat this list exactly, with nothing else:\n\n"
    "1. red\n2. green\n3. blue\n4. yellow\n5. purple\n6. orange\n7. black\n8. white\n",
    "Copy this sentence twice: The quick brown fox jumps over the lazy dog.",
    "Name three uses of a paper clip.",
)
MAX_TOKENS = 48
#: One request at a time: the check is of the tokens, not of a batch (the replay's pass runs at
#: every level of a run).
LEVELS = (1,)
#: The reasoned near-tie margin per dtype [nats], ``int_lossless_settings``' ``dtype_threshold``
#: (its comment says why); any other dtype (unknown, auto, a quantized GGUF) reads bfloat16's.
NEAR_TIE = {"float32": 0.001, "float16": 0.03, "bfloat16": 0.25}
#: float32 rounding of the logprobs allowed over the threshold (as the mart: 1e-6 relative)
_ROUNDING = 1e-6

PairClass = Literal["identical", "near-tie", "suspect"]


def probe_name(level: int) -> str:
    return sampling_cells.probe_name(level, NAME)


def wanted(only: frozenset[str] | None, levels: tuple[int, ...]) -> tuple[int, ...]:
    """The levels to send (``lossless_greedy`` names every level): ``sampling_cells.wanted``'s rule."""
    return sampling_cells.wanted(only, levels, NAME)


def _rows() -> list[TrafficRow]:
    return [
        TrafficRow(prompt_id=f"g{i}", category="lossless", prompt=p, max_tokens=MAX_TOKENS, temperature=0.0)
        for i, p in enumerate(PROMPTS)
    ]


def near_tie_threshold(dtype: str | None) -> float:
    return NEAR_TIE.get(dtype or "unknown", NEAR_TIE["bfloat16"])


@dataclass(frozen=True)
class Classified:
    kind: PairClass
    position: int | None = None  # the first divergence (token index)
    baseline_token: int | None = None
    speculative_token: int | None = None
    margin: float | None = None  # the baseline's top-1 minus top-2 log-probability there [nats]


def classify_pair(baseline: Any, speculative: Any, threshold: float) -> Classified:
    """One prompt's pair (``PassResult``s) as ``int_greedy_pairs`` classifies it."""
    b, s = list(baseline.token_ids), list(speculative.token_ids)
    if b == s:
        return Classified("identical")
    pos = next((i for i, (x, y) in enumerate(zip(b, s)) if x != y), min(len(b), len(s)))
    if pos >= min(len(b), len(s)):  # one is a prefix of the other: nothing explains it
        return Classified("suspect", pos)
    runner_up = baseline.top2_token_ids[pos] if pos < len(baseline.top2_token_ids) else None
    top1 = baseline.top1_logprobs[pos] if pos < len(baseline.top1_logprobs) else None
    top2 = baseline.top2_logprobs[pos] if pos < len(baseline.top2_logprobs) else None
    margin = top1 - top2 if top1 is not None and top2 is not None else None
    near = (
        runner_up is not None
        and s[pos] == runner_up
        and margin is not None
        and math.isfinite(margin)
        and margin <= threshold * (1 + _ROUNDING)
    )
    return Classified("near-tie" if near else "suspect", pos, b[pos], s[pos], margin)


def answered(results: list) -> dict[str, Any]:
    """An arm's (row, result) pairs that succeeded, by prompt id."""
    return {row.prompt_id: res for row, res in results if res.sent.success}


def classify_arms(
    baseline: Mapping[str, Any], speculative: Mapping[str, Any], threshold: float
) -> dict[str, Classified]:
    """Each prompt answered by both arms (``answered``), classified (``classify_pair``), by prompt id."""
    return {p: classify_pair(baseline[p], speculative[p], threshold) for p in sorted(baseline) if p in speculative}


def first_suspect(pairs: Mapping[str, Classified], threshold: float) -> str | None:
    """'<prompt> at token <n>: <what>' of the first suspect pair, or None."""
    p, c = next(((p, c) for p, c in sorted(pairs.items()) if c.kind == "suspect"), (None, None))
    if c is None:
        return None
    margin = "no top-2 margin" if c.margin is None else f"baseline margin {c.margin:.3g} nats"
    what = (
        "one output is a prefix of the other"
        if c.baseline_token is None
        else f"token {c.speculative_token} for the baseline's {c.baseline_token}, {margin} (near-tie threshold {threshold:g})"
    )
    return f"{p} at token {c.position}: {what}"


async def lossless_cells(
    session: aiohttp.ClientSession,
    pair: Pair,
    model: str,
    settings: ClientSettings,
    run_id: str,
    prefix: str,
    read: Read,
    diff: Diff,
    levels: tuple[int, ...] = LEVELS,
) -> list[tuple[CompatCell, dict[str, Any]]]:
    """One cell per level with its evidence (per arm: request ids and counter differences), in
    ``levels`` order. ``read(arm)``: the arm's counters now (settled); ``diff``: their difference.
    ``prefix``: ``compat.<run>.<engine>`` (the probes' request-id scheme). The engine's protocol is
    ``pair.lossless_protocol``; None (an external pair): vLLM's chat stream, and llama-server's
    ``/completion`` where the baseline's stream carried no usable logprobs."""
    from specdec.replay.passes.lossless import lossless_pass

    rows = _rows()
    eps = {"baseline": pair.baseline, "speculative": pair.speculative}
    protocol = pair.lossless_protocol

    async def one_arm(arm: str, level: int, tag: str, how: str) -> tuple[list, dict[str, Any]]:
        before = await read(arm)
        got = await lossless_pass(session, eps[arm], model, rows, level, lambda i: f"{tag}.{i}", settings, protocol=how)
        return got, {
            "request_ids": [res.sent.request_id for _row, res in got],
            "counters": diff(before, await read(arm)),
        }

    out = []
    for level in levels:
        name = probe_name(level)
        tag = {arm: f"{prefix}.{name}.{arm}" for arm in eps}
        if protocol is None:  # an external pair: find the protocol on the baseline, then send both
            protocol = await _protocol_of(session, pair, model, rows[0], settings, f"{tag['baseline']}.probe")
        done = await asyncio.gather(*(one_arm(arm, level, tag[arm], protocol) for arm in eps))
        results = {arm: got for arm, (got, _ev) in zip(eps, done)}
        evidence = {arm: ev for arm, (_got, ev) in zip(eps, done)}
        cell = _cell(pair, run_id, name, level, results, evidence["speculative"]["counters"], protocol)
        out.append((cell, evidence))
    return out


async def _protocol_of(session, pair: Pair, model: str, row: TrafficRow, settings, request_id: str) -> str:
    """'chat' when the baseline's chat stream carries token ids and logprobs for every token; else
    'completion' when its ``/completion`` does (llama-server); else 'chat' (its failure is the cell's)."""
    from specdec.replay.passes.lossless import completion_one, lossless_one

    chat = await lossless_one(session, pair.baseline, model, row, f"{request_id}.chat", settings)
    if chat.sent.success or chat.sent.error_type != "bad_logprobs":
        return "chat"
    native = await completion_one(session, pair.baseline, model, row, f"{request_id}.completion", settings)
    return "completion" if native.sent.success else "chat"


def _cell(
    pair: Pair,
    run_id: str,
    name: str,
    level: int,
    results: Mapping[str, list],
    counters: Mapping[str, Any] | None,
    protocol: str,
) -> CompatCell:
    from specdec.experiments.compat.cells import first_failure, untimed_cell

    ok = {arm: answered(got) for arm, got in results.items()}
    threshold = near_tie_threshold(pair.dtype)
    pairs = classify_arms(ok["baseline"], ok["speculative"], threshold)
    kinds = [c.kind for c in pairs.values()]
    outcome: Outcome
    if not ok["baseline"]:
        failed = first_failure(results["baseline"])
        outcome, detail = "not offered", f"the baseline failed every greedy check with token ids: {failed}"
    elif not ok["speculative"]:
        failed = first_failure(results["speculative"])
        outcome, detail = "refused", f"the speculative server failed every greedy check the baseline answered: {failed}"
    else:
        drafted = counter(counters, "spec_num_draft_tokens")
        outcome, detail = _judge(
            pairs, drafted, counter(counters, "spec_num_accepted_tokens"), threshold, protocol, level
        )
    return untimed_cell(
        pair,
        run_id,
        results,
        counters,
        "greedy: judged by the token ids",
        feature=FEATURE,
        probe=name,
        output_constraint=(
            f"greedy token ids equal to the baseline's at {level} request(s) in flight, or a first divergence that "
            f"took the baseline's runner-up within {threshold:g} nats (a near-tie)"
        ),
        identity_expected=True,
        identical=(all(k == "identical" for k in kinds) if kinds else None),
        lossless_identical=kinds.count("identical") if kinds else None,
        lossless_near_ties=kinds.count("near-tie") if kinds else None,
        lossless_suspect=kinds.count("suspect") if kinds else None,
        outcome=outcome,
        detail=detail,
    )


def _judge(
    pairs: Mapping[str, Classified],
    drafted: int | None,
    accepted: int | None,
    threshold: float,
    protocol: str,
    level: int,
) -> tuple[Outcome, str]:
    n = len(pairs)
    how = "llama-server's /completion with n_probs" if protocol == "completion" else "the chat stream with logprobs"
    if not n:
        return "not tested", "no prompt was answered by both arms: no pair to compare"
    suspect = {p: c for p, c in pairs.items() if c.kind == "suspect"}
    near = sum(c.kind == "near-tie" for c in pairs.values())
    same = n - len(suspect) - near
    counts = (
        f"{same} of {n} greedy pairs identical, {near} near-tie(s), {len(suspect)} suspect ({how}, {level} in flight)"
    )
    if suspect:
        return "broken", f"speculation changed a greedy output: {counts}; first: {first_suspect(pairs, threshold)}"
    if not drafted:
        why = "the server exports no speculation counter" if drafted is None else "nothing was drafted"
        return "not tested", f"{counts}, but {why} during the checks: speculation's own tokens were not checked"
    if not accepted:
        why = (
            "the server exports no acceptance counter"
            if accepted is None
            else f"none of the {drafted} drafted tokens was accepted"
        )
        return "not tested", f"{counts}, but {why}: no token of speculation's own was checked"
    return "works", f"{counts}; {drafted} tokens drafted, {accepted} accepted"


async def greedy_pairs(
    session: aiohttp.ClientSession,
    baseline: Any,
    speculative: Any,
    model: str,
    settings: ClientSettings,
    prefix: str,
    protocol: str,
    threshold: float,
) -> dict[str, Classified] | str:
    """The lossless check on one pair of endpoints (both at once, one request at a time each): per
    prompt answered by both arms its class, or why there is none (an arm failed every check)."""
    from specdec.experiments.compat.cells import first_failure
    from specdec.replay.passes.lossless import lossless_pass

    rows = _rows()
    got = await asyncio.gather(
        *(
            lossless_pass(
                session, ep, model, rows, 1, lambda i, a=arm: f"{prefix}.{a}.{i}", settings, protocol=protocol
            )
            for arm, ep in (("baseline", baseline), ("speculative", speculative))
        )
    )
    ok = [answered(results) for results in got]
    for arm, some, results in zip(("baseline", "speculative"), ok, got):
        if not some:
            return f"the {arm} arm failed every greedy check: {first_failure(results)}"
    return classify_arms(ok[0], ok[1], threshold)


def with_lossless(cell: CompatCell, pairs: Mapping[str, Classified] | str, threshold: float) -> CompatCell:
    """A timed cell with the lossless check of its own pair of servers beside it (the quantization
    cells): the counts, and ``broken`` where a pair is suspect; a check that could not run is said in
    the detail and changes nothing else."""
    if isinstance(pairs, str):
        return cell.model_copy(update={"detail": f"{cell.detail}; lossless not checked: {pairs}"})
    kinds = [c.kind for c in pairs.values()]
    counts = f"lossless: {kinds.count('identical')} of {len(kinds)} greedy pairs identical, {kinds.count('near-tie')} near-tie(s)"
    update: dict[str, Any] = {
        "lossless_identical": kinds.count("identical"),
        "lossless_near_ties": kinds.count("near-tie"),
        "lossless_suspect": kinds.count("suspect"),
        "detail": f"{cell.detail}; {counts}",
    }
    first = first_suspect(pairs, threshold)
    if first is not None and cell.outcome in ("works", "degrades", "not tested"):
        update |= {
            "outcome": "broken",
            "detail": f"speculation changed a greedy output ({kinds.count('suspect')} suspect of {len(kinds)}; "
            f"first: {first}); {cell.detail}",
        }
    return cell.model_copy(update=update)
