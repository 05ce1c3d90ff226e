"""A stand-in for ``llama-server`` in the quantization cells' tests: takes its
arguments, serves ``compat_server.CompatFake`` on ``--port`` (speculative when
``--spec-type`` is given) with llama.cpp's counter names and ``/health``, and
fails to start (exit 1, a message on stderr) when the ``-md`` draft path
contains ``$FAKE_QUANT_BAD_DRAFT``. Its ``/apply-template`` and ``/completion`` answer the
lossless check greedily (the same ids in both arms, top-2 probabilities 3 nats apart); a
speculative server whose ``-md`` path contains ``$FAKE_QUANT_FLIP`` emits another token at
position 2 (a divergence nothing explains)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from aiohttp import web

sys.path.insert(0, str(Path(__file__).parents[2]))
from tests.support.compat_server import CompatFake  # noqa: E402  (run as a script: the repo root first)


class LlamaFake(CompatFake):
    flip = False  # emit another token at position 2 of a greedy check (main: $FAKE_QUANT_FLIP)

    async def metrics(self, request: web.Request) -> web.Response:
        c = self.counters
        return web.Response(
            text=(
                f"llamacpp:spec_decode_num_drafts_total {c['drafts']}\n"
                f"llamacpp:spec_decode_num_draft_tokens_total {c['draft_tokens']}\n"
                f"llamacpp:spec_decode_num_accepted_tokens_total {c['accepted']}\n"
                "llamacpp:tokens_predicted_total 1\n"
            )
        )

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def apply_template(self, request: web.Request) -> web.Response:
        return web.json_response({"prompt": (await request.json())["messages"][-1]["content"]})

    async def completion(self, request: web.Request) -> web.Response:
        body = await request.json()
        n, seed = body["n_predict"], sum(map(ord, body["prompt"]))
        ids = [10 + (seed + 7 * i) % 40 for i in range(n)]
        if self.flip:
            ids[2] = 99
        top = lambda t: [{"id": t, "logprob": -0.05}, {"id": t + 50, "logprob": -3.05}]  # noqa: E731
        probs = [{"id": t, "token": "x", "logprob": -0.05, "top_logprobs": top(t)} for t in ids]
        return web.json_response(
            {"content": "x" * n, "tokens": ids, "completion_probabilities": probs, "tokens_predicted": n,
             "tokens_evaluated": 3}
        )  # fmt: skip


def main() -> None:
    args = sys.argv[1:]  # read by hand: argparse would take llama-server's "-m MODEL" for "-md"

    def value(flag: str) -> str | None:
        return args[args.index(flag) + 1] if flag in args else None

    port, md, spec_type = int(value("--port") or 0), value("-md"), value("--spec-type")
    bad = os.environ.get("FAKE_QUANT_BAD_DRAFT")
    if bad and md and bad in md:
        print(f"error: failed to load draft model {md}", file=sys.stderr)
        sys.exit(1)
    fake = LlamaFake(spec_type is not None)
    flip = os.environ.get("FAKE_QUANT_FLIP")
    fake.flip = bool(flip and md and flip in md)
    app = fake.server().app
    app.router.add_get("/health", fake.health)
    app.router.add_post("/apply-template", fake.apply_template)
    app.router.add_post("/completion", fake.completion)
    web.run_app(app, host="127.0.0.1", port=port, print=None)


if __name__ == "__main__":
    main()
