"""Benchmark: what does the recording proxy add to time to first token and to
the gaps between streamed chunks?

Against a local streaming stub (always; its own process) and, with
``--engine``, the embedded vLLM engine: the same streamed chat request is sent
directly and through `specdec-capture proxy` (its own process, recording in
hash mode into a temporary folder), one request at a time, the order
alternating per pair (direct/proxy, proxy/direct, ...) so drift hits both.
Every SSE event's arrival is taken on the client's monotonic clock.

Prints, per target, p50/p90/p99 of TTFT and of chunk gaps, direct and through
the proxy side by side, the added p50 (proxy - direct) and the median of the
per-pair TTFT differences; then one JSON line of every figure. Goal
(issue 7): at most 1 ms added at p50.

    .venv/bin/python benchmarks/proxy_overhead.py [--pairs 200] [--chunks 64] [--gap-ms 2] [--engine]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import aiohttp

CHAT = "/v1/chat/completions"


# ---------------------------------------------------------------- the stub
def serve_stub(port: int, chunks: int, gap_ms: float, first_ms: float) -> None:
    """An SSE server shaped like vLLM's stream: role chunk, content chunks, usage, [DONE]."""
    from aiohttp import web

    def event(obj) -> bytes:
        return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"

    head = {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": 1, "model": "stub"}

    async def chat(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await asyncio.sleep(first_ms / 1000)
        await resp.write(event({**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}))
        for i in range(chunks):
            last = i == chunks - 1
            await resp.write(
                event(
                    {
                        **head,
                        "choices": [
                            {"index": 0, "delta": {"content": f" tok{i}"}, "finish_reason": "length" if last else None}
                        ],
                    }
                )
            )
            if not last:
                await asyncio.sleep(gap_ms / 1000)
        await resp.write(event({**head, "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": chunks}}))
        await resp.write(b"data: [DONE]\n\n")
        return resp

    app = web.Application()
    app.router.add_post(CHAT, chat)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def wait_up(url: str, timeout_s: float = 60) -> None:
    import urllib.error

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1)
            return
        except urllib.error.HTTPError:
            return  # it answers
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"{url} did not come up")


# ---------------------------------------------------------------- the client
async def one(session: aiohttp.ClientSession, base: str, body: dict) -> tuple[float, list[float]]:
    """(TTFT ms: send to the first content event, gaps ms between content events)."""
    t0 = time.perf_counter_ns()
    times = []
    async with session.post(base + CHAT, json=body) as r:
        if r.status != 200:
            raise SystemExit(f"{base}: HTTP {r.status}: {await r.text()}")
        async for line in r.content:
            if line.startswith(b"data: {") and b'"content":"' in line and b'"content":""' not in line:
                times.append(time.perf_counter_ns())
    if not times:
        raise SystemExit(f"{base}: no content events")
    ms = [(t - t0) / 1e6 for t in times]
    return ms[0], [b - a for a, b in zip(ms, ms[1:])]


async def compare(direct: str, proxy: str, body: dict, pairs: int, warmup: int = 5) -> dict:
    out = {"direct": {"ttft": [], "gaps": []}, "proxy": {"ttft": [], "gaps": []}}
    async with aiohttp.ClientSession() as session:
        for _ in range(warmup):
            await one(session, direct, body)
            await one(session, proxy, body)
        for i in range(pairs):
            order = (("direct", direct), ("proxy", proxy)) if i % 2 == 0 else (("proxy", proxy), ("direct", direct))
            for name, base in order:
                ttft, gaps = await one(session, base, body)
                out[name]["ttft"].append(ttft)
                out[name]["gaps"].extend(gaps)
    return out


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(q / 100 * (len(values) - 1)))]


def figures(m: dict) -> dict:
    res = {}
    for metric in ("ttft", "gaps"):
        for name in ("direct", "proxy"):
            for q in (50, 90, 99):
                res[f"{metric}_{name}_p{q}_ms"] = round(pct(m[name][metric], q), 4)
        res[f"{metric}_added_p50_ms"] = round(res[f"{metric}_proxy_p50_ms"] - res[f"{metric}_direct_p50_ms"], 4)
    res["ttft_paired_median_diff_ms"] = round(
        statistics.median(p - d for p, d in zip(m["proxy"]["ttft"], m["direct"]["ttft"])), 4
    )
    res["requests_per_side"] = len(m["direct"]["ttft"])
    res["gaps_per_side"] = len(m["direct"]["gaps"])
    return res


