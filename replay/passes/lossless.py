"""The lossless pass: greedy requests that return, per generated
position, the token id and the top-2 logprobs, so a speculative output that
differs from the baseline's can be classified (``sql/intermediate/lossless/int_greedy_pairs.sql``).

Why a separate pass: asking vLLM for logprobs adds work per token (a
log-softmax over the vocabulary, a top-k, a larger stream), so the timed
requests never ask for them. Measured (``benchmarks/logprobs_overhead.py``,
SmolLM2 bfloat16 on this 2-core CPU, 12 greedy prompts x 64 tokens, one at a
time, 4 alternating pairs): logprobs made requests 4.3% slower on the baseline
server and 8.7% slower on the ngram speculative one, so a speedup measured
with them read 1.61 instead of 1.68. After a level's timed repeats the runner sends
the level's greedy rows once more per arm, at the same concurrency (same batch
shape), with ``logprobs: true, top_logprobs: 2`` and vLLM's
``return_tokens_as_token_ids`` (tokens come back as ``"token_id:123"``).
``ignore_eos`` keeps the fixed length, so the engine emits end-of-sequence
and carries on; the first such position is where the model would have
stopped (``natural_end_position``).

llama.cpp's llama-server (the engine's ``lossless_protocol`` "completion"): its
speculative path emits the accepted tokens without probabilities
(``server-context.cpp``: "TODO: set result.probs"), and its chat stream then leaves
them out of ``logprobs`` altogether (measured: 37 entries for 48 tokens), so the
pass uses its own endpoint: the row's messages through ``POST /apply-template``
(the server's chat template, as the timed requests get it), then ``POST
/completion`` with ``n_probs`` 2 and ``return_tokens``, not streamed. Its
``completion_probabilities`` has one entry per generated token, each with an
integer ``id`` (read before vLLM's ``"token_id:<n>"`` form); a speculated token's
entry has a logprob of 0 and no alternatives, so that arm's positions carry no
top-2 there. The classification needs none: it reads the baseline arm's margin
and runner-up at the first divergence (``int_greedy_pairs``), and the baseline,
which does not speculate, has both at every position. llama.cpp's
``ignore_eos`` is a logit bias against end-of-sequence, so the token emitted
where the model would have stopped is another one; the alternatives are the raw
logits', where end-of-sequence still ranks first (``natural_end_position``).

Failures are data, typed as in ``specdec.replay.http.client`` (``ERROR_TYPES``),
plus ``bad_logprobs`` when the stream succeeded but its logprobs are missing,
malformed or do not cover every generated token. Under speculation one stream
event may carry several tokens: ``logprobs.content`` is a list per event.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from specdec.http.urls import Endpoint, redact_text, request_headers
from specdec.replay.http.client import (
    ERROR_TYPES,
    ClientSettings,
    StreamResult,
    as_endpoint,
    build_payload,
    classify_failure,
    stream_payload,
)
from specdec.replay.load.closed_loop import closed_loop
from specdec.schemas.arrow import table_from_columns
from specdec.schemas.records import GreedyCheck, TrafficRow

#: ERROR_TYPES of the client, plus the lossless pass's own.
PASS_ERROR_TYPES: dict[str, str] = {
    **ERROR_TYPES,
    "bad_logprobs": "a complete stream whose logprobs are missing, malformed, or fewer or more than "
    "the generated tokens (is the server vLLM, with return_tokens_as_token_ids, or llama.cpp's llama-server?)",
}

TOP_LOGPROBS = 2
_TOKEN_ID_PREFIX = "token_id:"


def pass_payload(model: str, row: TrafficRow) -> dict:
    """The timed request's body, greedy, with token ids and top-2 logprobs."""
    return {
        **build_payload(model, row),
        "temperature": 0.0,
        "logprobs": True,
        "top_logprobs": TOP_LOGPROBS,
        "return_tokens_as_token_ids": True,  # vLLM extension: "token_id:<n>" instead of text
    }


