"""A run of named arms written from the classic synthetic run (tests/support/synthetic_run.py):
plain, ngram and ngram2 (``write_named_run``), optionally across two engines; shared by
tests/analytics/test_named_arms.py and test_report_forest.py."""

from __future__ import annotations

from pathlib import Path

from tests.support.synthetic_run import make_counters, make_manifest, make_requests, make_rounds, write_run

RENAME = {"baseline": "plain", "speculative": "ngram"}


def _renamed(rec, arm: str, e2e: float | None = None):
    """A record of the classic run under another arm name (its request ids too)."""
    update = {}
    if hasattr(rec, "arm"):
        update["arm"] = arm
    for field in ("request_id", "engine_request_id"):
        if hasattr(rec, field):
            value = getattr(rec, field)
            for old in RENAME:
                value = value.replace(f".{old}.", f".{arm}.") if f".{old}." in value else value
            update[field] = value
    if e2e is not None:
        update.update(e2e_ms=e2e, ttft_ms=e2e / 100, chunk_offsets_ms=[e2e / 100, e2e / 2, e2e])
    return rec.model_copy(update=update)


def write_named_run(run_dir: Path, two_engines: bool = False) -> Path:
    """``two_engines``: ngram2 runs llama.cpp (measured against plain, across engines), and
    the manifest names both engines as a run of two engines does (model, dtype, engine and
    engines)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    requests, counters = make_requests(), make_counters()
    reqs = [_renamed(r, RENAME[r.arm]) for r in requests]
    reqs += [_renamed(r, "ngram2", 500.0) for r in requests if r.arm == "speculative"]
    cnts = [_renamed(c, RENAME[c.arm]) for c in counters]
    cnts += [_renamed(c, "ngram2") for c in counters if c.arm == "speculative"]
    rounds = [_renamed(r, "plain" if ".baseline." in r.engine_request_id else "ngram") for r in make_rounds()]
    rounds += [
        _renamed(r, "ngram2")
        for r in make_rounds()
        if ".speculative." in r.engine_request_id and ".c0." not in r.engine_request_id
    ]  # not the warm-up
    m = make_manifest()
    plain, ngram = m.arms
    arms = [
        plain.model_copy(update={"name": "plain", "engine": "vllm"}),
        ngram.model_copy(update={"name": "ngram", "engine": "vllm"}),
        ngram.model_copy(update={"name": "ngram2", "engine": "vllm"}),
    ]
    diff = [f"{arm} vs plain: {d}" for arm in ("ngram", "ngram2") for d in m.arm_difference]
    update = {"arms": arms, "arm_difference": diff}
    if two_engines:
        arms[2] = arms[2].model_copy(update={"engine": "llama.cpp", "reference": "plain"})
        update.update(
            model="g.gguf + m",
            dtype="llama.cpp: GGUF as shipped (g.gguf); vllm: float32",
            model_source={"llama.cpp": {"file": "g.gguf"}},
            engine={"name": "mixed", "vllm": dict(m.engine), "llama.cpp": {"name": "llama.cpp", "version": "b1"}},
            engines={
                "llama.cpp": {
                    "model": "g.gguf",
                    "dtype": "GGUF as shipped (g.gguf)",
                    "model_source": {"file": "g.gguf"},
                },
                "vllm": {"model": "m", "dtype": "float32", "model_source": {}},
            },
        )
    return write_run(run_dir, cnts, requests=reqs, rounds=rounds, manifest=m.model_copy(update=update))
