"""The pydantic models for every record: round trace, traffic row, request
result, engine-counter snapshot and run manifest.

Conventions: time fields name unit and clock (``*_ms`` durations measured on a
monotonic clock, ``wall_*_ns`` Unix wall-clock nanoseconds); ``None`` means
"not applicable" and is never replaced by 0.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from specdec.schemas.counters import ENGINE_COUNTERS, SPEC_COUNTERS, with_counters
from specdec.schemas.strict import (
    MAX_ARRIVAL_MS,
    MAX_LABEL_LEN,
    MAX_TEMPERATURE,
    MAX_TOKENS_CEILING,
    ArmName,
    FiniteFloat,
    FreeForm,
    Label,
    Prompt,
    RunName,
    StrictBool,
    StrictInt,
    Text,
)

#: Written into every Parquet file's key-value metadata as ``schema_version``.
SCHEMA_VERSION = "3"  # 3: the level key's column is `level`; 2: repeat, http_status, process_token, ...

#: Older versions of the record formats this specdec still reads, each with the names its
#: files and manifests give differently: version -> {name now: name in that version}. Version
#: 2 called the level key `concurrency`, though in open loop it holds a rank, not an in-flight
#: count; the readers (``analytics.input_validation``, ``analytics.build.raw_select``,
#: ``RunManifest``) read such a run under today's names.
FORMER_NAMES: dict[str, dict[str, str]] = {
    "2": {"level": "concurrency", "levels": "concurrency_levels"},  # the names until 2026-12-07
}
#: Every ``schema_version`` this specdec reads.
READ_SCHEMA_VERSIONS = (*FORMER_NAMES, SCHEMA_VERSION)


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class RoundTrace(_Record):
    """One request in one engine step that emitted tokens (captured in the engine).

    A *verify round* is a row with ``tokens_proposed > 0``: the target checked
    that many draft tokens for this request in this step. Rows with
    ``tokens_proposed = 0`` are prefill steps or decode steps in which no draft
    was proposed (baseline arm, or ngram found no match); they are kept so
    that such steps are counted explicitly rather than silently dropped.
    """

    run_id: str
    """Run this row belongs to (from SPECDEC_CAPTURE_RUN_ID)."""
    engine_request_id: str
    """vLLM's internal request id; embeds the client's X-Request-Id."""
    pid: int
    """Process id of the engine core that recorded the row."""
    process_token: str
    """PID plus a random token of the recording process's incarnation (also in its part-file names): tells apart two engine processes that reused one PID."""
    step_index: int
    """Engine step counter within the recording process, from 0."""
    round_index: int
    """Index of this row among the request's rows, from 0 (0 is prefill)."""
    phase: Literal["prefill", "decode"]
    """prefill if the request's prompt was not fully computed before this step."""
    tokens_proposed: int
    """Draft tokens verified for this request in this step (k), after grammar invalidation; 0 if none."""
    tokens_accepted: int
    """Draft tokens accepted (a, 0..k); counted exactly as vLLM counts them."""
    tokens_emitted: int
    """Tokens the engine sampled for the request this step (accepted + bonus), before any stop-trimming; counted as vLLM counts them."""
    batch_size: int
    """Requests scheduled in this engine step."""
    num_scheduled_tokens: int
    """Tokens scheduled for this request in this step (1 + k in decode)."""
    context_len: int
    """Tokens already computed for the request before this step (prompt + output)."""
    draft_ms: float | None
    """Wall time of the drafter call that proposed the drafts verified in this step (whole batch, monotonic clock); None if no drafter ran."""
    verify_ms: float | None
    """Wall time of this step's target forward plus sampling/rejection, drafting excluded (whole batch, monotonic clock); None if not measured."""
    wall_time_ns: int
    """Unix wall clock when the step's output was processed, ns."""
    step_drafts_verified: int | None = None
    """Draft tokens the model runner actually put into this step's verify forward, whole batch (Model Runner V2: input_batch.num_draft_tokens). It differs from the step's sum of tokens_proposed (what the scheduler, and vLLM's counters, count as proposed) only under DSpark's adaptive verification, which can admit fewer drafts than were scheduled. None when not measured (V1 runner, CPU)."""


