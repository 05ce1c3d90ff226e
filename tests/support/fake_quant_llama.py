"""A stand-in for ``llama-server`` in the quantization cells' tests: takes its
arguments, serves ``compat_server.CompatFake`` on ``--port`` (speculative when
``--spec-type`` is given) with llama.cpp's counter names and ``/health``, and
fails to start (exit 1, a message on stderr) when the ``-md`` draft path
contains ``$FAKE_QUANT_BAD_DRAFT``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from aiohttp import web

sys.path.insert(0, str(Path(__file__).parents[2]))
from tests.support.compat_server import CompatFake  # noqa: E402  (run as a script: the repo root first)


class LlamaFake(CompatFake):
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
    app = fake.server().app
    app.router.add_get("/health", fake.health)
    web.run_app(app, host="127.0.0.1", port=port, print=None)


if __name__ == "__main__":
    main()
