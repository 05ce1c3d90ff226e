"""Run the quantization cells on the embedded llama.cpp (``quant`` measures and
classifies one cell): the target at 4 bits (Q4_1 as shipped), 8 (Q8_0) and 16
(F16), each against the draft at 4 and 8 bits (``--spec-type draft-simple``)
and against the draft-free prompt lookup that the feature probes use
(``ngram-mod``), with llama.cpp's default draft lengths, one thread per server
(``engines.llama_cpp.embedded.PROBE_THREADS``). After each cell's timed requests, the lossless check of the
lossless cells (``lossless_cells.greedy_pairs``: token ids and top-2 probabilities from
``/completion``) runs on the same pair: a quantized target with a quantized draft gets the same
lossless statement as the feature pairs, and a suspect pair makes the cell ``broken``.

Per target, one ``llama-server`` without speculation stays up while the
speculative servers of its cells start, are measured and stop, one after the
other (two servers at a time on two cores; one request at a time). The shipped
target's cells go first: they are the reference of the other targets' cells.
A server that does not start is data (the cell's error), not the end of the
run. The files (``specdec.engines.llama_cpp.quant``) are made and cached
before any server starts; their sha256 go to the manifest.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from specdec.engines.base import Arm
from specdec.engines.llama_cpp import LlamaCpp, LlamaServer
from specdec.engines.llama_cpp.embedded import PROBE_THREADS
from specdec.engines.llama_cpp.quant import QuantFile, quantized_ggufs
from specdec.engines.server import start_all
from specdec.errors import SpecdecError
from specdec.experiments.compat import classify, lossless_cells
from specdec.experiments.compat.quant import (
    QUANT_FEATURE,
    QuantArm,
    QuantMeasure,
    bodies,
    failed,
    measure,
    probe_name,
    quant_cell,
)
from specdec.experiments.compat.send import fresh_connections
from specdec.experiments.compat.timing import DEFAULT_REPEATS
from specdec.experiments.compat.together import never
from specdec.http.urls import ClientSettings, parse_endpoint
from specdec.runfolder import server_log
from specdec.schemas.compat import CompatCell

TARGET_BITS = (4, 8, 16)
DRAFT_BITS = (4, 8)
#: The model name the cells' request bodies carry (llama-server serves the one model it loaded).
MODEL = "default"


def quant_arms(files: dict[int, QuantFile]) -> list[QuantArm]:
    return [QuantArm("draft-simple", files[b].gguf_type, b) for b in DRAFT_BITS] + [QuantArm("ngram-mod")]


def wanted(only: frozenset[str] | None, name: str) -> bool:
    """``--probe``: a cell's own name, or ``quantization`` for every quantization cell."""
    return only is None or QUANT_FEATURE in only or name in only


@dataclass
class QuantRun:
    cells: list[CompatCell] = field(default_factory=list)
    files: dict[str, Any] = field(default_factory=dict)  # GGUF type -> QuantFile.manifest()
    sent: list[dict[str, Any]] = field(default_factory=list)  # manifest traffic.probes entries
    servers: dict[str, Any] = field(default_factory=dict)  # probe -> both arms' server arguments