@dataclass
class PassResult:
    """One lossless-pass request as the client saw it: the stream's outcome and,
    per generated position, the token id and the top-1 / top-2 logprobs."""

    stream: StreamResult | None = None  # set when the request has been sent
    token_ids: list[int] = field(default_factory=list)
    top1_logprobs: list[float] = field(default_factory=list)
    top2_logprobs: list[float | None] = field(default_factory=list)
    top2_token_ids: list[int | None] = field(default_factory=list)
    #: per position, the most likely token's id as the alternatives rank it (None: none returned)
    top1_token_ids: list[int | None] = field(default_factory=list)
    eos_token_ids: frozenset[int] | None = None
    problem: str | None = None  # first malformed logprobs entry, if any

    @property
    def natural_end_position(self) -> int | None:
        """Where end-of-sequence was emitted (vLLM's ignore_eos lets it through and carries on) or
        was the most likely token (llama.cpp's ignore_eos bans it by a logit bias, so another token
        is emitted there; its alternatives are the raw logits', where it still ranks first)."""
        ends = (natural_end_position(ids, self.eos_token_ids) for ids in (self.token_ids, self.top1_token_ids))
        return min((p for p in ends if p is not None), default=None)

    @property
    def sent(self) -> StreamResult:
        """``stream``, read where the request has been sent."""
        assert self.stream is not None, "the request has not been sent"
        return self.stream

    def collect(self, chunk: dict) -> None:
        """``stream_payload``'s on_chunk: append every position's logprobs."""
        if self.problem is not None:
            return
        try:
            for choice in chunk.get("choices") or ():
                logprobs = choice.get("logprobs")
                if logprobs is None:  # the role event, and the usage event, carry none
                    continue
                for entry in logprobs.get("content") or ():  # several entries per event under speculation
                    self._position(entry)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            self.problem = f"malformed logprobs at position {len(self.token_ids)} ({type(exc).__name__}: {exc})"

    def _position(self, entry: dict) -> None:
        top = sorted(((float(t["logprob"]), token_id(t)) for t in entry.get("top_logprobs") or ()), key=lambda t: -t[0])
        emitted = token_id(entry)
        # greedy: the emitted token is the most likely one; top_logprobs says so
        # independently (ties included), and is what the margin is computed from
        top1 = top[0][0] if top else float(entry["logprob"])
        second = top[1] if len(top) > 1 else (None, None)
        self.token_ids.append(emitted)
        self.top1_token_ids.append(top[0][1] if top else None)
        self.top1_logprobs.append(top1)
        self.top2_logprobs.append(second[0])
        self.top2_token_ids.append(second[1])

    def finish(self) -> PassResult:
        """A successful stream whose logprobs do not cover it exactly is a failure."""
        res = self.sent
        if not res.success:
            return self
        if self.problem is not None:
            res.fail("bad_logprobs", self.problem)
        elif not self.token_ids:
            res.fail(
                "bad_logprobs",
                "the stream carried no logprobs (does the server support logprobs / top_logprobs on chat completions?)",
            )
        elif len(self.token_ids) != res.output_tokens:
            res.fail(
                "bad_logprobs",
                f"logprobs for {len(self.token_ids)} position(s), but usage says "
                f"{res.output_tokens} completion token(s)",
            )
        return self


def token_id(entry: dict) -> int:
    """A logprobs entry's token id: llama.cpp's integer ``id``, else the id in vLLM's
    ``"token_id:<n>"`` form of ``token`` (return_tokens_as_token_ids)."""
    tid = entry.get("id")
    if isinstance(tid, int) and not isinstance(tid, bool) and tid >= 0:
        return tid
    token = entry["token"]
    if not isinstance(token, str) or not token.startswith(_TOKEN_ID_PREFIX):
        raise ValueError(f"token {str(token)[:40]!r} has no integer id and is not in the 'token_id:<n>' form")
    return int(token[len(_TOKEN_ID_PREFIX) :])


def natural_end_position(token_ids: Sequence[int | None], eos_token_ids: frozenset[int] | None) -> int | None:
    """First position (0-based) whose greedy token is end-of-sequence: where the
    model would have stopped without ignore_eos. None if it never was, or if
    the end-of-sequence ids are unknown (a None id, not returned, never ends it)."""
    if not eos_token_ids:
        return None
    return next((i for i, t in enumerate(token_ids) if t in eos_token_ids), None)


async def lossless_one(
    session,
    base_url: str | Endpoint,
    model: str,
    row: TrafficRow,
    request_id: str,
    settings: ClientSettings | None = None,
    eos_token_ids: frozenset[int] | None = None,
) -> PassResult:
    """One greedy request with logprobs; never raises (failures are rows)."""
    out = PassResult(eos_token_ids=eos_token_ids)
    out.stream = await stream_payload(
        session, base_url, pass_payload(model, row), request_id, settings, on_chunk=out.collect
    )
    return out.finish()


