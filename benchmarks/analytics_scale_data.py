"""The synthetic runs of ``analytics_scale.py`` (its docstring says what they
hold), in several shapes (``SHAPES``): run folders with their requests and
engine counters beside the sidecar's lake of rounds (``layout='lake'``), or
the rounds in each run folder's capture files (``layout='runs'``), in part
files of ``part_rows`` rows or in one file per run (row groups of
``ROW_GROUP`` rows). The light shape (``light``: 16 chunks per request,
texts like "out 17") is the one the scale goal was first met on; the others
have the shapes of real runs: one chunk per engine step (a baseline request
streams a chunk per token, a speculative one a chunk per verify round) and
output texts of 1-5 KB. Generated with numpy, vectorized per block; nothing
here is timed.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

TOKENS = 128
CHUNKS = 16
LEVELS = (1, 4, 16)
REPEATS = 2
CATEGORIES = ("code", "chat", "summarize", "translate")
ACCEPT_P = {"code": 0.8, "chat": 0.55, "summarize": 0.65, "translate": 0.45}  # P(draft token i accepted | i - 1)
K = 4
PART_ROWS = 2_000_000
ROW_GROUP = 1 << 20  # rounds per row group when a run's rounds are one file
T0 = 1_767_225_600 * 10**9  # 2026-01-01T00:00:00Z
TEXT_BYTES = (1000, 5000)  # output text length range of the 'kb' texts
TEXT_DIFFERS = 0.03  # share of prompts whose speculative text differs from the baseline's


@dataclass(frozen=True)
class Shape:
    """What one benchmark data set looks like."""

    name: str
    runs: int = 4
    layout: str = "lake"  # lake | runs
    tokens: int = TOKENS  # output tokens per request
    chunks: str = "16"  # '16': 16 chunks per request; 'real': one per token (baseline), per round (speculative)
    text: str = "short"  # 'short': "out N"; 'kb': 1-5 KB of words
    part_rows: int | None = PART_ROWS  # rounds per part file; None: one file per run
    # True: each run folder as a replay leaves a finished (or interrupted) run, its part files
    # merged by the product's own ``specdec.replay.writing.consolidate`` into one Parquet per
    # record (requests.parquet, engine_counters.parquet; rounds.parquet when its rounds are in
    # the folder). False: the part files as written during the run (a run killed before its
    # exit could merge them), one requests file per arm, level and repeat
    consolidated: bool = False

    def describe(self) -> dict:
        return asdict(self)


#: The shapes the benchmark runs (``--shape all``); the figure that counts is the worst.
SHAPES = {
    s.name: s
    for s in (
        Shape("light"),
        Shape("real-128-parts", runs=4, layout="runs", tokens=128, chunks="real", text="kb"),
        Shape(
            "real-512-one-file",
            runs=4,
            layout="runs",
            tokens=512,
            chunks="real",
            text="kb",
            part_rows=None,
            consolidated=True,
        ),
        Shape(
            "large-run", runs=1, layout="runs", tokens=90, chunks="real", text="kb", part_rows=None, consolidated=True
        ),
        Shape("lake-200-runs", runs=200, layout="lake", tokens=128, chunks="real", text="kb", consolidated=True),
    )
}


def _accepted_draws(rng, n: int, categories: np.ndarray, tokens: int):
    """Per speculative request (a row) the accepted count of each decode round, and how many
    decode rounds it takes to emit the tokens after the prefill's first one."""
    p = np.array([ACCEPT_P[c] for c in CATEGORIES])[categories]
    draws = np.minimum(K, rng.geometric(1 - p[:, None], size=(n, tokens)) - 1)  # a per round, capped at k
    need = tokens - 1  # tokens after the prefill's first one
    emitted = np.cumsum(draws + 1, axis=1)
    rounds = (emitted < need).sum(axis=1) + 1
    return draws, rounds