#: Version of the traffic-file format (TrafficRow). 1: prompt_id, category,
#: prompt, max_tokens, temperature. 2 adds, all optional: chat messages, the
#: sampling settings and model name as sent, arrival time, session and turn, the
#: recorded response, tier, source, structured-output constraint and tools.
#: Every version-1 file is a valid version-2 file. 3 adds, in Parquet only, a
#: row's prompt stored as shared text blocks + its own tail, the blocks' texts
#: once in the file (``traffic_blocks.py``); readers join them back, and every
#: version-2 file is a valid version-3 file.
TRAFFIC_SCHEMA_VERSION = "3"

TIERS = ("high", "medium", "low")
"""Predictability tiers of a traffic row's content: high (code generation and
editing, structured output and format conversion, template filling), medium
(summarization, rewriting, translation), low (open chat, creative writing,
advice)."""


class TrafficRow(_Record):
    """One request of a traffic mix (the input of specdec-replay).

    Read from a user's file, so every field is strict (see ``strict.py``): no
    ``"12"`` -> 12, no ``true`` -> 1, no ``1.0`` -> 1, finite floats only,
    labels without surrounding whitespace or control characters, prompts that
    are not whitespace only. ``max_tokens`` is also checked against the model's
    context length when it is known (``specdec.traffic.io.load_traffic``).

    The content is either ``prompt`` (one user message) or ``messages`` (the
    chat messages as sent, earlier turns of a session included), never both.
    Replay forces every request to produce ``max_tokens`` tokens (``ignore_eos``)
    so both arms do the same work; a recording sets ``max_tokens`` to the
    recorded response length. Fields a version-1 file does not have are None
    ("not recorded"), never a default that pretends to be a recording.
    """

    prompt_id: Label = Field(max_length=MAX_LABEL_LEN)
    """Stable identifier, unique within the file; no surrounding whitespace or control characters."""
    category: Label = Field(max_length=MAX_LABEL_LEN)
    """Task category used to group results (e.g. code, structured, chat; 'unknown' when a recorder could not tell); no surrounding whitespace or control characters."""
    prompt: Prompt | None = None
    """The user message sent to the chat endpoint (a single-turn request); any Unicode text except NUL, not whitespace only. None when messages is given."""
    messages: Text | None = None
    """The chat messages as sent, as a JSON array of OpenAI chat message objects (each with a string 'role'), earlier turns of the session included. None when prompt is given."""
    max_tokens: StrictInt = Field(
        gt=0,
        le=MAX_TOKENS_CEILING,
        description=f"Forced output length in tokens (sent with ignore_eos), 1..{MAX_TOKENS_CEILING:,}; a recording sets it to the recorded response length.",
    )
    temperature: FiniteFloat = Field(default=0.0, ge=0.0, le=MAX_TEMPERATURE)
    """Sampling temperature, 0..2; 0 means greedy."""
    top_p: FiniteFloat | None = Field(default=None, gt=0.0, le=1.0)
    """Nucleus sampling as sent, (0, 1]; None: not sent."""
    top_k: StrictInt | None = Field(default=None, ge=-1)
    """Top-k sampling as sent (vLLM extension; -1 or 0 means off); None: not sent."""
    seed: StrictInt | None = None
    """Sampling seed as sent; None: not sent."""
    stop: list[Text] | None = None
    """Stop strings as sent (recorded for fidelity; replay forces the recorded length, so they do not end a replayed request); None: not sent."""
    model: Text | None = None
    """The model name as the client sent it (replay sends to the served model instead); None: not recorded."""
    arrival_ms: FiniteFloat | None = Field(default=None, ge=0.0, le=MAX_ARRIVAL_MS)
    """Arrival time, ms from the start of the recording or trace (the open-loop clock); None: not recorded."""
    session_id: Label | None = Field(default=None, max_length=MAX_LABEL_LEN)
    """Conversation the request belongs to; None: a standalone request."""
    turn_index: StrictInt | None = Field(default=None, ge=0)
    """Turn within the session, from 0; None without a session."""
    input_tokens: StrictInt | None = Field(default=None, ge=0)
    """Input length in tokens as recorded or given by a trace; None: not recorded."""
    recorded_output_tokens: StrictInt | None = Field(default=None, ge=0)
    """Response length in tokens as recorded (or given by a trace); None: not recorded."""
    ended_naturally: StrictBool | None = None
    """True when the recorded response ended by itself (finish_reason 'stop'), False when it hit a length limit; None: not recorded."""
    tier: Literal["high", "medium", "low"] | None = None
    """Predictability tier of the content (see TIERS); None: not assigned."""
    source: Label | None = Field(default=None, max_length=MAX_LABEL_LEN)
    """Where the row comes from: e.g. 'bundled', 'proxy', 'azure-llm-2023', 'mooncake', 'burstgpt', or a user's own label; None: not said."""
    response_format: Text | None = None
    """Structured-output constraint as sent (the request's response_format, JSON text); None: none."""
    tools: Text | None = None
    """Tool definitions as sent (the request's tools, JSON text); None: none."""
    content_note: Text | None = None
    """What an importer did to give the row its content (pool prompt, composed context, how the input length was reached); None: the content is the recorded one."""

    @field_validator("messages")
    @classmethod
    def _messages(cls, value: str | None) -> str | None:
        if value is not None:
            chat_messages(value)
        return value

    @field_validator("response_format", "tools")
    @classmethod
    def _json_text(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                json.loads(value)
            except ValueError as exc:
                raise ValueError(f"must be JSON text ({exc})") from None
        return value

    @model_validator(mode="after")
    def _together(self) -> TrafficRow:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError(
                "give exactly one of the fields prompt (one user message) and messages (a JSON array of chat messages)"
            )
        if (self.turn_index is None) != (self.session_id is None):
            raise ValueError("the fields session_id and turn_index go together: give both or neither")
        return self

    def chat(self) -> list[dict[str, Any]]:
        """The messages to send: ``messages`` parsed, or one user message."""
        if self.messages is not None:
            return chat_messages(self.messages)
        return [{"role": "user", "content": self.prompt}]


def chat_messages(text: str) -> list[dict[str, Any]]:
    """Parse and check a ``messages`` value: a non-empty JSON array of objects,
    each with a string ``role``; raises ValueError saying what is wrong."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"messages must be a JSON array of chat messages ({exc})") from None
    if not isinstance(value, list) or not value:
        raise ValueError("messages must be a non-empty JSON array of chat messages")
    for i, message in enumerate(value):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ValueError(f"messages[{i}] must be an object with a string 'role'")
    return value


class RequestResult(_Record):
    """One request issued by specdec-replay, as the client saw it."""

    run_id: str
    """Run identifier."""
    arm: ArmName
    """Which server configuration served it."""
    level: int
    """The level key: in closed loop the concurrency (in-flight requests); in open loop (load_mode recorded or poisson) the level's rank 1..N by rising load, its setting in level_value."""
    repeat: int = 0
    """Repeat of the level, from 0. Within a repeat the arms run one after the other (A B, order counterbalanced), so host drift shows up as variance between repeats instead of bias; embedded servers are fresh per repeat by default (manifest.schedule.restart_servers)."""
    request_id: str
    """Client request id, sent as X-Request-Id."""
    prompt_id: str
    """TrafficRow.prompt_id of the prompt sent."""
    category: str
    """TrafficRow.category."""
    max_tokens: int
    """Requested output length."""
    temperature: float
    """Sampling temperature sent."""
    success: bool
    """True only if a 2xx streamed reply ended with [DONE] after a usage block, with no error event."""
    error_type: str | None
    """Failure class when success is false (see specdec.replay.http.client.ERROR_TYPES), else None."""
    http_status: int | None = None
    """HTTP status of the reply; None if no reply arrived (connection error, timeout)."""
    error_message: str | None
    """Error text when success is false, else None."""
    wall_send_ns: int
    """Unix wall clock when the request was sent, ns."""
    ttft_ms: float | None
    """Send to first content chunk, monotonic clock, ms."""
    e2e_ms: float | None
    """Send to end of stream, monotonic clock, ms."""
    chunk_offsets_ms: list[float]
    """Arrival of each content chunk, ms after send (monotonic)."""
    chunk_tokens: list[int] | None = None
    """Per content chunk, aligned with chunk_offsets_ms: output tokens streamed up to and including that chunk [tokens, cumulative], as the server's per-chunk usage reported them (stream_options.continuous_usage_stats). A chunk can carry several tokens (speculation, merged engine steps). None when the server did not report a usable count for every content chunk (e.g. it ignores continuous_usage_stats), so it is never partly filled."""
    prompt_tokens: int | None
    """Prompt tokens per the server's usage block."""
    output_tokens: int | None
    """Completion tokens per the server's usage block."""
    output_text: str
    """Concatenated generated text."""
    finish_reason: str | None
    """Finish reason of the choice."""
    spec_num_steps: int | None
    """Engine's per-request count of verify rounds; None without speculation."""
    spec_num_draft_tokens: int | None
    """Engine's per-request proposed draft tokens; None without speculation."""
    spec_num_accepted_tokens: int | None
    """Engine's per-request accepted draft tokens; None without speculation."""
    load_mode: Literal["closed", "recorded", "poisson"] = "closed"
    """How the level sent requests (specdec.replay.load.modes): closed = concurrency kept at the level; recorded = open loop on the rows' recorded clock, scaled; poisson = open-loop Poisson arrivals. In open loop, level holds the level's key (1..N, growing with the offered load), not an in-flight count."""
    level_value: float | None = None
    """The level's setting: the concurrency (closed), the time scale (recorded; 0.1 = ten times faster) or the offered rate in requests/s (poisson); None if not recorded."""
    intended_send_ms: float | None = None
    """When the schedule meant to send the request, ms after the block's start (monotonic clock): the planned arrival, or the previous turn's finish if later; None in closed loop (a request goes when a slot frees)."""
    actual_send_ms: float | None = None
    """When the client sent the request, ms after the block's start (monotonic clock); None if not recorded."""
    schedule_lag_ms: float | None = None
    """actual_send_ms - intended_send_ms [ms]: delay the client added to the schedule; None in closed loop."""
    session_wait_ms: float | None = None
    """Open loop: ms the request was held past its planned arrival because the previous turn of its session had not finished (0 if not held); None in closed loop or without a previous turn."""
    session_id: str | None = None
    """TrafficRow.session_id: the conversation the prompt belongs to; None for a standalone request (and in files written before this field existed)."""
    turn_index: int | None = None
    """TrafficRow.turn_index: the turn within its session, from 0; None without a session."""
    output_text_sha256: str | None = None
    """SHA-256 of output_text's UTF-8 bytes, lowercase hex (DuckDB's sha256()), written with the record so the analytics compare outputs by digest instead of reading the texts; None in files written before the field existed (the build computes it from output_text then)."""


@with_counters(
    "wall_time_ns",
    ENGINE_COUNTERS,
    none_if="absent (llama.cpp: its llamacpp:... counterpart)",
    optional=("prefix_cache_queries", "prefix_cache_hits"),
)
class MetricSnapshot(_Record):
    """The engine's cumulative Prometheus counters, read before and after a level."""

    run_id: str
    """Run identifier."""
    arm: ArmName
    """Server the counters were read from."""
    level: int
    """Level the snapshot brackets."""
    repeat: int = 0
    """Repeat of the level the snapshot brackets, from 0."""
    position: Literal["before", "after"]
    """Read before the level's first request or after its last."""
    wall_time_ns: int
    """Unix wall clock of the read, ns."""
    accepted_per_position: list[float] | None = None
    """The engine's per-position accepted-token counter, cumulative, by draft position from 0 (vllm:spec_decode_num_accepted_tokens_per_pos_total{position}, llama.cpp: llamacpp:...); None if the server exports none (no speculation, or a file written before this field existed)."""
    prefix_cache_reset: bool | None = None
    """Before-snapshots only: True if POST /reset_prefix_cache succeeded just before the block, False if it was refused (then earlier blocks may have warmed the cache), None if not tried."""


class ResourceReading(_Record):
    """What a server held while a block ran: read about once a second by
    replay (``replay/resources.py``), from the block's first request to its last."""

    run_id: str
    """Run identifier."""
    arm: ArmName
    """Server the reading was taken from."""
    level: int
    """Level key of the block (the concurrency in closed loop)."""
    repeat: int = 0
    """Repeat of the block, from 0."""
    t_ms: float
    """Time of the reading, ms after the block's watcher started (monotonic clock)."""
    wall_time_ns: int
    """Unix wall clock of the reading, ns."""
    rss_bytes: int | None
    """Resident memory of the server's whole process tree (API server and engine core processes: the sum of their RSS, so pages shared between them count once per process) [bytes]; None for a server specdec did not start (no process to read)."""
    kv_cache_usage: float | None
    """vllm:kv_cache_usage_perc, the share of the KV cache in use, 0..1 (the largest over engines); None if the server does not export it."""
    requests_running: float | None
    """vllm:num_requests_running (summed over engines); None if not exported."""


class ArmConfig(_Record):
    """One arm of an experiment: a server configuration."""

    name: ArmName
    """The arm's name (specdec.arms): baseline / speculative in a classic run, any plain name otherwise."""
    speculative_config: FreeForm | None
    """vLLM --speculative-config, None for the baseline."""
    server_args: list[Text]
    """Full argument list the server was started with (empty for an external endpoint)."""
    endpoint: Text
    """Base URL the arm was served at, credentials redacted ('embedded' for a server specdec started)."""
    speculative_config_source: Literal["launched", "declared", "none"] = "none"
    """launched: specdec started the server with speculative_config; declared: an external server, the setting is what the user said it runs (not verified); none: no speculation."""
    engine: Text | None = None
    """The arm's engine adapter (vllm, llama.cpp); None in manifests written before arms had one: the run's engine."""
    reference: ArmName | None = None
    """The arm this one is measured against (specdec.arms.reference_of decides when None)."""


#: What --max-error-rate and --margin accept and default to: the bounds and defaults of
#: ReplayConfig's fields (replay/config.py) and of the manifest's that record them, stated
#: once here, in the lower layer.
ERROR_RATE = Field(ge=0.0, le=1.0)
MARGIN = Field(gt=0.0, le=1.0)
DEFAULT_MAX_ERROR_RATE = 0.05
DEFAULT_MARGIN = 0.05


class RunManifest(_Record):
    """Everything needed to interpret a run: what ran, where, on what input.

    Read back from ``manifest.json`` (``specdec.runfolder.read_manifest``), so
    its fields are strict: integers are integers, floats are finite, strings
    are valid Unicode, the free-form dicts hold no NaN or infinity.
    """

    schema_version: Text = Field(default=SCHEMA_VERSION)
    """Version of the run folder's record formats (schemas.records.SCHEMA_VERSION) when the run was written."""

    @model_validator(mode="before")
    @classmethod
    def _today_names(cls, data: Any) -> Any:
        """A manifest of an older version (``FORMER_NAMES``) read under today's field names."""
        if isinstance(data, dict) and (former := FORMER_NAMES.get(str(data.get("schema_version")))):
            back = {then: now for now, then in former.items()}
            data = {back.get(k, k): v for k, v in data.items()}
        return data

    run_id: RunName
    """Run identifier: the run folder's name."""
    created_wall: Text
    """ISO-8601 UTC time the run started."""
    specdec_version: Text
    """Version of specdec that made the run."""
    engine: FreeForm
    """Engine distribution name and version, or 'external'."""
    model: Text
    """Model path or name served."""
    model_source: FreeForm = Field(default_factory=dict)
    """Where the model came from (GGUF package, hash)."""
    dtype: Text
    """The weights' dtype as served, in words: bfloat16 or float32 on vLLM, 'GGUF as shipped' on llama.cpp; a run of several engines names each."""
    engines: FreeForm = Field(default_factory=dict)
    """A run whose arms run two engines: per engine, the model, dtype and model_source its arms served (model, dtype and model_source above name both; a comparison of two arms on one engine reads its own here, specdec.arms.comparison_manifest). Empty for a run of one engine, and in manifests written before the field existed."""
    arms: list[ArmConfig]
    """The arms as configured: name, engine, endpoint, speculative settings, server arguments."""
    arm_difference: list[Text]
    """Server arguments present in one arm but not the other."""
    sampling: FreeForm
    """Sampling settings sent with every request."""
    traffic: FreeForm
    """Traffic file path, sha256, rows and categories."""
    levels: list[Annotated[StrictInt, Field(ge=1)]]
    """The levels' keys, in the order they ran: in closed loop each is the concurrency; in open loop the level's rank by rising offered load (schedule, load_mode)."""
    warmup_requests: StrictInt = Field(ge=0)
    """Requests sent before an arm's first level and not recorded."""
    host: FreeForm
    """CPU, memory, platform and Python facts."""
    finished: StrictBool = False
    """True once every level of every arm completed."""
    max_error_rate: Annotated[FiniteFloat, ERROR_RATE] = DEFAULT_MAX_ERROR_RATE
    """A level whose failed-request share exceeds this is marked failed; no speedup or lossless figure is computed from it."""
    margin: Annotated[FiniteFloat, MARGIN] = Field(
        default=DEFAULT_MARGIN,
        description="The practical margin delta declared before the run (--margin): the speedup labels read it (equivalent = the 90% interval inside [1/(1+delta), 1+delta]). "
        f"Manifests written before the field existed read as {DEFAULT_MARGIN}.",
    )
    capture: FreeForm = Field(default_factory=dict)
    """Where the engine rows came from: source = embedded | directory | none, plus the path or the reason."""
    timeouts: dict[Text, Annotated[FiniteFloat, Field(gt=0)]] = Field(default_factory=dict)
    """Client timeouts in seconds (connect, request = longest wait for the next byte)."""
    schedule: FreeForm = Field(default_factory=dict)
    """How blocks were sent: repeats, order (arms back to back and counterbalanced within each repeat; repeat-major on fresh embedded servers per repeat, or per level with the servers kept up), restart_servers, the lossless and sampling passes, and the prefix-cache policy (reset before each block, off, or keep)."""
    notes: list[Text] = Field(default_factory=list)
    """What a reader of the run should know, one sentence each (an engine's caveats, a policy the run chose)."""
    kind: Literal["replay", "stability", "compat"] = "replay"
    """Which command made the run: replay (A/B requests), stability (fault probes) or compat (feature probes in both arms)."""
    mix: dict[Text, Annotated[FiniteFloat, Field(ge=0.0, le=1.0)]] | None = None
    """Category shares given with specdec-replay --mix (summing to 1): the weights of the speedup_weighted mart. They do not change what was sent. None: the mart uses the traffic file's own shares (traffic.category_shares)."""
    design: Literal["fixed", "sequential"] = "fixed"
    """fixed: every level ran schedule.repeats times. sequential (--max-repeats): after schedule.repeats repeats and after every repeat from then on, a look closed the levels already decided and only the open ones ran again (looks). Manifests written before the field existed read as fixed."""
    max_repeats: Annotated[StrictInt, Field(ge=2, le=100)] | None = None
    """Sequential design: the most repeats a level could run (--max-repeats). None: the fixed design."""
    budget_minutes: Annotated[FiniteFloat, Field(gt=0)] | None = None
    """Sequential design: minutes of timed blocks the run could spend (--budget); a look was the last when the next repeat would have passed it. None: no budget."""
    looks: list[FreeForm] | None = None
    """Sequential design: its looks in order, written after each one (an interrupted run keeps them). Each holds what the look returned (at least open_levels, the levels still running) and repeat (repeats done), at (ISO-8601 UTC), elapsed_s (seconds since the first timed block), final, open_levels_before. None: the fixed design."""


class StabilityResult(_Record):
    """One fault probe of ``specdec stability``: what was sent on purpose, and
    what the server did about it."""

    run_id: str
    """Run identifier."""
    fault: str
    """Fault type probed (e.g. empty_prompt, disconnect_mid_stream, burst, soak, restart)."""
    probe_index: int
    """Index of this probe within its fault type, from 0."""
    wall_start_ns: int
    """Unix wall clock when the probe started, ns."""
    duration_ms: float
    """Probe duration, monotonic clock, ms."""
    requests_sent: int
    """Requests sent by this probe."""
    requests_failed: int
    """Requests that ended in an error (expected or not)."""
    error_types: list[str]
    """Distinct error labels seen, sorted: http_<status> for an HTTP error reply, else the client's error_type (specdec.replay.http.client.ERROR_TYPES)."""
    expected: str
    """What a healthy server should do (e.g. 'HTTP 400', 'completes')."""
    outcome: Literal["ok", "degraded", "failed", "skipped"]
    """ok: behaved as expected and stayed healthy; degraded: unexpected answers but healthy; failed: unhealthy afterwards or wrong output; skipped: not applicable to this target (detail says why)."""
    server_healthy_after: bool
    """GET /health (GET /v1/models for a server without /health) answered 200 after the probe; for kill_restart, after the restart."""
    detail: str
    """One sentence on what happened."""
    rss_mb: float | None = None
    """Server RSS in MiB sampled after the probe (embedded server only); None if unknown."""
    rss_samples: int | None = None
    """Server RSS samples taken during the probe (soak only); None if not sampled."""
    rss_first_mb: float | None = None
    """First RSS sample of the probe, MiB; None if not sampled."""
    rss_last_mb: float | None = None
    """Last RSS sample of the probe, MiB; None if not sampled."""
    rss_max_mb: float | None = None
    """Largest RSS sample of the probe, MiB; None if not sampled."""
    rss_slope_mb_per_min: float | None = None
    """Least-squares slope of RSS over monotonic time, MiB per minute; None with fewer than 2 samples."""


class GreedyCheck(_Record):
    """One request of the lossless pass: a greedy request sent
    apart from the timed ones (so logprobs cannot perturb timing), asking for
    token ids and the top-2 logprobs at every position."""

    run_id: str
    """Run identifier."""
    arm: ArmName
    """Server that answered."""
    level: int
    """Level key of the pass: it runs closed loop at this concurrency (the level's batch shape; in open loop, the key 1..N)."""
    repeat: int
    """Which lossless pass of the level, from 0 (two baseline passes give the A/A floor)."""
    request_id: str
    """Client request id, sent as X-Request-Id."""
    prompt_id: str
    """TrafficRow.prompt_id of the prompt sent."""
    category: str
    """TrafficRow.category."""
    success: bool
    """As RequestResult.success, and the logprobs were complete."""
    error_type: str | None
    """Failure class when success is false, else None."""
    token_ids: list[int]
    """Generated token ids in order."""
    top1_logprobs: list[float]
    """Per position: logprob of the most likely token (greedy: the emitted one)."""
    top2_logprobs: list[float | None]
    """Per position: logprob of the second most likely token; None if not returned."""
    natural_end_position: int | None = None
    """First position (0-based) whose most likely token was end-of-sequence, so the model would have stopped there without ignore_eos; None if it never was, or if eos_token_ids is None."""
    top2_token_ids: list[int | None] = Field(default_factory=list)
    """Per position: token id of the second most likely token; None if not returned."""
    eos_token_ids: list[int] | None = None
    """End-of-sequence token ids natural_end_position was looked up with (the model folder's eos_token_id); None when unknown (an external server), then natural_end_position is None too."""


@with_counters("wall_time_ns", SPEC_COUNTERS, none_if="absent (all four are None when the server has no /metrics page)")
class PassCounters(_Record):
    """The engine's cumulative speculation counters read just before and just
    after one untimed pass of one arm at one level (the lossless pass or the
    sampling pass), so that a pass during which the speculative arm did not
    speculate can be told apart from one that did (``int_passes_checked``)."""

    run_id: str
    """Run identifier."""
    arm: ArmName
    """Server the counters were read from."""
    level: int
    """Level key of the pass (the closed-loop concurrency it ran at)."""
    pass_kind: Literal["lossless_pass", "sampling_pass"]
    """Which untimed pass the reads bracket: 'lossless_pass' (greedy, top-2 logprobs: GreedyCheck rows) or 'sampling_pass' (seeded: SampleCheck rows)."""
    position: Literal["before", "after"]
    """Read before the pass's first request or after its last."""
    wall_time_ns: int
    """Unix wall clock of the read, ns."""


class SampleCheck(_Record):
    """One request of the sampling-mode check: a prompt with temperature > 0
    sent N times per arm with a fixed list of seeds, logprobs on, apart from
    the timed requests. If speculation leaves the output distribution
    unchanged, statistics of these samples must match between the arms."""

    run_id: str
    """Run identifier."""
    arm: ArmName
    """Server that answered."""
    level: int
    """Level key of the pass (the closed-loop concurrency it ran at)."""
    request_id: str
    """Client request id, sent as X-Request-Id."""
    prompt_id: str
    """TrafficRow.prompt_id of the prompt sent."""
    category: str
    """TrafficRow.category."""
    sample_index: int
    """Index in the seed list, from 0; the same index uses the same seed in both arms."""
    seed: int
    """Sampling seed sent."""
    temperature: float
    """Temperature sent."""
    top_p: float | None = None
    """top_p sent; None if not sent."""
    max_tokens: int
    """Output length requested (ignore_eos)."""
    success: bool
    """As RequestResult.success, and the logprobs were complete."""
    error_type: str | None
    """Failure class when success is false, else None."""
    output_tokens: int | None
    """Completion tokens per usage."""
    sequence_logprob: float | None
    """Sum over positions of the emitted token's logprob as the server reports it (the target's; vLLM returns target logprobs under speculation) [nats]."""
    natural_end_position: int | None = None
    """First position (0-based) whose emitted token was end-of-sequence (the natural length under ignore_eos); None if never or unknown."""
    eos_token_ids: list[int] | None = None
    """End-of-sequence token ids natural_end_position was looked up with (the model folder's); None when unknown (an external server): then natural_end_position is None too, and the natural length is not tested."""
    token_ids: list[int] | None = None
    """The generated token ids, in order (vLLM's return_tokens_as_token_ids): what the seeds' samples are compared by (are they distinct?) and what the reference server re-scores. None when the request failed, or in a file written before they were recorded."""
    rescored_logprob_sum: float | None = None
    """Sum over positions of the generated token's logprob under the reference server by teacher forcing: the prompt's token ids plus token_ids sent to its /v1/completions with prompt_logprobs 0 (vLLM), so one server scores both arms' samples [nats]. None when not re-scored (not_rescored_reason says why)."""
    rescored_by: str | None = None
    """Arm whose server re-scored the sample (the arm's reference; a plain arm scores its own); None when not re-scored."""
    not_rescored_reason: str | None = None
    """Why rescored_logprob_sum is None: the sample failed, the server did not return the prompt's token ids, or the re-scoring request failed (its error); None when re-scored, and in a file written before re-scoring existed."""
