"""The sampling-mode check: prompts with temperature > 0 sent N times per arm,
once per seed of a fixed seed list, with logprobs on, so that statistics of
the samples can be compared between the arms (``analytics/sampling_check.py``).

If speculation leaves the output distribution unchanged, every statistic of
the samples has the same distribution in both arms. Two are recorded per
sample: the sequence log-probability under the target (the sum of the emitted
tokens' logprobs: vLLM reports the target's, from the raw logits, before
temperature, under speculation too) and the natural length (the first
position whose emitted token was end-of-sequence; ``ignore_eos`` keeps the
fixed length, so generation carries on past it).

Like the lossless pass (``passes/lossless.py``), it runs apart from the
timed requests (logprobs add work per token) and reuses that pass's stream
and logprob parsing: a request is ``pass_payload`` with the row's
temperature (or ``temperature_override``), a ``seed`` and ``top_logprobs: 0``
(only the emitted token's logprob is needed). A prompt that occurs several
times in ``rows`` is sampled once per seed: the same prompt and seed on one
server gives the same sample, and a duplicate would count twice.

Each sample also keeps its generated token ids (are the seeds' samples
distinct?) and the prompt's token ids as the server tokenized it (vLLM's
``return_token_ids``), so that ``rescore.py`` can score every sample of both
arms again on one server (teacher forcing): ``rescored_logprob_sum``, the
statistic the distribution test uses. The self-reported sum stays recorded
beside it, to compare the two instruments.

``temperature_override`` replaces every row's temperature: the hook a test
uses to plant a defect (an arm that samples at a slightly different
temperature must be detected). Failures are data, typed as in the
lossless pass (``lossless.PASS_ERROR_TYPES``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import pyarrow as pa

from specdec.http.urls import Endpoint
from specdec.replay.http.client import ClientSettings, as_endpoint, stream_payload
from specdec.replay.load.closed_loop import closed_loop
from specdec.replay.passes.lossless import PassResult, pass_payload
from specdec.schemas.arrow import table_from_columns
from specdec.schemas.records import SampleCheck, TrafficRow

__all__ = [
    "DEFAULT_SEEDS",
    "SampleResult",
    "derive_seeds",
    "sample_one",
    "sample_pass",
    "sample_payload",
    "sample_table",
    "sampled_rows",
]

_SEED_RANGE = 2**31  # seeds are sent as non-negative 32-bit integers


def derive_seeds(base: int, n: int) -> list[int]:
    """``n`` seeds derived from ``base``: seed i is the first 8 bytes of
    sha256("<base>:<i>") modulo 2**31. The same (base, n) always gives the same
    list, and two bases give unrelated lists (for two independent halves of an
    A/A check)."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    return [int.from_bytes(hashlib.sha256(f"{base}:{i}".encode()).digest()[:8], "big") % _SEED_RANGE for i in range(n)]


#: The seed list of a run unless told otherwise: 16 seeds from base 0, the same in both arms.
DEFAULT_SEEDS: list[int] = derive_seeds(0, 16)


def sampled_rows(rows: list[TrafficRow]) -> list[TrafficRow]:
    """The rows with temperature > 0, each prompt_id once (first occurrence)."""
    seen: set[str] = set()
    out = []
    for row in rows:
        if row.temperature > 0 and row.prompt_id not in seen:
            seen.add(row.prompt_id)
            out.append(row)
    return out


def sample_payload(model: str, row: TrafficRow, seed: int, temperature: float) -> dict:
    """The lossless pass's body with the row's sampling settings and a seed;
    only the emitted token's logprob is asked for (top_logprobs 0), and the
    prompt's token ids (vLLM's return_token_ids: in the first chunk)."""
    return {
        **pass_payload(model, row),
        "temperature": temperature,
        "seed": seed,
        "top_logprobs": 0,
        "return_token_ids": True,
    }


