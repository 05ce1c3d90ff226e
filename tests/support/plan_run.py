"""A synthetic run for the planner, with known acceptance and exactly linear step costs.

Arms: the classic pair (``CLASSIC``: baseline k = 0, speculative k = 4) or a sweep (``SWEEP``:
k0, k2, k4, as ``specdec-replay --sweep-k 0,2,4`` names them). Levels 1, 2, 4; two repeats;
prompts code-0, code-1, chat-0, chat-1; per (level, repeat) every arm runs one block, blocks
100 s apart, each block's requests sent at its start. Within a block the requests run in
groups of ``level`` in lockstep: one prefill step per group (left out of the fit), then one
decode step per row of ``DECODE``, truncated at the arm's k (an arm at k proposes min(k_r, k)
and accepts min(a_r, k); k = 0: rows (0, 0)). The planner predicts acceptance from the largest
k's rows (``expected_tau``: its re-segmentation by hand); a smaller k's rows feed only the step
fit, where they need not be realistic, only exactly timed. Every decode
step's timing is exact::

    verify_ms = V0 + V1 * B + V2 * D          B = the group's size, D = sum of k over its rows
    draft_ms  = D0 + D1 * B + d2 * B * k      arms with k > 0 (d2: D2 in a sweep, 0 in the classic run)

so the least-squares fits recover the coefficients and the planner's predictions follow by
hand from ``DECODE``. ``e2e(arm, prompt, level, repeat)`` ms (TTFT = e2e / 100) is free.
"""

from __future__ import annotations

from pathlib import Path

from specdec.schemas.records import ArmConfig, MetricSnapshot, RequestResult, RoundTrace
from tests.support.synthetic_run import (
    PROMPTS,
    SEC,
    counter_row,
    make_manifest,
    repeat_request_id,
    repeated_requests,
    round_row,
    write_run,
)
from tests.support.synthetic_run import blocks as synthetic_blocks

LEVELS = (1, 2, 4)
REPEATS = 2
V0, V1, V2 = 10.0, 2.0, 0.5
D0, D1, D2 = 1.0, 0.25, 0.1
K = 4
CLASSIC = {"baseline": 0, "speculative": 4}
SWEEP = {"k0": 0, "k2": 2, "k4": 4}
#: decode rows (k, a) per prompt at k = 4
DECODE = {
    "code-0": [(4, 4), (4, 3), (4, 4), (0, 0)],
    "code-1": [(4, 2), (4, 4), (4, 1), (4, 4)],
    "chat-0": [(4, 1), (4, 0), (4, 2), (0, 0)],
    "chat-1": [(4, 0), (4, 1), (4, 0), (4, 0)],
}
CATEGORY = dict(PROMPTS)


def verify_ms(batch: int, drafts: int) -> float:
    return V0 + V1 * batch + V2 * drafts


def draft_ms(batch: int, k: int = K, d2: float = 0.0) -> float:
    return D0 + D1 * batch + d2 * batch * k


def blocks(arms: dict[str, int]):
    return synthetic_blocks(LEVELS, REPEATS, tuple(arms))


def make_requests(arms: dict[str, int], e2e) -> list[RequestResult]:
    return repeated_requests(e2e, levels=LEVELS, repeats=REPEATS, arms=tuple(arms))


def make_counters(arms: dict[str, int]) -> list[MetricSnapshot]:
    return [
        counter_row(arm, level, pos, start + (50 * SEC if pos == "after" else 0), repeat=r)
        for arm, level, r, start in blocks(arms)
        for pos in ("before", "after")
    ]


def make_rounds(arms: dict[str, int], d2: float = 0.0) -> list[RoundTrace]:
    rows: list[RoundTrace] = []
    step = 0
    for arm, level, r, _start in blocks(arms):
        k_arm = arms[arm]
        pid = list(arms).index(arm) + 1
        token = f"{pid}-{r:08x}"
        ids = [f"chatcmpl-{repeat_request_id(arm, level, r, seq)}-0123abcd" for seq in range(len(PROMPTS))]
        for g in range(0, len(PROMPTS), level):
            group = list(range(g, min(g + level, len(PROMPTS))))
            batch = len(group)
            step += 1
            for seq in group:
                rows.append(_row(ids[seq], pid, token, step, 0, "prefill", 0, 0, batch, 99.0, None))
            for rnd in range(len(DECODE["code-0"])):
                step += 1
                pairs = [(min(k, k_arm), min(a, k_arm)) for k, a in (DECODE[PROMPTS[s][0]][rnd] for s in group)]
                drafts = sum(k for k, _ in pairs)
                v = verify_ms(batch, drafts)
                d = draft_ms(batch, k_arm, d2) if k_arm else None
                for seq, (k, a) in zip(group, pairs):
                    rows.append(_row(ids[seq], pid, token, step, rnd + 1, "decode", k, a, batch, v, d))
    return rows


