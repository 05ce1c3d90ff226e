"""A synthetic run for the planner, with known acceptance and exactly linear step costs.

Blocks as ``synthetic_run.repeated_requests`` (levels 1, 2, 4; two repeats; prompts code-0,
code-1, chat-0, chat-1). Within a block the requests run in groups of ``level`` in lockstep:
one prefill step per group (left out of the fit), then one decode step per row of
``DECODE`` (the baseline: the same number of rows with k = 0). Every decode step's timing is
exact::

    verify_ms = V0 + V1 * B + V2 * D      B = the group's size, D = sum of k over its rows
    draft_ms  = D0 + D1 * B               speculative arm only

so the least-squares fit recovers the coefficients and the planner's predictions follow by
hand from ``DECODE``. ``e2e(arm, prompt, level, repeat)`` ms (TTFT = e2e / 100) is free.
"""

from __future__ import annotations

from pathlib import Path

from specdec.schemas.records import RoundTrace
from tests.support.synthetic_run import (
    PROMPTS,
    RUN,
    T0,
    blocks,
    make_manifest,
    repeated_counters,
    repeated_requests,
    write_run,
)

LEVELS = (1, 2, 4)
REPEATS = 2
V0, V1, V2 = 10.0, 2.0, 0.5
D0, D1 = 1.0, 0.25
K = 4
#: decode rows (k, a) per prompt of the speculative arm
DECODE = {
    "code-0": [(4, 4), (4, 3), (4, 4), (0, 0)],
    "code-1": [(4, 2), (4, 4), (4, 1), (4, 4)],
    "chat-0": [(4, 1), (4, 0), (4, 2), (0, 0)],
    "chat-1": [(4, 0), (4, 1), (4, 0), (4, 0)],
}
CATEGORY = dict(PROMPTS)


def verify_ms(batch: int, drafts: int) -> float:
    return V0 + V1 * batch + V2 * drafts


def draft_ms(batch: int) -> float:
    return D0 + D1 * batch


def make_rounds(levels=LEVELS, repeats: int = REPEATS) -> list[RoundTrace]:
    rows: list[RoundTrace] = []
    step = 0
    for arm, level, r, _start in blocks(levels, repeats):
        pid = 1 if arm == "baseline" else 2
        token = f"{pid}-{r:08x}"
        ids = [f"chatcmpl-sd.{RUN}.{arm}.c{level}.r{r}.{seq:05d}-0123abcd" for seq in range(len(PROMPTS))]
        for g in range(0, len(PROMPTS), level):
            group = list(range(g, min(g + level, len(PROMPTS))))
            batch = len(group)
            step += 1
            for seq in group:
                rows.append(_row(ids[seq], pid, token, step, 0, "prefill", 0, 0, batch, 99.0, None))
            for rnd in range(len(DECODE["code-0"])):
                step += 1
                pairs = [DECODE[PROMPTS[s][0]][rnd] if arm == "speculative" else (0, 0) for s in group]
                drafts = sum(k for k, _ in pairs)
                v = verify_ms(batch, drafts)
                d = draft_ms(batch) if arm == "speculative" else None
                for seq, (k, a) in zip(group, pairs):
                    rows.append(_row(ids[seq], pid, token, step, rnd + 1, "decode", k, a, batch, v, d))
    return rows


def _row(eid, pid, token, step, rnd, phase, k, a, batch, verify, draft) -> RoundTrace:
    return RoundTrace(
        run_id=RUN,
        engine_request_id=eid,
        pid=pid,
        process_token=token,
        step_index=step,
        round_index=rnd,
        phase=phase,
        tokens_proposed=k,
        tokens_accepted=a,
        tokens_emitted=a + 1,
        batch_size=batch,
        num_scheduled_tokens=10 if phase == "prefill" else 1 + k,
        context_len=10 + rnd,
        draft_ms=draft,
        verify_ms=verify,
        wall_time_ns=T0 + step,
    )


def write_plan_run(run_dir: Path, e2e=lambda arm, prompt, level, repeat: 1000.0) -> Path:
    return write_run(
        run_dir,
        repeated_counters(levels=LEVELS, repeats=REPEATS),
        requests=repeated_requests(e2e, levels=LEVELS, repeats=REPEATS),
        rounds=make_rounds(),
        manifest=make_manifest(concurrency_levels=list(LEVELS)),
    )


def expected_tau(category: str, k: int) -> float:
    """tau(k) by hand: mean over the category's decode rows (each prompt's rows repeat in every block)."""
    rows = [ka for p, c in PROMPTS if c == category for ka in DECODE[p]]
    return sum(1 + min(a, k) for _, a in rows) / len(rows)


def expected_dbar(category: str, k: int) -> float:
    rows = [ka for p, c in PROMPTS if c == category for ka in DECODE[p]]
    return sum(min(kk, k) for kk, _ in rows) / len(rows)


def expected_speedup(category: str, k: int, batch: int) -> float:
    step0 = verify_ms(batch, 0)
    stepk = V0 + V1 * batch + V2 * batch * expected_dbar(category, k) + (draft_ms(batch) if k else 0.0)
    return expected_tau(category, k) * step0 / stepk