@dataclass
class SampleResult(PassResult):
    """One sampled request: the lossless pass's per-position record (token
    ids, end-of-sequence position) plus the emitted token's logprob at every
    position, what was sent, the prompt's token ids the server reported, and
    the re-scoring's outcome (``rescore.rescore_pass`` fills it)."""

    sample_index: int = 0
    seed: int = 0
    temperature: float = 0.0
    emitted_logprobs: list[float] = field(default_factory=list)
    prompt_token_ids: list[int] | None = None
    rescored_logprob_sum: float | None = None
    rescored_by: str | None = None
    not_rescored_reason: str | None = None

    def collect(self, chunk: dict) -> None:
        """The lossless pass's collect, and the prompt's token ids where a chunk carries them."""
        ids = chunk.get("prompt_token_ids")
        if self.prompt_token_ids is None and isinstance(ids, list) and all(type(t) is int for t in ids):
            self.prompt_token_ids = ids
        super().collect(chunk)

    def _position(self, entry: dict) -> None:
        super()._position(entry)
        self.emitted_logprobs.append(float(entry["logprob"]))  # the sampled token's, not the top-1's

    @property
    def sequence_logprob(self) -> float | None:
        """Sum of the emitted tokens' logprobs [nats]; None unless the request succeeded."""
        if self.stream is None or not self.stream.success:
            return None
        return float(sum(self.emitted_logprobs))


async def sample_one(
    session,
    base_url: str | Endpoint,
    model: str,
    row: TrafficRow,
    request_id: str,
    sample_index: int,
    seed: int,
    temperature: float,
    settings: ClientSettings | None = None,
    eos_token_ids: frozenset[int] | None = None,
) -> SampleResult:
    """One seeded request with logprobs; never raises (failures are rows)."""
    out = SampleResult(eos_token_ids=eos_token_ids, sample_index=sample_index, seed=seed, temperature=temperature)
    out.stream = await stream_payload(
        session, base_url, sample_payload(model, row, seed, temperature), request_id, settings, on_chunk=out.collect
    )
    out.finish()
    return out


async def sample_pass(
    session,
    base_url: str | Endpoint,
    model: str,
    rows: list[TrafficRow],
    level: int,
    make_id,
    settings: ClientSettings | None,
    seeds: list[int],
    eos_token_ids: frozenset[int] | None = None,
    temperature_override: float | None = None,
    results: list | None = None,
) -> list[tuple[TrafficRow, SampleResult]]:
    """Send every row with temperature > 0 (each prompt once, see
    ``sampled_rows``) once per seed, ``level`` requests in flight (the closed
    loop of the timed requests); return (row, result) in finish order.

    Requests go seed by seed (all prompts with seed 0, then seed 1, ...), so a
    batch mixes prompts. ``make_id(i)`` names request i of the pass.
    ``temperature_override`` replaces the rows' temperature (a planted defect).
    Pass ``results`` to keep what finished if the pass is interrupted."""
    ep = as_endpoint(base_url)
    prompts = sampled_rows(rows)
    jobs = [(row, k, seed) for k, seed in enumerate(seeds) for row in prompts]

    async def send(i: int) -> tuple[TrafficRow, SampleResult]:
        row, k, seed = jobs[i]
        temperature = row.temperature if temperature_override is None else temperature_override
        return row, await sample_one(session, ep, model, row, make_id(i), k, seed, temperature, settings, eos_token_ids)

    return await closed_loop(len(jobs), level, send, results=results)


def sample_table(run_id: str, arm: str, level: int, results: list[tuple[TrafficRow, SampleResult]]) -> pa.Table:
    """SampleCheck rows of one sampling pass (one arm and level)."""
    cols: dict[str, list] = {f: [] for f in SampleCheck.model_fields}
    for row, res in results:
        values = {
            "run_id": run_id,
            "arm": arm,
            "level": level,
            "request_id": res.sent.request_id,
            "prompt_id": row.prompt_id,
            "category": row.category,
            "sample_index": res.sample_index,
            "seed": res.seed,
            "temperature": res.temperature,
            "top_p": None,
            "max_tokens": row.max_tokens,
            "success": res.sent.success,
            "error_type": res.sent.error_type,
            "output_tokens": res.sent.output_tokens,
            "sequence_logprob": res.sequence_logprob,
            "natural_end_position": res.natural_end_position,
            "eos_token_ids": None if res.eos_token_ids is None else sorted(res.eos_token_ids),
            "token_ids": list(res.token_ids) if res.sent.success else None,
            "rescored_logprob_sum": res.rescored_logprob_sum,
            "rescored_by": res.rescored_by,
            "not_rescored_reason": _not_rescored_reason(res),
        }
        for f in cols:
            cols[f].append(values[f])
    return table_from_columns(SampleCheck, cols)


def _not_rescored_reason(res: SampleResult) -> str | None:
    """The result's reason, or why none was given (``rescore_pass`` did not run on it)."""
    if res.rescored_logprob_sum is not None or res.not_rescored_reason is not None:
        return res.not_rescored_reason
    return "the sample failed" if not res.sent.success else "not re-scored (no reference server was asked)"
