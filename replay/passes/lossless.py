"""The lossless pass: greedy requests that return, per generated
position, the token id and the top-2 logprobs, so a speculative output that
differs from the baseline's can be classified (``sql/intermediate/int_greedy_pairs.sql``).

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

Failures are data, typed as in ``specdec.replay.http.client`` (``ERROR_TYPES``),
plus ``bad_logprobs`` when the stream succeeded but its logprobs are missing,
malformed or do not cover every generated token. Under speculation one stream
event may carry several tokens: ``logprobs.content`` is a list per event.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from specdec.engines.urls import Endpoint
from specdec.replay.http.client import (
    ERROR_TYPES,
    ClientSettings,
    StreamResult,
    as_endpoint,
    build_payload,
    stream_payload,
)
from specdec.replay.load.closed_loop import closed_loop
from specdec.schemas.arrow import table_from_columns
from specdec.schemas.records import GreedyCheck, TrafficRow

#: ERROR_TYPES of the client, plus the lossless pass's own.
PASS_ERROR_TYPES: dict[str, str] = {
    **ERROR_TYPES,
    "bad_logprobs": "a complete stream whose logprobs are missing, malformed, or fewer or more than "
    "the generated tokens (is the server vLLM with return_tokens_as_token_ids?)",
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
    eos_token_ids: frozenset[int] | None = None
    problem: str | None = None  # first malformed logprobs entry, if any

    @property
    def natural_end_position(self) -> int | None:
        return natural_end_position(self.token_ids, self.eos_token_ids)

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
        top = sorted(
            ((float(t["logprob"]), token_id(t["token"])) for t in entry.get("top_logprobs") or ()), key=lambda t: -t[0]
        )
        emitted = token_id(entry["token"])
        # greedy: the emitted token is the most likely one; top_logprobs says so
        # independently (ties included), and is what the margin is computed from
        top1 = top[0][0] if top else float(entry["logprob"])
        second = top[1] if len(top) > 1 else (None, None)
        self.token_ids.append(emitted)
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


def token_id(token) -> int:
    """The id in vLLM's ``"token_id:<n>"`` form (return_tokens_as_token_ids)."""
    if not isinstance(token, str) or not token.startswith(_TOKEN_ID_PREFIX):
        raise ValueError(f"token {str(token)[:40]!r} is not in the 'token_id:<n>' form")
    return int(token[len(_TOKEN_ID_PREFIX) :])


def natural_end_position(token_ids: list[int], eos_token_ids: frozenset[int] | None) -> int | None:
    """First position (0-based) whose greedy token is end-of-sequence: where the
    model would have stopped without ignore_eos. None if it never was, or if
    the end-of-sequence ids are unknown."""
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
) -> list[tuple[TrafficRow, PassResult]]:
    """Send every row greedily with logprobs, ``level`` requests in flight (the
    same closed loop as the timed requests); return (row, result) in finish
    order. Pass ``results`` to keep what finished if the pass is interrupted."""
    ep = as_endpoint(base_url)

    async def send(i: int) -> tuple[TrafficRow, PassResult]:
        return rows[i], await lossless_one(session, ep, model, rows[i], make_id(i), settings, eos_token_ids)

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
            "concurrency": level,
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


def eos_ids_for_model(model_dir: str | Path) -> frozenset[int] | None:
    """The end-of-sequence token ids of a Hugging Face model folder, as vLLM
    stops on them: ``eos_token_id`` (an int or a list) of generation_config.json
    and config.json, plus the tokenizer's eos_token looked up in tokenizer.json.
    None when the folder says nothing (e.g. an external server's model name)."""
    folder = Path(model_dir)
    if not folder.is_dir():
        return None
    ids: set[int] = set()
    for name in ("generation_config.json", "config.json"):
        ids |= _ids(_json(folder / name).get("eos_token_id"))
    eos = _json(folder / "tokenizer_config.json").get("eos_token")
    eos = eos.get("content") if isinstance(eos, dict) else eos
    if isinstance(eos, str):
        for added in _json(folder / "tokenizer.json").get("added_tokens") or ():
            if isinstance(added, dict) and added.get("content") == eos:
                ids |= _ids(added.get("id"))
    return frozenset(ids) or None


def _json(path: Path) -> dict:
    """A JSON object from a file; {} if absent or unreadable (the id is then unknown)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _ids(value) -> set[int]:
    values = value if isinstance(value, list) else [value]
    return {v for v in values if isinstance(v, int) and not isinstance(v, bool) and v >= 0}
