"""The record of ``specdec compat``: one row per matrix cell, a feature probed in
both arms of one engine pair (``specdec.experiments.compat``).

A cell's evidence is in its own columns, per arm (``baseline_*``,
``speculative_*``): whether the server accepted the request and its error
verbatim when it did not, whether the output obeys the feature's constraint,
and the speculation counters' differences around the request (speculative arm
only: the baseline does not speculate). ``None`` means "not applicable" or "not
measured", never 0.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

#: Characters of each arm's normalized output a cell keeps (its ``*_output_head``; the digest covers all of it).
OUTPUT_HEAD_CHARS = 300

Outcome = Literal["works", "degrades", "broken", "refused", "not tested", "not offered"]

#: The outcomes in the order the matrix and the report list them (worst last but two: ``not tested`` and
#: ``not offered`` say nothing about speculation, the first because it did not draft in the cell, the
#: second because the feature is not there without it).
OUTCOMES: tuple[str, ...] = ("works", "degrades", "broken", "refused", "not tested", "not offered")
#: ``degrades`` (specdec/experiments/compat/classify.py): acceptance per token with the feature below this share of the
#: plain twin's: the gain falls.
DEGRADE_RATIO = 0.5
#: ``degrades``: the speedup with the feature must fall by at least this share (95% interval wholly below
#: 1 / (1 + margin)) of the plain twin's.
DEGRADE_SPEED_MARGIN = 0.10


class CompatCell(BaseModel):
    """One cell of the compatibility matrix: (engine, speculative method, feature probe)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    run_id: str
    """Run identifier."""
    engine: str
    """Engine of the pair (vllm, llama.cpp, or 'external')."""
    engine_version: str | None
    """Engine version as reported or installed; None if unknown."""
    spec_method: str
    """The speculative arm's method (e.g. ngram), or 'declared' for a user's pair."""
    feature: str
    """Feature family probed (structured_output, tools, sampling, ...)."""
    probe: str
    """The probe within its feature (json_schema, tool_choice_named, ...); unique per run."""
    output_constraint: str
    """What the output must satisfy to be valid (one sentence)."""
    identity_expected: bool
    """Greedy decoding: both arms should emit the same output (False for sampled probes such as seed)."""
    baseline_accepted: bool
    """The baseline server answered 2xx with a complete reply."""
    speculative_accepted: bool
    """The speculative server answered 2xx with a complete reply."""
    baseline_http_status: int | None
    """HTTP status of the baseline reply; None if none arrived."""
    speculative_http_status: int | None
    """HTTP status of the speculative reply; None if none arrived."""
    baseline_error: str | None
    """The baseline server's error body, verbatim; None when accepted."""
    speculative_error: str | None
    """The speculative server's error body, verbatim; None when accepted."""
    baseline_valid: bool | None
    """The baseline output satisfies the constraint; None: not assessed (refused, no output constraint, or not exercised); a reply cut at max_tokens is invalid."""
    speculative_valid: bool | None
    """The speculative output satisfies the constraint; None: not assessed (refused, no output constraint, or not exercised); a reply cut at max_tokens is invalid."""
    baseline_validity_detail: str
    """Why the baseline output is (in)valid, one phrase."""
    speculative_validity_detail: str
    """Why the speculative output is (in)valid, one phrase."""
    identical: bool | None
    """Both arms' outputs (text, tool calls, every choice) are equal; None when not applicable (a refusal, or a sampled probe)."""
    first_divergence_char: int | None
    """First character at which the two normalized outputs differ (0-based; the JSON list of every reply's choices, text and tool calls, in order); None when identical or not applicable."""
    baseline_output_sha256: str | None
    """SHA-256 hex of the baseline's normalized output."""
    speculative_output_sha256: str | None
    """SHA-256 hex of the speculative normalized output."""
    baseline_output_head: str | None = Field(default=None, max_length=OUTPUT_HEAD_CHARS)
    """First OUTPUT_HEAD_CHARS (300) characters of the baseline's normalized output; None when refused."""
    speculative_output_head: str | None = Field(default=None, max_length=OUTPUT_HEAD_CHARS)
    """First OUTPUT_HEAD_CHARS (300) characters of the speculative normalized output; None when refused."""
    baseline_completion_tokens: int | None
    """usage.completion_tokens of the baseline reply."""
    speculative_completion_tokens: int | None
    """usage.completion_tokens of the speculative reply."""
    baseline_e2e_ms: float | None
    """Baseline request time, monotonic clock, ms (one request)."""
    speculative_e2e_ms: float | None
    """Speculative request time, monotonic clock, ms (one request)."""
    draft_tokens: int | None
    """Speculative arm: spec_num_draft_tokens counter difference around the feature request(s); None if the server exports no counter."""
    accepted_tokens: int | None
    """Speculative arm: spec_num_accepted_tokens counter difference around the feature request(s)."""
    drafts: int | None
    """Speculative arm: spec_num_drafts counter difference (verify rounds) around the feature request(s)."""
    plain_draft_tokens: int | None
    """The same counter around the plain twin (same messages, no feature); None without a twin. Quantization cells: the same method's cell on the shipped Q4_1 target (the reference), same prompts."""
    plain_accepted_tokens: int | None
    """Accepted tokens around the plain twin."""
    plain_drafts: int | None
    """Verify rounds around the plain twin."""
    prefix_cache_hit_rate: float | None
    """Speculative arm, multi-turn probe only: prefix_cache_hits / prefix_cache_queries over the session's turns; None elsewhere or when not exported."""
    target_quant: str | None = None
    """Quantization cells (feature 'quantization', llama.cpp): the target GGUF's type (Q4_1 as shipped, Q8_0, F16); None elsewhere."""
    target_bits: int | None = None
    """Quantization cells: the target's bits per weight as stored (4, 8, 16)."""
    draft_quant: str | None = None
    """Quantization cells with a draft model (spec_method draft-simple): the draft GGUF's type; None for a draft-free method (ngram-mod) and elsewhere."""
    draft_bits: int | None = None
    """Quantization cells: the draft's bits (4, 8); None as above."""
    speedup: float | None = None
    """Geometric mean over the cell's request pairs of baseline e2e / speculative e2e (same body, one request per arm, the arms' order alternated pair by pair). Feature probes: the feature request(s) of every repeat (--repeats); quantization cells: the same prompt at a forced length, the baseline being the same target without speculation. None when an arm gave no timed reply."""
    speedup_ci_low: float | None = None
    """Lower end of the 95% Student t interval of the mean log ratio over the pairs (pairs - 1 degrees of freedom), mapped back with exp; None with fewer than 2 pairs. The pairs share two server processes: it covers request-to-request noise, not server-to-server; pointwise (not adjusted across cells)."""
    speedup_ci_high: float | None = None
    """Upper end of that interval."""
    speedup_pairs: int | None = None
    """Request pairs the speedup is computed from."""
    repeats: int | None = None
    """Feature probes: times each of the probe's requests was sent per arm (--repeats); None for quantization cells (their prompts are sent --repeats times too: speedup_pairs says how many pairs)."""
    plain_speedup: float | None = None
    """Feature probes: the same paired speedup on the plain twin (same messages, no feature), one pair per repeat; None without a twin."""
    plain_speedup_ci_low: float | None = None
    """Lower end of its 95% t interval."""
    plain_speedup_ci_high: float | None = None
    """Upper end of its 95% t interval."""
    speedup_vs_plain: float | None = None
    """Feature probes: speedup with the feature / speedup on the plain twin, the geometric mean over repeats of (mean log ratio of the repeat's feature pairs - log ratio of its twin pair); below 1: the gain falls with the feature. None without a twin or a timed pair."""
    speedup_vs_plain_ci_low: float | None = None
    """Lower end of its 95% t interval over the repeats (repeats - 1 df); an upper end below 1 / 1.10 makes a valid, lossless cell 'degrades'."""
    speedup_vs_plain_ci_high: float | None = None
    """Upper end of that interval."""
    speed_label: str | None = None
    """Feature probes: the speed decided by the verdict's rule (specdec.experiments.compat.speed): faster, slower or equivalent (margin: the verdict's default), or 'not measured' where the pair's pooled noise cannot decide it; None: not judged (quantization cells, a cell with no timed pair, or a run without the verdict's functions)."""
    speed_ci_low: float | None = None
    """Lower end of the family-wise interval (Holm over the pair's feature cells) behind speed_label, from the noise pooled over every cell of the pair (the verdict's variance model) or the cell's own spread, the larger; None unless speed_label is faster, slower or equivalent."""
    speed_ci_high: float | None = None
    """Upper end of that interval."""
    speed_df: float | None = None
    """Degrees of freedom of the pooled noise behind speed_label; None when not measured."""
    baseline_prefix_cache_hit_rate: float | None = None
    """Baseline arm, multi-turn cells: prefix_cache_hits / prefix_cache_queries around the cell's own requests; None elsewhere or when not exported."""
    speculative_prefix_cache_hit_rate: float | None = None
    """Speculative arm, multi-turn cells: the same (equal to prefix_cache_hit_rate)."""
    baseline_stall_ratio: float | None = None
    """Streamed structured-output and tool cells, baseline arm: the largest gap between chunks among the last STALL_TAIL chunks of a reply over the reply's median gap, the largest over the cell's replies; None when not streamed or too few chunks."""
    speculative_stall_ratio: float | None = None
    """The same in the speculative arm (docs/compat.md: the stall rule)."""
    sampling_level: int | None = None
    """Sampling-distribution cells (feature 'sampling', probe sampling_distribution.c<level>): the requests in flight while each arm sampled; None elsewhere."""
    sampling_pairs: int | None = None
    """Sampling-distribution cells: the (prompt, seed) samples re-scored in both arms, compared pairwise by prompt (specdec/experiments/compat/sampling_cells.py)."""
    sampling_p_value: float | None = None
    """Sampling-distribution cells: the stratified permutation test's two-sided p on the re-scored log-probability (speculative against baseline); None when not tested."""
    sampling_mean_difference: float | None = None
    """Sampling-distribution cells: the mean over prompts of the speculative minus the baseline mean re-scored log-probability, nats."""
    sampling_min_detectable_shift: float | None = None
    """Sampling-distribution cells: the shift of that mean the test finds with 80% power at its alpha, nats (what 'not rejected' can promise at this sample size)."""
    lossless_identical: int | None = None
    """Lossless cells (feature 'lossless', probe lossless_greedy.c<level>): greedy pairs whose token ids were identical in both arms (specdec/experiments/compat/lossless_cells.py); None elsewhere."""
    lossless_near_ties: int | None = None
    """Lossless cells: pairs whose first divergence took the baseline's runner-up within the dtype's near-tie margin (numerics, as the replay's lossless mart classifies it)."""
    lossless_suspect: int | None = None
    """Lossless cells: pairs whose divergence nothing explains (another token, a wider margin, or one output a prefix of the other): the cell is broken."""
    turn: int | None = None
    """Multi-turn cells: the session's turn (1-based) the cell's requests, counters and pairs are of; None elsewhere."""
    prefix_caching: str | None = None
    """Multi-turn cells: 'on' (one cache_salt per session: later turns may reuse the earlier turns' KV) or 'off' (a fresh cache_salt per turn and cache_prompt false: no reuse, on a server whose prefix cache stays enabled); None elsewhere."""
    baseline_capture_reconciles: bool | None = None
    """Baseline arm: its captured rows for the cell's requests agree with the engine's counters around them (no draft token proposed; tokens emitted = the generation-token counter's difference); None: not captured (no capture plugin on the server, or no rows of the arm in the run), or no counters."""
    speculative_capture_reconciles: bool | None = None
    """Speculative arm: its captured rows for the cell's requests agree with the speculation counters around them (verify rounds, draft tokens proposed and accepted); None: not captured, or no counters."""
    capture_detail: str | None = None
    """The captured and counted figures per arm behind the two flags; None when not captured."""
    outcome: Outcome
    """works: valid, lossless, and the speculative arm drafted in the cell (its counters moved); degrades: valid and lossless but speculation proposed nothing with the feature while the plain twin drafted, its acceptance per token fell below half the plain twin's, or its speedup fell clearly below the plain twin's (speedup_vs_plain's interval wholly below 1 / 1.10), or, in a streamed structured-output or tool cell, the speculative arm stalls near the end (docs/compat.md: the stall rule), or, in a multi-turn cell, its prefix cache hit rate is over 2 points below the baseline's in every repeat; broken: invalid output, a greedy divergence, or captured rows that do not reconcile with the counters in one arm only; refused: the speculative server refused what the baseline accepted; not tested: valid and lossless, but nothing shows that speculation ran: no draft token with the feature nor on the plain twin (the probe could not make the engine draft; quantization cells: nor on the shipped target), or the speculation counters were not read; not offered: the baseline refused it too, or neither arm gave a valid output (the field ignored, or not met within max_tokens)."""
    detail: str
    """One sentence on why this outcome, with the error text escaped where refused."""
    requests_sent: int
    """Requests behind this cell, both arms, twins included (a plain twin that several probes share is counted in each of their cells; the run's sends are in its manifest)."""