def _row(eid, pid, token, step, rnd, phase, k, a, batch, verify, draft) -> RoundTrace:
    return round_row(
        eid, pid, step, rnd, k, a, phase, process_token=token, batch_size=batch, verify_ms=verify, draft_ms=draft
    )


def _manifest(arms: dict[str, int], traffic: Path | None = None, margin: float | None = None):
    configs = []
    for name, k in arms.items():
        spec = {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_max": 4} if k else None
        args = ["--model", "m"] + (["--speculative-config", str(spec)] if spec else [])
        configs.append(
            ArmConfig(name=name, speculative_config=spec, server_args=args, endpoint="http://127.0.0.1:8001")
        )
    extra: dict = {"traffic": {"path": str(traffic), "rows": 4, "categories": ["chat", "code"]}} if traffic else {}
    if margin is not None:
        extra["margin"] = margin
    return make_manifest(levels=list(LEVELS), arms=configs, **extra)


def write_plan_run(
    run_dir: Path,
    e2e=lambda arm, prompt, level, repeat: 1000.0,
    arms: dict[str, int] = CLASSIC,
    d2: float = 0.0,
    traffic: Path | None = None,
    margin: float | None = None,
) -> Path:
    """The run folder (``traffic``: the traffic file its manifest names, for a validation replay;
    ``margin``: the manifest's, else the default)."""
    return write_run(
        run_dir,
        make_counters(arms),
        requests=make_requests(arms, e2e),
        rounds=make_rounds(arms, d2),
        manifest=_manifest(arms, traffic, margin),
    )


def repeats_apart(arm, prompt, level, repeat):
    """e2e: the speculative arm 5% slower in each repeat than in the one before: a measurement noise
    above 0, so every prediction interval has a width (a replay that measures the point exactly, to
    the last bit of a float, is not what a zero-width interval could be held to)."""
    return 1000.0 * (1 + 0.05 * repeat) if arm == "speculative" else 1000.0


def write_validation_run(root: Path) -> Path:
    """A classic run under ``root``/run whose manifest names a one-row traffic file (``root``/mix.jsonl),
    its repeats apart (``repeats_apart``): what a validation replays."""
    traffic = root / "mix.jsonl"
    traffic.write_text('{"prompt_id": "code-0", "category": "code", "prompt": "x", "max_tokens": 4}\n')
    (root / "run").mkdir()
    return write_plan_run(root / "run", e2e=repeats_apart, traffic=traffic)


def _resegmented(category: str, k: int) -> tuple[int, int, int]:
    """The category's captured rows (at K) at k by hand: (tokens, rounds, drafts) with each row
    (k_r, a_r) making a_r + 1 tokens in a_r // (k + 1) + 1 rounds of min(k_r, k) drafts each."""
    rows = [row for p, c in PROMPTS if c == category for row in DECODE[p]]
    split = [(a // (k + 1) + 1, min(kk, k)) for kk, a in rows]
    return sum(1 + a for _, a in rows), sum(n for n, _ in split), sum(n * d for n, d in split)


def expected_tau(category: str, k: int) -> float:
    """tau(k) by hand (the model's re-segmentation of the K = 4 capture; each prompt's rows repeat in
    every block)."""
    tokens, rounds, _ = _resegmented(category, k)
    return tokens / rounds


def expected_dbar(category: str, k: int) -> float:
    _, rounds, drafts = _resegmented(category, k)
    return drafts / rounds


def expected_dbar_mix(k: int) -> float:
    """The drafts per request of a step's batch: every category's rows pooled (the run's mix)."""
    parts = [_resegmented(c, k) for c in sorted(set(CATEGORY.values()))]
    return sum(d for _, _, d in parts) / sum(r for _, r, _ in parts)


def expected_speedup(category: str, k: int, batch: int, d2: float = 0.0) -> float:
    """The model's speedup by hand (with one captured k, d2 = 0: the draft cost does not depend on k).
    Both arms run the same lockstep groups, so the speculative arm's batch is the baseline's."""
    step0 = verify_ms(batch, 0)
    stepk = V0 + V1 * batch + V2 * batch * expected_dbar_mix(k) + (draft_ms(batch, k, d2) if k else 0.0)
    return expected_tau(category, k) * step0 / stepk
