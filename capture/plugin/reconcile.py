"""The capture plugin reconciled with vLLM's own counters, in-process.

Runs a few prompts through vLLM's offline ``LLM`` (engine in this process:
``VLLM_ENABLE_V1_MULTIPROCESSING=0``, start in seconds) with capture on, then
compares the captured verify rounds, proposed and accepted tokens with the
deltas of vLLM's ``spec_decode`` counters. Used by ``specdec-capture
reconcile`` (``selfcheck`` until 2026-12-07) and by the integration tests (in a
subprocess, so each run gets a fresh engine and plugin state).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, cast

from specdec.capture.plugin import hooks as plugin
from specdec.defaults import DTYPE, MAX_MODEL_LEN
from specdec.runfolder import ENV_CAPTURE_DIR, ENV_CAPTURE_RUN_ID, ROUND_PART_GLOB

if TYPE_CHECKING:  # vLLM's own names for what LLM takes (types only: vllm is imported when the check runs)
    from vllm.config.model import ModelDType
    from vllm.renderers.chat_utils import ChatCompletionMessageParam

PROMPTS = [
    "Repeat this list exactly, then repeat it again: apples, pears, plums, figs, dates, limes.",
    "def add(a, b):\n    return a + b\n\nRewrite the function above with type hints and a docstring.",
    "Tell me something surprising about octopuses.",
]

_COUNTERS = {
    "rounds": "vllm:spec_decode_num_drafts",
    "proposed": "vllm:spec_decode_num_draft_tokens",
    "accepted": "vllm:spec_decode_num_accepted_tokens",
}


def _engine_counters(llm) -> dict[str, int]:
    out = {k: 0 for k in _COUNTERS}
    names = {v: k for k, v in _COUNTERS.items()}
    for metric in llm.get_metrics():
        key = names.get(metric.name)
        if key is not None:
            out[key] += int(metric.value)
    return out


def run_reconcile(
    out_dir: Path,
    model: str,
    spec_config: dict,
    dtype: str = DTYPE,
    max_tokens: int = 48,
    prompts: list[str] | None = None,
) -> dict:
    out_dir = Path(out_dir)
    os.environ[ENV_CAPTURE_DIR] = str(out_dir)
    os.environ.setdefault(ENV_CAPTURE_RUN_ID, "reconcile")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    import duckdb  # heavy: duckdb, imported only when used
    from vllm import LLM, SamplingParams  # heavy: vllm, imported only when used

    llm = LLM(
        model=model,
        dtype=cast("ModelDType", dtype),  # a name from --dtype: vLLM's config rejects one it does not know
        max_model_len=MAX_MODEL_LEN,
        enforce_eager=True,
        speculative_config=spec_config,
        disable_log_stats=False,
        seed=0,
    )
    st = plugin.state()
    if st is None or not plugin.is_active():
        raise RuntimeError(
            "the specdec capture plugin did not load (is the package installed in this "
            "environment? was a capture setting refused? see the log above)"
        )
    before = _engine_counters(llm)
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    chats: list[list[ChatCompletionMessageParam]] = [[{"role": "user", "content": p}] for p in (prompts or PROMPTS)]
    llm.chat(chats, params, use_tqdm=False)
    after = _engine_counters(llm)
    st.writer.flush()
    files = [str(f) for f in sorted(out_dir.glob(ROUND_PART_GLOB))]
    ((rounds, proposed, accepted, timed, rows),) = (  # an aggregate: exactly one row
        duckdb.connect()
        .execute(
            """select count(*) filter (tokens_proposed > 0), coalesce(sum(tokens_proposed), 0),
                  coalesce(sum(tokens_accepted), 0),
                  count(*) filter (tokens_proposed > 0 and draft_ms is not null and verify_ms is not null),
                  count(*)
           from read_parquet(?)""",
            [files],
        )
        .fetchall()
    )
    engine = {k: after[k] - before[k] for k in _COUNTERS}
    captured = {"rounds": rounds, "proposed": proposed, "accepted": accepted}
    return {
        "engine": engine,
        "captured": captured,
        "rows": rows,
        "rounds_with_timings": timed,
        "hook_errors": st.errors,
        "match": engine == captured,
    }