def _segment_cumsum(values: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Running sums of ``values`` restarting at each segment (``lengths`` rows each)."""
    total = np.cumsum(values)
    starts = np.cumsum(lengths) - lengths
    before = np.where(starts > 0, total[np.maximum(starts - 1, 0)], 0)
    return total - np.repeat(before, lengths)


_WORDS = None


def _text_buffer() -> str:
    """About 4 MB of words (a fixed vocabulary of made-up words), sliced into output texts."""
    global _WORDS
    if _WORDS is None:
        rng = np.random.default_rng(7)
        letters = np.array(list("etaoinshrdlucmfwypvbgkqjxz "))
        vocab = ["".join(rng.choice(letters[:26], size=int(n))) for n in rng.integers(2, 10, 3000)]
        words = rng.choice(np.array(vocab), size=800_000, p=None)
        _WORDS = " ".join(words.tolist())
    return _WORDS


def _texts(shape: Shape, arm: str, prompts: int) -> list[str]:
    if shape.text == "short":
        return [f"out {i}" for i in range(prompts)]
    buf = _text_buffer()
    lo, hi = TEXT_BYTES
    i = np.arange(prompts)
    start = (i * 2_654_435_761) % (len(buf) - hi)
    length = lo + (i * 7919) % (hi - lo)
    if arm == "speculative":  # a few greedy outputs differ (as bfloat16 batch shapes make them)
        start = np.where((i * 40503) % 1000 < TEXT_DIFFERS * 1000, start + 1, start)
    return [buf[s : s + n] for s, n in zip(start.tolist(), length.tolist())]


def _chunks(shape: Shape, rng, e2e: np.ndarray, n_rows: np.ndarray, emitted: np.ndarray, step_ms: np.ndarray):
    """(chunk_offsets_ms, chunk_tokens, ttft_ms, e2e_ms) of a block's requests."""
    prompts, tokens = len(e2e), shape.tokens
    if shape.chunks == "16":
        chunk_at = np.linspace(1 / CHUNKS, 1, CHUNKS)[None, :] * e2e[:, None]  # the first chunk arrives at TTFT
        chunk_tokens = np.linspace(tokens / CHUNKS, tokens, CHUNKS).astype(int)
        offsets = pa.array(chunk_at.tolist(), pa.list_(pa.float64()))
        return offsets, pa.array([chunk_tokens.tolist()] * prompts, pa.list_(pa.int64())), chunk_at[:, 0], e2e
    # one chunk per engine step: per round (speculative, ``emitted`` tokens each) or per token
    # (baseline: every round emits one); the prefill's round streams the first token at TTFT
    ttft = 20.0 + 0.01 * rng.integers(100, 2000, prompts) * rng.lognormal(0, 0.1, prompts)
    lengths = n_rows
    per_row_ms = np.repeat(step_ms, lengths) * rng.lognormal(0, 0.15, int(lengths.sum()))
    starts = np.cumsum(lengths) - lengths
    per_row_ms[starts] = 0.0  # the first chunk is at TTFT
    at = np.repeat(ttft, lengths) + _segment_cumsum(per_row_ms, lengths)
    running = np.minimum(_segment_cumsum(emitted, lengths), tokens)
    offsets = pa.ListArray.from_arrays(pa.array(np.append(starts, lengths.sum()), pa.int32()), pa.array(at))
    counts = pa.ListArray.from_arrays(pa.array(np.append(starts, lengths.sum()), pa.int32()), pa.array(running))
    last = at[starts + lengths - 1]
    return offsets, counts, ttft, last + 0.3


def _block(rng, shape: Shape, run_id: str, arm: str, level: int, repeat: int, prompts: int, step0: int):
    """(rounds columns, request rows) of one block."""
    from specdec.replay.runner import request_id

    tokens = shape.tokens
    cats = np.arange(prompts) % len(CATEGORIES)
    spec = arm == "speculative"
    if spec:
        draws, decode_rounds = _accepted_draws(rng, prompts, cats, tokens)
    else:
        decode_rounds = np.full(prompts, tokens - 1)
    n_rows = decode_rounds + 1  # the prefill row first
    total = int(n_rows.sum())
    req = np.repeat(np.arange(prompts), n_rows)
    starts = np.cumsum(n_rows) - n_rows
    round_index = np.arange(total) - np.repeat(starts, n_rows)
    decode = round_index > 0
    if spec:
        col = np.maximum(round_index - 1, 0)
        a = np.where(decode, draws[req, np.minimum(col, tokens - 1)], 0)
        k = np.where(decode, K, 0)
    else:
        a = np.zeros(total, np.int64)
        k = np.zeros(total, np.int64)
    prompt_tokens = 100 + (np.arange(prompts) * 37) % 1900
    emitted = a + 1
    context = np.repeat(prompt_tokens, n_rows) + round_index
    # the block's requests run in waves of `level` at once, one engine step per round of each
    step = step0 + (req // level) * tokens + round_index
    rids = [request_id(run_id, arm, level, i, repeat) for i in range(prompts)]
    token = f"{1 if arm == 'baseline' else 2}-{run_id[-4:]:0>4}"
    engine_ids = pa.array([f"chatcmpl-{r}-{i:08x}" for i, r in enumerate(rids)])
    wall = T0 + (step * 15_000_000)
    rounds = {
        "run_id": pa.array([run_id] * total),
        "engine_request_id": engine_ids.take(pa.array(req)),
        "pid": pa.array(np.full(total, 1 if arm == "baseline" else 2)),
        "process_token": pa.array([token] * total),
        "step_index": pa.array(step),
        "round_index": pa.array(round_index),
        "phase": pa.array(np.where(decode, "decode", "prefill")),
        "tokens_proposed": pa.array(k),
        "tokens_accepted": pa.array(a),
        "tokens_emitted": pa.array(emitted),
        "batch_size": pa.array(np.full(total, level)),
        "num_scheduled_tokens": pa.array(np.where(decode, 1 + k, context)),
        "context_len": pa.array(context),
        "draft_ms": pa.array(np.where(k > 0, 0.8, np.nan), mask=k == 0),
        "verify_ms": pa.array(np.full(total, 12.0)),
        "wall_time_ns": pa.array(wall),
        "step_drafts_verified": pa.nulls(total, pa.int64()),  # not measured (Model Runner V1's rows)
    }
    step_ms = (12.0 + (0.8 if spec else 0.0)) * level**0.3 * rng.lognormal(0, 0.05, prompts)
    e2e = 30.0 + n_rows * step_ms
    offsets, counts, ttft, e2e = _chunks(shape, rng, e2e, n_rows, emitted, step_ms)
    send = T0 + (step0 + (np.arange(prompts) // level) * tokens) * 15_000_000
    texts = _texts(shape, arm, prompts)
    requests = {
        "run_id": [run_id] * prompts,
        "arm": [arm] * prompts,
        "level": [level] * prompts,
        "repeat": [repeat] * prompts,
        "request_id": rids,
        "prompt_id": [f"p{i:06d}" for i in range(prompts)],
        "category": [CATEGORIES[c] for c in cats],
        "max_tokens": [tokens] * prompts,
        "temperature": [0.0] * prompts,
        "success": [True] * prompts,
        "error_type": [None] * prompts,
        "http_status": [200] * prompts,
        "error_message": [None] * prompts,
        "wall_send_ns": send.tolist(),
        "ttft_ms": np.asarray(ttft).tolist(),
        "e2e_ms": np.asarray(e2e).tolist(),
        "chunk_offsets_ms": offsets,
        "chunk_tokens": counts,
        "prompt_tokens": prompt_tokens.tolist(),
        "output_tokens": [tokens] * prompts,
        "output_text": texts,
        "output_text_sha256": [hashlib.sha256(t.encode()).hexdigest() for t in texts],
        "finish_reason": ["length"] * prompts,
        "spec_num_steps": decode_rounds.tolist() if spec else [None] * prompts,
        "spec_num_draft_tokens": [None] * prompts,
        "spec_num_accepted_tokens": [None] * prompts,
        "load_mode": ["closed"] * prompts,
        "level_value": [float(level)] * prompts,
        "intended_send_ms": [None] * prompts,
        "actual_send_ms": [None] * prompts,
        "schedule_lag_ms": [None] * prompts,
        "session_wait_ms": [None] * prompts,
        "session_id": [None] * prompts,
        "turn_index": [None] * prompts,
    }
    sums = (int((k > 0).sum()), int(k.sum()), int(a.sum()))
    return rounds, requests, sums, int(step.max()) + 1


def _manifest(run_id: str):
    from specdec.schemas.records import ArmConfig, RunManifest

    spec = {"method": "ngram", "num_speculative_tokens": K}
    arms = [
        ArmConfig(name="baseline", speculative_config=None, server_args=[], endpoint="http://127.0.0.1:8001"),
        ArmConfig(
            name="speculative",
            speculative_config=spec,
            server_args=[],
            endpoint="http://127.0.0.1:8002",
            speculative_config_source="declared",
        ),
    ]
    return RunManifest(
        run_id=run_id,
        created_wall="2026-01-01T00:00:00Z",
        specdec_version="bench",
        engine={"name": "external"},
        model="synthetic",
        dtype="bfloat16",
        arms=arms,
        arm_difference=["--speculative-config"],
        sampling={"temperature": 0.0, "ignore_eos": True},
        traffic={"path": "synthetic", "category_shares": {c: 0.25 for c in CATEGORIES}},
        levels=list(LEVELS),
        warmup_requests=0,
        host={},
        finished=True,
        capture={"source": "directory"},
        schedule={"repeats": REPEATS},
    )


class _Rounds:
    """A run's rounds, written as part files of ``shape.part_rows`` rows or as one file."""

    def __init__(self, root: Path, run_dir: Path, shape: Shape, run_id: str, r: int, schema, written: dict):
        self.root, self.run_dir, self.shape, self.run_id, self.r = root, run_dir, shape, run_id, r
        self.schema, self.written = schema, written
        self.pending: list[pa.Table] = []
        self.rows, self.seq, self.writer = 0, 0, None

    def _path(self) -> Path:
        from specdec.runfolder import lake_rounds_part, partition_date, round_part_name

        if self.shape.layout == "lake":
            path = lake_rounds_part(self.root, partition_date(T0), self.run_id, f"7-{self.r:04d}", self.seq)
        else:
            path = self.run_dir / "capture" / round_part_name(f"7-{self.r:04d}", self.seq)
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def add(self, table: pa.Table) -> None:
        if self.shape.part_rows is None:  # one file: row groups of ROW_GROUP rows, written as they fill
            if self.writer is None:
                self.writer = pq.ParquetWriter(self._path(), self.schema, write_page_checksum=True)
            self.pending.append(table)
            self.rows += table.num_rows
            if self.rows >= ROW_GROUP:
                whole = pa.concat_tables(self.pending)
                cut = (self.rows // ROW_GROUP) * ROW_GROUP
                self.writer.write_table(whole.slice(0, cut), row_group_size=ROW_GROUP)
                self.pending, self.rows = [whole.slice(cut)], self.rows - cut
            return
        self.pending.append(table)
        self.rows += table.num_rows
        if self.rows >= self.shape.part_rows:
            self.flush()

    def flush(self) -> None:
        from specdec.schemas.arrow import write_parquet_atomic

        if self.shape.part_rows is None:
            if self.writer is not None:
                if self.rows:
                    self.writer.write_table(pa.concat_tables(self.pending), row_group_size=ROW_GROUP)
                self.writer.close()
            self.pending, self.rows, self.writer = [], 0, None
            return
        if not self.pending:
            return
        write_parquet_atomic(pa.concat_tables(self.pending), self._path())
        self.pending, self.rows, self.seq = [], 0, self.seq + 1


def prompts_per_block(shape: Shape, rounds_target: int) -> int:
    t = shape.tokens
    rows_per_prompt = t + (t - 1) / 2.6 + 1  # baseline rows + about what a speculative request has
    return max(4, int(rounds_target / (shape.runs * len(LEVELS) * REPEATS * rows_per_prompt)))


def generate(root: Path, rounds_target: int, shape: Shape, seed: int = 0) -> dict:
    """Write the runs; return what was written."""
    from specdec.replay.writing import consolidate
    from specdec.runfolder import counters_part, requests_part, write_manifest
    from specdec.schemas.arrow import arrow_schema, table_from_records, write_parquet_atomic
    from specdec.schemas.records import MetricSnapshot, RequestResult, RoundTrace

    rng = np.random.default_rng(seed)
    blocks = 2 * len(LEVELS) * REPEATS
    prompts = prompts_per_block(shape, rounds_target)
    round_schema, request_schema = arrow_schema(RoundTrace), arrow_schema(RequestResult)
    written = {"rounds": 0, "requests": 0, "files": 0, "prompts_per_block": prompts, "chunks": 0}
    for r in range(shape.runs):
        run_id = f"bench-{r:02d}"
        run_dir = root / run_id
        (run_dir / "requests").mkdir(parents=True)
        write_manifest(run_dir, _manifest(run_id))
        rounds = _Rounds(root, run_dir, shape, run_id, r, round_schema, written)
        step, counters, drafts = 0, [], {}
        for level in LEVELS:
            for repeat in range(REPEATS):
                for arm in ("baseline", "speculative"):
                    cols, reqs, sums, step = _block(rng, shape, run_id, arm, level, repeat, prompts, step)
                    rounds.add(pa.Table.from_pydict(cols, schema=round_schema))
                    written["rounds"] += len(cols["run_id"])
                    written["chunks"] += len(reqs["chunk_offsets_ms"].flatten())
                    write_parquet_atomic(
                        pa.Table.from_pydict(reqs, schema=request_schema), requests_part(run_dir, arm, level, repeat)
                    )
                    written["requests"] += prompts
                    before = drafts.get(arm, (0, 0, 0))
                    after = tuple(b + s for b, s in zip(before, sums))
                    drafts[arm] = after
                    for position, (n, k, a) in (("before", before), ("after", after)):
                        spec = arm == "speculative"
                        counters.append(
                            MetricSnapshot(
                                run_id=run_id,
                                arm=arm,
                                level=level,
                                repeat=repeat,
                                position=position,
                                wall_time_ns=T0 + step,
                                spec_num_drafts=float(n) if spec else None,
                                spec_num_draft_tokens=float(k) if spec else None,
                                spec_num_accepted_tokens=float(a) if spec else None,
                                generation_tokens=None,
                            )
                        )
        rounds.flush()
        for arm in ("baseline", "speculative"):
            write_parquet_atomic(
                table_from_records(MetricSnapshot, [c for c in counters if c.arm == arm]), counters_part(run_dir, arm)
            )
        if shape.consolidated:
            consolidate(run_dir)
    files = list(root.rglob("*.parquet"))
    written["files"] = len(files)
    written["bytes"] = sum(f.stat().st_size for f in files)
    written["requests_bytes"] = sum(
        f.stat().st_size for f in [*root.glob("*/requests/*.parquet"), *root.glob("*/requests.parquet")]
    )
    written["blocks_per_run"] = blocks
    return written
