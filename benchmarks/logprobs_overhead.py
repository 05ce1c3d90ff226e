"""Benchmark: does asking for logprobs change the timing the speedup is built on?

specdec collects token ids and top-2 logprobs (the lossless check) in a
separate lossless pass, apart from the timed requests, on the assumption
that logprobs cost time per token. This measures that assumption on the
embedded engine: one local vLLM server per arm (baseline; speculative with the
default ngram k=4), and on each the same greedy prompts at one request at a
time, as a block without logprobs and a block with them (the verification
pass's payload), alternating plain/logprobs/logprobs/plain for --pairs pairs.

Prints, per arm, each block's mean end-to-end time and the geometric mean over
prompts of e2e(with logprobs) / e2e(plain), per pair and overall; and the
speedup (baseline / speculative) measured with and without logprobs.

    .venv/bin/python benchmarks/logprobs_overhead.py [--pairs 2] [--requests 12] [--max-tokens 64]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import tempfile
from pathlib import Path

import aiohttp

from specdec.engines.vllm import ServerSpec, VllmServer
from specdec.replay.config import DEFAULT_SPEC_CONFIG, ReplayConfig
from specdec.replay.http.client import build_payload, stream_payload
from specdec.replay.passes.lossless import pass_payload
from specdec.replay.runner import level_rows
from specdec.traffic import BUNDLED, load_traffic

MODEL = "specdec-target"


async def block(base_url: str, rows, logprobs: bool, tag: str) -> list[float]:
    """One request at a time; the e2e ms of each (all must succeed)."""
    out = []
    async with aiohttp.ClientSession() as session:
        for i, row in enumerate(rows):
            payload = pass_payload(MODEL, row) if logprobs else build_payload(MODEL, row)
            res = await stream_payload(session, base_url, payload, f"bench-{tag}-{i}")
            if not res.success:
                raise SystemExit(f"request failed: {res.error_type}: {res.error_message}")
            out.append(res.e2e_ms)
    return out


def geo(ratios: list[float]) -> float:
    return math.exp(sum(math.log(r) for r in ratios) / len(ratios))


def measure(spec: ServerSpec, spec_config: dict | None, rows, pairs: int, arm: str) -> dict[str, list[list[float]]]:
    blocks: dict[str, list[list[float]]] = {"plain": [], "logprobs": []}
    with tempfile.TemporaryDirectory() as tmp:
        with VllmServer(spec, spec_config, Path(tmp) / "capture", "bench", Path(tmp) / "server.log") as srv:
            asyncio.run(block(srv.base_url, rows[:2], False, "warm"))
            for p in range(pairs):
                order = ("plain", "logprobs") if p % 2 == 0 else ("logprobs", "plain")
                for kind in order:
                    e2e = asyncio.run(block(srv.base_url, rows, kind == "logprobs", f"{arm}{p}{kind}"))
                    blocks[kind].append(e2e)
                    print(f"{arm:12s} pair {p} {kind:9s} mean e2e {sum(e2e) / len(e2e):8.1f} ms", flush=True)
    return blocks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--requests", type=int, default=12)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--model", default=None)
    a = ap.parse_args()
    if a.model is None:
        from specdec.model import prepare_model

        a.model = str(prepare_model().path)
    cfg = ReplayConfig(traffic=BUNDLED, requests_per_level=a.requests, max_tokens=a.max_tokens)
    rows = [r for r in level_rows(load_traffic(BUNDLED), cfg) if r.temperature == 0]
    spec = ServerSpec(model=a.model, dtype=a.dtype, prefix_cache="keep")
    result = {
        arm: measure(spec, conf, rows, a.pairs, arm)
        for arm, conf in (("baseline", None), ("speculative", dict(DEFAULT_SPEC_CONFIG)))
    }
    print(f"\n{len(rows)} greedy prompts, {a.max_tokens} forced tokens, {a.dtype}, one at a time, {a.pairs} pairs\n")
    print(f"{'arm':12s} {'plain ms':>9s} {'logprobs ms':>11s} {'ratio (geo mean, per pair)':>30s}")
    for arm, blocks in result.items():
        per_pair = [geo([lp / pl for lp, pl in zip(l_, p_)]) for l_, p_ in zip(blocks["logprobs"], blocks["plain"])]
        allr = geo([lp / pl for l_, p_ in zip(blocks["logprobs"], blocks["plain"]) for lp, pl in zip(l_, p_)])
        mean = lambda bs: sum(sum(b) for b in bs) / sum(len(b) for b in bs)  # noqa: E731
        print(
            f"{arm:12s} {mean(blocks['plain']):9.1f} {mean(blocks['logprobs']):11.1f} "
            f"{allr:10.3f}  ({', '.join(f'{r:.3f}' for r in per_pair)})"
        )
    for kind in ("plain", "logprobs"):
        b = [x for blk in result["baseline"][kind] for x in blk]
        s = [x for blk in result["speculative"][kind] for x in blk]
        print(
            f"speedup {kind:9s} (geo mean of baseline / speculative over prompts and pairs): "
            f"{geo([x / y for x, y in zip(b, s)]):.3f}"
        )


if __name__ == "__main__":
    main()
