"""Benchmark: what does the capture plugin cost inside the engine?

Runs the same greedy batch through vLLM's in-process CPU engine (SmolLM2,
ngram k=4) with capture off and on, alternating A/B/A/B in fresh processes,
and prints the side-by-side generation times and their ratio.

    .venv/bin/python benchmarks/capture_overhead.py [--pairs 3] [--max-tokens 96] [--batch 8]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from specdec.runfolder import ENV_CAPTURE_DIR

CHILD = r"""
import json, os, sys, time
from vllm import LLM, SamplingParams
model, max_tokens, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
llm = LLM(model=model, dtype="bfloat16", max_model_len=2048, enforce_eager=True, seed=0,
          speculative_config={"method": "ngram", "num_speculative_tokens": 4,
                              "prompt_lookup_min": 2, "prompt_lookup_max": 4})
prompts = [[{"role": "user", "content": f"Repeat this list {i} times: red, green, blue, cyan, magenta."}]
           for i in range(batch)]
params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
llm.chat(prompts[:1], params, use_tqdm=False)  # warm-up
t = time.perf_counter()
llm.chat(prompts, params, use_tqdm=False)
print("RESULT", json.dumps({"seconds": time.perf_counter() - t}))
"""


def one(model: str, capture: bool, max_tokens: int, batch: int) -> float:
    env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_CPU_KVCACHE_SPACE="1")
    env.pop(ENV_CAPTURE_DIR, None)
    if capture:
        env[ENV_CAPTURE_DIR] = tempfile.mkdtemp(prefix="specdec-bench-")
    out = subprocess.run(
        [sys.executable, "-c", CHILD, model, str(max_tokens), str(batch)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[7:])["seconds"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--model", default=None)
    a = ap.parse_args()
    if a.model is None:
        from specdec.model import prepare_model

        a.model = str(prepare_model().path)
    off, on = [], []
    for i in range(a.pairs):
        off.append(one(a.model, False, a.max_tokens, a.batch))
        on.append(one(a.model, True, a.max_tokens, a.batch))
        print(f"pair {i + 1}: capture off {off[-1]:.2f}s  on {on[-1]:.2f}s", flush=True)
    m_off, m_on = statistics.median(off), statistics.median(on)
    print(
        f"median generation time, {a.batch} requests x {a.max_tokens} tokens: "
        f"capture off {m_off:.2f}s | capture on {m_on:.2f}s | on/off ratio {m_on / m_off:.3f}"
    )


if __name__ == "__main__":
    main()
