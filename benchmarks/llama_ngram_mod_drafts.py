"""Benchmark: which ngram-mod settings make llama-server draft on a short copy probe?

llama-server's ngram-mod drafts only when the last ``n_match`` tokens (default 24) occur earlier
in the context and at least ``n_min`` tokens (default 48) follow them there; its lengths have
flags of their own (``--spec-ngram-mod-n-*``), and ``--spec-draft-n-*`` set a draft model's.
This starts one llama-server per setting (the bundled Q4_1 GGUF, the built binary, one thread,
one slot), sends compat's code-copy prompt greedy ``--requests`` times and prints each reply's
``timings.draft_n`` and ``draft_n_accepted`` (none: the reply had no draft fields, so nothing
was drafted). The settings go through specdec's adapter (``LlamaCpp.speculation_args``), so the
flags printed are those a run sends.

    .venv/bin/python benchmarks/llama_ngram_mod_drafts.py [--max-tokens 32] [--requests 2]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import urllib.request
from pathlib import Path

from specdec.engines import Arm, LlamaCpp
from specdec.engines.llama_cpp import LlamaServer
from specdec.engines.llama_cpp.build import build_llama_server
from specdec.experiments.compat.probes import CODE_PROMPT
from specdec.model import find_gguf

#: the settings compared: the defaults, the draft model's flag that specdec sent before
#: 2026-12-06 (ngram-mod ignores it), and ngram-mod's own lengths
SETTINGS: list[dict] = [
    {"type": "ngram-mod"},
    {"type": "draft-simple-flag-on-ngram-mod"},  # placeholder: built by hand below
    {"type": "ngram-mod", "n_match": 8, "n_min": 1, "n_max": 8},
    dict(LlamaCpp.eager_ngram or {}),
]


def _send(base_url: str, max_tokens: int) -> tuple[int | None, int | None, int | None]:
    body = {
        "messages": [{"role": "user", "content": CODE_PROMPT}],
        "max_tokens": max_tokens,
        "temperature": 0,
    }
    req = urllib.request.Request(
        base_url + "/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=300) as resp:
        timings = json.load(resp).get("timings") or {}
    return timings.get("predicted_n"), timings.get("draft_n"), timings.get("draft_n_accepted")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-tokens", type=int, default=32, help="tokens per reply (compat's probes: 32)")
    ap.add_argument("--requests", type=int, default=2, help="requests per setting, one at a time")
    args = ap.parse_args()
    adapter = LlamaCpp(build_llama_server().path, threads=1, context=2048, slots=1)
    with tempfile.TemporaryDirectory() as tmp:
        for spec in SETTINGS:
            if spec["type"] == "draft-simple-flag-on-ngram-mod":
                arm, extra = Arm("old", {"type": "ngram-mod"}), ["--spec-draft-n-max", "4"]
            else:
                arm, extra = Arm("s", spec), []
            server = LlamaServer(arm, find_gguf(), Path(tmp) / "server.log", adapter, 120.0)
            server.cmd += extra
            with server:
                got = [_send(server.base_url, args.max_tokens) for _ in range(args.requests)]
            flags = adapter.speculation_args(arm) + extra
            cells = "; ".join(f"{p} tokens, drafted {d}, accepted {a}" for p, d, a in got)
            print(f"{' '.join(flags):<95} {cells}", flush=True)


if __name__ == "__main__":
    main()