async def completion_one(
    session,
    base_url: str | Endpoint,
    model: str,
    row: TrafficRow,
    request_id: str,
    settings: ClientSettings | None = None,
    eos_token_ids: frozenset[int] | None = None,
) -> PassResult:
    """One greedy check on llama-server's own endpoint (module docstring): the row's messages
    through ``/apply-template``, then ``/completion`` with ``n_probs`` 2, not streamed; never
    raises (failures are rows, typed as the stream's). ``session``: an aiohttp session."""
    settings = settings or ClientSettings()
    ep = as_endpoint(base_url)
    out = PassResult(eos_token_ids=eos_token_ids)
    res = out.stream = StreamResult(request_id=request_id, wall_send_ns=time.time_ns())
    t0 = time.perf_counter_ns()
    headers = request_headers(settings, ep, request_id)
    wall_s = settings.wall_limit_s(row.max_tokens)
    deadline = None
    try:
        async with asyncio.timeout(wall_s) as deadline:
            template = await _post_json(
                session, ep, "/apply-template", {"messages": row.chat()}, headers, settings, res
            )
            prompt = template.get("prompt") if isinstance(template, dict) else None
            if res.error_type is None and not isinstance(prompt, str):
                res.fail("client_error", "POST /apply-template gave no prompt (is the server llama.cpp's?)")
            if res.error_type is None:
                body = {
                    "prompt": prompt,
                    "n_predict": row.max_tokens,
                    "temperature": 0.0,
                    "ignore_eos": True,
                    "n_probs": TOP_LOGPROBS,
                    "return_tokens": True,
                    "stream": False,
                }
                reply = await _post_json(session, ep, "/completion", body, headers, settings, res)
                if res.error_type is None:
                    _read_completion(out, reply)
    except Exception as exc:  # a row, not a crash
        if deadline is not None and deadline.expired():
            res.fail("request_wall_timeout", f"the check took longer than its wall limit of {wall_s:g} s")
        else:
            classify_failure(res, exc, settings)
    # as the stream's: no URL secret or key in what is written
    res.error_message = redact_text(res.error_message, ep.secrets + ((settings.api_key,) if settings.api_key else ()))
    if res.error_type is None:
        res.e2e_ms = (time.perf_counter_ns() - t0) / 1e6
        res.success = True
    return out.finish()


async def _post_json(session, ep: Endpoint, path: str, body: dict, headers, settings, res: StreamResult):
    """POST ``body``; the reply's JSON, or None with ``res`` failed (``http_status`` and its body)."""
    async with session.post(
        ep.url(path), params=ep.params or None, json=body, headers=headers, timeout=settings.timeout()
    ) as resp:
        res.http_status = resp.status
        text = await resp.text()
        if not 200 <= resp.status < 300:
            res.fail("http_status", f"HTTP {resp.status} from {path}: {text[:2000]}")
            return None
        try:
            return json.loads(text)
        except ValueError:
            res.fail("client_error", f"{path} answered with no JSON: {text[:200]!r}")
            return None


def _read_completion(out: PassResult, reply) -> None:
    """``/completion``'s reply into ``out``: the ids of ``tokens``, each position's alternatives."""
    res = out.sent
    try:
        tokens, probs = reply["tokens"], reply["completion_probabilities"]
        res.output_tokens = int(reply["tokens_predicted"])
        res.prompt_tokens = int(reply["tokens_evaluated"])
        res.output_text = str(reply.get("content") or "")
        if len(probs) != len(tokens):
            raise ValueError(f"{len(probs)} probability entries for {len(tokens)} tokens")
        for i, (tok, entry) in enumerate(zip(tokens, probs)):
            out._position(entry)
            if out.token_ids[-1] != tok:
                raise ValueError(f"position {i}: token {tok} but its probabilities name {out.token_ids[-1]}")
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        out.problem = f"malformed /completion reply at position {len(out.token_ids)} ({type(exc).__name__}: {exc})"


#: how each ``Engine.lossless_protocol`` sends one greedy check
PROTOCOLS = {"chat": lossless_one, "completion": completion_one}


async def lossless_pass(
    session,
    base_url: str | Endpoint,
    model: str,
    rows: list[TrafficRow],
    level: int,
    make_id,
    settings: ClientSettings | None = None,
    eos_token_ids: frozenset[int] | None = None,
    results: list | None = None,
    protocol: str = "chat",
) -> list[tuple[TrafficRow, PassResult]]:
    """Send every row greedily with logprobs, ``level`` requests in flight (the
    same closed loop as the timed requests); return (row, result) in finish
    order. Pass ``results`` to keep what finished if the pass is interrupted.
    ``protocol``: the engine's (``PROTOCOLS``; "completion" needs an aiohttp session)."""
    ep = as_endpoint(base_url)
    one = PROTOCOLS[protocol]

    async def send(i: int) -> tuple[TrafficRow, PassResult]:
        return rows[i], await one(session, ep, model, rows[i], make_id(i), settings, eos_token_ids)

    return await closed_loop(len(rows), level, send, results=results)


def greedy_table(
    run_id: str, arm: str, level: int, repeat: int, results: list[tuple[TrafficRow, PassResult]]
) -> pa.Table:
    """GreedyCheck rows of one lossless pass (one arm, level and repeat)."""
    cols: dict[str, list] = {f: [] for f in GreedyCheck.model_fields}
    for row, res in results:
        values = {
            "run_id": run_id,
            "arm": arm,
            "level": level,
            "repeat": repeat,
            "request_id": res.sent.request_id,
            "prompt_id": row.prompt_id,
            "category": row.category,
            "success": res.sent.success,
            "error_type": res.sent.error_type,
            "token_ids": res.token_ids,
            "top1_logprobs": res.top1_logprobs,
            "top2_logprobs": res.top2_logprobs,
            "top2_token_ids": res.top2_token_ids,
            "natural_end_position": res.natural_end_position,
            "eos_token_ids": None if res.eos_token_ids is None else sorted(res.eos_token_ids),
        }
        for f in cols:
            cols[f].append(values[f])
    return table_from_columns(GreedyCheck, cols)
