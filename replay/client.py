"""One async streaming chat request against an OpenAI-compatible server.

A failed request becomes data (``success=False`` with ``error_type``), never an
exception out of the replay loop. Latencies use the monotonic clock; the send
time is also stamped on the wall clock for joining with engine traces.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import aiohttp

from specdec.schemas.records import TrafficRow


@dataclass
class StreamResult:
    request_id: str
    wall_send_ns: int
    success: bool = False
    error_type: str | None = None
    http_status: int | None = None
    error_message: str | None = None
    ttft_ms: float | None = None
    e2e_ms: float | None = None
    chunk_offsets_ms: list[float] = field(default_factory=list)
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    output_text: str = ""
    finish_reason: str | None = None
    spec_num_steps: int | None = None
    spec_num_draft_tokens: int | None = None
    spec_num_accepted_tokens: int | None = None


def build_payload(model: str, row: TrafficRow) -> dict:
    return {
        "model": model,
        "messages": [{"role": "user", "content": row.prompt}],
        "max_tokens": row.max_tokens,
        "temperature": row.temperature,
        "ignore_eos": True,  # vLLM extension: forces the fixed output length
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def stream_chat(
    session: aiohttp.ClientSession, base_url: str, model: str, row: TrafficRow, request_id: str,
    timeout_s: float = 600.0,
) -> StreamResult:
    res = StreamResult(request_id=request_id, wall_send_ns=time.time_ns())
    t0 = time.perf_counter_ns()
    text_parts: list[str] = []
    try:
        async with session.post(
            f"{base_url}/v1/chat/completions",
            json=build_payload(model, row),
            headers={"X-Request-Id": request_id},
            timeout=aiohttp.ClientTimeout(total=timeout_s),
        ) as resp:
            if resp.status != 200:
                body = (await resp.text())[:500]
                res.error_type, res.error_message = f"HTTP{resp.status}", body
                return res
            async for raw in resp.content:
                line = raw.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    break
                now_ms = (time.perf_counter_ns() - t0) / 1e6
                chunk = json.loads(data)
                if "error" in chunk:
                    res.error_type = "StreamError"
                    res.error_message = str(chunk["error"])[:500]
                    return res
                for choice in chunk.get("choices") or ():
                    content = (choice.get("delta") or {}).get("content")
                    if content:
                        if res.ttft_ms is None:
                            res.ttft_ms = now_ms
                        res.chunk_offsets_ms.append(now_ms)
                        text_parts.append(content)
                    if choice.get("finish_reason"):
                        res.finish_reason = choice["finish_reason"]
                usage = chunk.get("usage")
                if usage:
                    _read_usage(res, usage, chunk)
        res.e2e_ms = (time.perf_counter_ns() - t0) / 1e6
        res.success = True
    except Exception as exc:  # connection reset, timeout, bad JSON: a row, not a crash
        res.error_type = type(exc).__name__
        res.error_message = str(exc)[:500] or type(exc).__name__
    finally:
        res.output_text = "".join(text_parts)
    return res


def _read_usage(res: StreamResult, usage: dict, chunk: dict) -> None:
    res.prompt_tokens = usage.get("prompt_tokens")
    res.output_tokens = usage.get("completion_tokens")
    # vLLM puts per-request speculative metrics beside usage in the final chunk
    metrics = chunk.get("metrics") or usage.get("metrics") or {}
    spec = metrics.get("speculative_decoding") if isinstance(metrics, dict) else None
    if spec:
        res.spec_num_steps = spec.get("num_spec_steps")
        res.spec_num_draft_tokens = spec.get("num_draft_tokens")
        res.spec_num_accepted_tokens = spec.get("num_accepted_draft_tokens")