def show(target: str, f: dict) -> None:
    print(f"\n{target}: {f['requests_per_side']} requests per side, {f['gaps_per_side']} chunk gaps per side")
    print(f"{'':14}{'direct':>10}{'proxy':>10}{'added':>10}   (ms)")
    for metric in ("ttft", "gaps"):
        for q in (50, 90, 99):
            d, p = f[f"{metric}_direct_p{q}_ms"], f[f"{metric}_proxy_p{q}_ms"]
            print(f"{metric + ' p' + str(q):14}{d:10.3f}{p:10.3f}{p - d:10.3f}")
    print(f"ttft, median of per-pair differences: {f['ttft_paired_median_diff_ms']:.3f} ms")


# ---------------------------------------------------------------- main
def start_proxy(upstream: str, out_dir: Path) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "specdec.cli.capture",
            "proxy",
            "--upstream",
            upstream,
            "--listen",
            "127.0.0.1:0",
            "--out",
            str(out_dir),
            "--content",
            "hash",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    if "listening on " not in line:
        proc.kill()
        raise SystemExit(f"the proxy did not start: {line!r}")
    return proc, line.split("listening on ")[1].split()[0]


def run_target(upstream: str, body: dict, pairs: int, tmp: Path, tag: str) -> dict:
    proc, proxy = start_proxy(upstream, tmp / f"recorded-{tag}")
    try:
        m = asyncio.run(compare(upstream, proxy, body, pairs))
        with urllib.request.urlopen(proxy + "/specdec/stats", timeout=5) as r:
            stats = json.loads(r.read())
    finally:
        proc.send_signal(2)
        proc.wait(30)
    f = figures(m)
    f["recording_failures"] = stats["recording"]["failures_total"]
    f["rows_recorded"] = stats["recording"]["rows_recorded"]
    return f


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=200)
    ap.add_argument("--chunks", type=int, default=64, help="Stub: content chunks per response.")
    ap.add_argument("--gap-ms", type=float, default=2.0, help="Stub: time between chunks.")
    ap.add_argument("--first-ms", type=float, default=5.0, help="Stub: time to the first chunk.")
    ap.add_argument("--engine", action="store_true", help="Also measure against the embedded vLLM engine.")
    ap.add_argument("--engine-pairs", type=int, default=20)
    ap.add_argument("--max-tokens", type=int, default=32, help="Engine: forced output length.")
    ap.add_argument("--serve-stub", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_stub is not None:
        return serve_stub(args.serve_stub, args.chunks, args.gap_ms, args.first_ms)

    from specdec.engines.server import free_port

    result: dict = {"benchmark": "proxy_overhead", "goal_added_p50_ms": 1.0}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        port = free_port()
        stub = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--serve-stub",
                str(port),
                "--chunks",
                str(args.chunks),
                "--gap-ms",
                str(args.gap_ms),
                "--first-ms",
                str(args.first_ms),
            ]
        )
        try:
            upstream = f"http://127.0.0.1:{port}"
            wait_up(upstream + CHAT)
            body = {"model": "stub", "stream": True, "messages": [{"role": "user", "content": "Say something."}]}
            result["stub"] = {
                "chunks": args.chunks,
                "gap_ms": args.gap_ms,
                "first_ms": args.first_ms,
                **run_target(upstream, body, args.pairs, tmp, "stub"),
            }
            show(f"stub ({args.chunks} chunks, {args.gap_ms} ms apart)", result["stub"])
        finally:
            stub.terminate()
            stub.wait(10)
        if args.engine:
            from specdec.engines.vllm import ServerSpec, VllmServer
            from specdec.model import prepare_model

            spec = ServerSpec(model=str(prepare_model().path), dtype="bfloat16", prefix_cache="off")
            with VllmServer(spec, None, tmp / "capture", "bench", tmp / "server.log") as srv:
                body = {
                    "model": "specdec-target",
                    "stream": True,
                    "temperature": 0,
                    "ignore_eos": True,
                    "max_tokens": args.max_tokens,
                    "messages": [{"role": "user", "content": "Write a short story about a lighthouse."}],
                }
                result["engine"] = {
                    "max_tokens": args.max_tokens,
                    **run_target(srv.base_url, body, args.engine_pairs, tmp, "engine"),
                }
                show(f"embedded vLLM engine ({args.max_tokens} tokens)", result["engine"])
    print(json.dumps(result))


if __name__ == "__main__":
    main()