def run_quant(
    run_dir: Path,
    run_id: str,
    settings: ClientSettings,
    engine_version: str | None,
    timeout_s: float,
    echo: Callable[[str], None] = print,
    only: frozenset[str] | None = None,
    binary: Path | None = None,
    checkpoint: Callable[[], None] = never,
    repeats: int = DEFAULT_REPEATS,
) -> QuantRun:
    """Every wanted quantization cell (module docstring); ``checkpoint`` before each cell (``together``);
    ``repeats``: times each cell's prompts are sent per arm (--repeats)."""
    files = quantized_ggufs()
    out = QuantRun(files={f.gguf_type: f.manifest() for f in files.values()})
    for f in files.values():
        made = "made now" if f.made_now else "cached"
        echo(f"  quantization: {f.gguf_type} {f.sha256[:12]} ({f.made_by}, {made}): {f.path}")
    adapter = LlamaCpp(binary=binary, threads=PROBE_THREADS, context=2048, slots=1)
    refs: dict[str, classify.Acceptance] = {}
    for bits in TARGET_BITS:
        target = files[bits]
        arms = [a for a in quant_arms(files) if wanted(only, probe_name(target.gguf_type, a))]
        if not arms:
            continue
        tag = target.gguf_type.lower()
        with contextlib.ExitStack() as stack:
            base = LlamaServer(
                Arm("baseline", None),
                Path(target.path),
                server_log(run_dir, f"quant-{tag}-baseline"),
                adapter,
                timeout_s,
            )
            base_error = _start(stack, base)
            for arm in arms:
                checkpoint()
                name = probe_name(target.gguf_type, arm)
                spec_arm = Arm("speculative", _speculation(arm, files))
                log = server_log(run_dir, f"quant-{tag}-{arm.label}")
                spec = LlamaServer(spec_arm, Path(target.path), log, adapter, timeout_s)
                out.servers[name] = {"baseline_server_args": base.cmd[1:], "speculative_server_args": spec.cmd[1:]}
                out.sent.append({"probe": name, "feature": QUANT_FEATURE, "bodies": bodies(MODEL), "twin": None})
                with contextlib.ExitStack() as inner:
                    spec_error = None if base_error else _start(inner, spec)
                    m = _measure(run_id, name, base, spec, base_error, spec_error, settings, adapter, repeats)
                    checked = (
                        None if base_error or spec_error else _lossless(run_id, name, base, spec, settings, adapter)
                    )
                cell = quant_cell(
                    run_id, engine_version, (target.gguf_type, bits), arm, m, None if bits == 4 else refs.get(arm.label)
                )
                if checked is not None:  # after the speed's counters: the checks' drafts are not the cell's
                    cell = lossless_cells.with_lossless(cell, checked, NEAR_TIE)
                if bits == 4 and cell.draft_tokens is not None:
                    refs[arm.label] = classify.Acceptance(cell.draft_tokens, cell.accepted_tokens, cell.drafts)
                out.cells.append(cell)
                echo(f"  llama.cpp {name:<24} {cell.outcome:<11} {cell.detail}")
    return out


def _speculation(arm: QuantArm, files: dict[int, QuantFile]) -> dict[str, Any]:
    if arm.draft_bits is None:
        return {"type": arm.method}
    return {"type": arm.method, "draft_model": files[arm.draft_bits].path}


def _start(stack: contextlib.ExitStack, server: LlamaServer) -> str | None:
    """Start ``server`` on ``stack``; None, or why it did not start (the log's last lines)."""
    try:
        start_all(stack, [server])
    except SpecdecError as exc:
        return str(exc)
    return None


#: The lossless check's near-tie margin: a quantized GGUF has no dtype of its own (bfloat16's margin).
NEAR_TIE = lossless_cells.near_tie_threshold(None)


def _lossless(
    run_id: str, name: str, base: LlamaServer, spec: LlamaServer, settings: ClientSettings, adapter: LlamaCpp
) -> dict[str, lossless_cells.Classified] | str:
    """The lossless check on the cell's pair (``lossless_cells``, by the engine's own protocol:
    llama-server's /completion with n_probs)."""

    async def go() -> dict[str, lossless_cells.Classified] | str:
        async with aiohttp.ClientSession(connector=fresh_connections()) as session:
            return await lossless_cells.greedy_pairs(
                session,
                parse_endpoint(base.base_url),
                parse_endpoint(spec.base_url),
                MODEL,
                settings,
                f"compat.{run_id}.llama_cpp.{name}.lossless",
                adapter.lossless_protocol,
                NEAR_TIE,
            )

    return asyncio.run(go())


def _measure(
    run_id: str,
    name: str,
    base: LlamaServer,
    spec: LlamaServer,
    base_error: str | None,
    spec_error: str | None,
    settings: ClientSettings,
    adapter: LlamaCpp,
    repeats: int,
) -> QuantMeasure:
    if base_error is not None:
        return QuantMeasure(failed(base_error), failed("not started: the baseline did not start"), None, 0)

    async def go() -> QuantMeasure:
        async with aiohttp.ClientSession(connector=fresh_connections()) as session:
            return await measure(
                session,
                parse_endpoint(base.base_url),
                None if spec_error is not None else parse_endpoint(spec.base_url),
                settings,
                MODEL,
                f"compat.{run_id}.llama_cpp.{name}",
                adapter.counters,
                repeats=repeats,
            )

    m = asyncio.run(go())
    if spec_error is not None:
        m.speculative = failed(spec_error)
    return m
