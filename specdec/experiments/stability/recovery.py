"""Does it recover, and is it still correct after? The kill-and-restart probe
and the greedy re-check of ``specdec stability``.

Greedy reference: before any fault, each of a few fixed prompts is sent twice,
one at a time (temperature 0, fixed max_tokens, ``ignore_eos``); the texts
seen are the reference. The second send matters: with prefix caching a
repeated prompt is computed from cached blocks, which may round differently,
so an output counts as unchanged when it equals either reference text. If the
two reference texts differ the detail says so.
"""

from __future__ import annotations

import asyncio

from specdec.errors import EngineError, SpecdecError
from specdec.experiments.stability.faults import (
    LONG_PROMPT,
    PLAIN_PROMPT,
    Finding,
    Probe,
    Target,
    answer,
    chat,
    clean,
    failure_label,
    long_tokens,
    say,
    wait_busy,
)

GREEDY_PROMPTS = (
    "Name the planets of the solar system in order.",
    "Write a haiku about a lighthouse.",
    "Explain in two sentences what a hash table is.",
)
GREEDY_TOKENS = 24
#: error types that say "the server went away" (anything but an unclassified client error)
TYPED_LOSS = frozenset(
    {"stream_truncated", "connect_error", "request_timeout", "stream_error", "no_usage", "bad_chunk", "connect_timeout"}
)


def greedy_payload(model: str, prompt: str) -> dict:
    return chat(model, prompt, GREEDY_TOKENS, temperature=0.0)


async def greedy_reference(t: Target) -> dict[str, list[str]]:
    """The texts of GREEDY_PROMPTS before any fault (two sends each, in order).
    A failure here means the server cannot serve plain requests: EngineError."""
    ref: dict[str, list[str]] = {}
    for prompt in GREEDY_PROMPTS:
        for _ in range(2):
            res = await t.send("greedy_reference", greedy_payload(t.model, prompt))
            if not res.success:
                raise EngineError(
                    f"{t.endpoint.display} does not answer a plain greedy request "
                    f"({say(answer(res))}: {clean(res.error_message, 200)}); nothing to probe. "
                    "Check the URL (no /v1 suffix), the model name and the API key."
                )
            ref.setdefault(prompt, []).append(res.output_text)
    return ref


def greedy_probe(reference: dict[str, list[str]], when: str) -> Probe:
    fault = "greedy_recheck"
    expected = "greedy outputs of fixed prompts equal those recorded before the faults"

    async def run(t: Target) -> Finding:
        changed, errors = [], []
        for prompt in GREEDY_PROMPTS:
            res = await t.send(fault, greedy_payload(t.model, prompt))
            if not res.success:
                errors.append(failure_label(res))
            elif res.output_text not in reference[prompt]:
                changed.append((prompt, res.output_text))
        unstable = sum(len(set(v)) > 1 for v in reference.values())
        n = len(GREEDY_PROMPTS)
        detail = f"{when}: {n - len(changed) - len(errors)}/{n} outputs unchanged"
        if changed:
            prompt, now = changed[0]
            detail += (
                f", {len(changed)} changed (first: {clean(prompt, 40)!r} gave {clean(reference[prompt][0], 60)!r}, "
                f"now {clean(now, 60)!r})"
            )
        if errors:
            detail += f", {len(errors)} request(s) failed ({', '.join(sorted(set(errors)))})"
        if unstable:
            detail += f"; note: {unstable} prompt(s) already gave two different outputs before any fault"
        return Finding("failed" if changed or errors else "ok", detail)

    return Probe(fault, expected, run)


def kill_restart_probe() -> Probe:
    fault = "kill_restart"
    expected = (
        "streams in flight when the server is killed (SIGKILL) fail with a typed error; "
        "the restarted server is healthy and serves"
    )

    async def run(t: Target) -> Finding:
        if not getattr(t.server, "restartable", False):
            return Finding(
                "skipped",
                f"{t.endpoint.display} is an endpoint specdec did not start, so it is not killed or restarted",
            )
        n = max(1, t.concurrency)
        tokens = long_tokens(t)
        tasks = [asyncio.create_task(t.send(fault, chat(t.model, LONG_PROMPT, tokens))) for _ in range(n)]
        busy = await wait_busy(t, lambda v: v >= n, 15.0)
        if busy is None:
            await asyncio.sleep(2.0)
        await t.server.kill()
        results = await asyncio.gather(*tasks)
        finished = sum(r.success for r in results)
        lost = [r for r in results if not r.success]
        untyped = [r for r in lost if r.error_type not in TYPED_LOSS]
        parts = [f"killed with {len(lost)} of {n} stream(s) in flight"]
        if lost:
            parts.append("they ended as " + ", ".join(sorted({failure_label(r) for r in lost})))
        if finished:
            parts.append(f"{finished} finished before the kill")
        try:
            await t.server.start()
        except SpecdecError as exc:
            parts.append(f"the restart failed: {clean(str(exc), 160)}")
            return Finding("failed", "; ".join(parts))
        follow = await t.send(fault, chat(t.model, PLAIN_PROMPT))
        parts.append("restarted; a normal request then " + say(answer(follow)))
        good = not untyped and follow.success and len(lost) > 0
        if not lost:
            parts.append("no stream was in flight at the kill, so the loss was not exercised")
        return Finding("ok" if good else "degraded", "; ".join(parts))

    return Probe(fault, expected, run)
