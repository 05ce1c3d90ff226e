"""The sampling cells of the matrix (issue 43, item 2): does speculation leave the output
distribution unchanged at temperature > 0, one request at a time and with several in flight?

A report from the field (1Cat-vLLM #656): output silently corrupted above 2 concurrent sequences
at T > 0 while acceptance looked normal. The feature probes send one request at a time and judge
a sampled reply only by its own validity, so they cannot see it. Here, per level (``LEVELS``:
1 and 4 by default), each arm samples the same prompts with the same seeds (the replay's sampling
pass, ``replay/passes/sampling.py``: seeded, logprobs on, ``level`` requests in flight), every
sample of both arms is then scored again by teacher forcing on the baseline server
(``replay/passes/rescore.py``: one instrument for both arms), and the two arms' re-scored
log-probabilities are compared by the sampling pass's stratified permutation test (prompts as
strata; the CLI hands in ``specdec.analytics.sampling_check.compare``: ``replay`` does not import
``analytics``).

One cell per level, ``sampling_distribution.c<level>`` (feature ``sampling``):
- ``works``: the speculative arm drafted during its samples and some drafts were accepted (its
  counters moved) and the test does not reject the same distribution; the detail gives p and the smallest shift the test
  detects with 80% power (what "not rejected" can promise at this size);
- ``broken``: the test rejects it (p below its alpha): the speculative arm samples from another
  distribution than the target's;
- ``not tested``: nothing was drafted or accepted (or the server exports no speculation counter), the
  samples could not be re-scored (a server that reports no prompt token ids or prompt logprobs:
  vLLM's ``return_token_ids`` and ``prompt_logprobs``), too few pairs for the test, or no test
  was handed in;
- ``refused`` / ``not offered``: the speculative arm failed every sample while the baseline
  answered / the baseline failed every sample too.

The requests carry the probes' id scheme (``compat.<run>.<engine>.<probe>.<arm>.<n>``), and each
arm's counter differences around its own samples (before the re-scoring, which runs on the
baseline) are the cell's evidence, which ``capture_check`` reconciles with the capture as for any
probe. Cost at the default design (4 prompts x 6 seeds x 24 tokens per arm and level; the engine
test of the sampling pass showed a 0.7-temperature arm detected at z of about 7 with this many
samples): 96 sampled requests and 96 re-scorings per engine.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from specdec.experiments.compat.classify import counter
from specdec.schemas.compat import CompatCell, Outcome
from specdec.schemas.records import TrafficRow

if TYPE_CHECKING:  # heavy (aiohttp): the passes are imported when a run samples; the CLI reads LEVELS
    import aiohttp

    from specdec.experiments.compat.cells import Pair
    from specdec.http.urls import ClientSettings

FEATURE = "sampling"
NAME = "sampling_distribution"
#: Two open-ended prompts (many continuations are likely: a sampler's distribution shows in the samples)
#: and two that ask for a copy (at temperature 1 the model still copies much of the text, so prompt lookup
#: drafts and some drafts are accepted: the acceptance path of speculative sampling runs, not only the
#: rejection path). On vLLM CPU with the open-ended four alone, ngram proposed 20-24 tokens per level and
#: none was accepted (2026-12-06).
PROMPTS = (
    "Write a short story about a dragon.",
    "Tell me something about the ocean.",
    "Repeat this Python code exactly, with nothing else:\n\n"
    "def sum_of_squares(numbers):\n    total = 0\n    for n in numbers:\n        total += n * n\n    return total\n",
    "Repeat this list exactly, with nothing else:\n\n"
    "1. apples\n2. oranges\n3. pears\n4. plums\n5. cherries\n6. grapes\n7. lemons\n8. limes\n",
)
SEEDS = 6
MAX_TOKENS = 24
TEMPERATURE = 1.0
#: One request at a time, and a level of at least 4 (the field report's corruption began above 2).
LEVELS = (1, 4)
#: The seed list's base (``derive_seeds``): one list per level, the same in both arms.
SEED_BASE = 4300


def probe_name(level: int, name: str = NAME) -> str:
    """A cell's probe name: ``<name>.c<level>``."""
    return f"{name}.c{level}"


def wanted(only: frozenset[str] | None, levels: tuple[int, ...], name: str = NAME) -> tuple[int, ...]:
    """The levels to send of the cells called ``name``: all of ``levels`` unless ``only`` names
    probes, then those it names (``name`` itself names every level)."""
    if only is None or name in only:
        return levels
    return tuple(level for level in levels if probe_name(level, name) in only)


@dataclass(frozen=True)
class Test:
    """The sampling pass's test, handed in by the CLI (``replay`` does not import ``analytics``):
    ``compare(strata)`` with strata ``[(baseline values, speculative values)]`` per prompt returns
    a dict with ``p_value``, ``alpha``, ``mean_difference``, ``min_detectable_shift``, ``verdict``
    (``differs``/``same`` or None) and ``excluded_reason``; ``differs`` is the verdict that rejects."""

    compare: Callable[[list[tuple[list[float], list[float]]]], dict[str, Any]]
    differs: str


Read = Callable[[str], Awaitable[dict[str, Any] | None]]
Diff = Callable[[dict[str, Any] | None, dict[str, Any] | None], dict[str, Any] | None]


async def sampling_cells(
    session: aiohttp.ClientSession,
    pair: Pair,
    model: str,
    settings: ClientSettings,
    run_id: str,
    prefix: str,
    read: Read,
    diff: Diff,
    test: Test | None,
    levels: tuple[int, ...] = LEVELS,
    seeds: int = SEEDS,
) -> list[tuple[CompatCell, dict[str, Any]]]:
    """One cell per level with its evidence (per arm: request ids and counter differences), in
    ``levels`` order. ``read(arm)``: the arm's counters now (settled); ``diff``: their difference.
    ``prefix``: ``compat.<run>.<engine>`` (the probes' request-id scheme)."""
    from specdec.replay.passes.rescore import rescore_pass
    from specdec.replay.passes.sampling import derive_seeds, sample_pass

    rows = [
        TrafficRow(prompt_id=f"s{i}", category="chat", prompt=p, max_tokens=MAX_TOKENS, temperature=TEMPERATURE)
        for i, p in enumerate(PROMPTS)
    ]
    eps = {"baseline": pair.baseline, "speculative": pair.speculative}

    async def one_arm(arm: str, level: int, tag: str, seed_list: list[int]) -> tuple[list, dict[str, Any]]:
        before = await read(arm)
        got = await sample_pass(session, eps[arm], model, rows, level, lambda i: f"{tag}.{i}", settings, seed_list)
        ids = [res.sent.request_id for _row, res in got]
        return got, {"request_ids": ids, "counters": diff(before, await read(arm))}

    out = []
    untestable: tuple[Outcome, str] | None = None  # found at a level: no later level is sent
    for level in levels:
        name = probe_name(level)
        results: dict[str, list] = {arm: [] for arm in eps}
        evidence: dict[str, dict[str, Any]] = {arm: {"request_ids": [], "counters": None} for arm in eps}
        counters = None  # the speculative arm's around its samples, where they are the cell's evidence
        said = untestable  # the cell's outcome when it is not judged from its own samples
        if untestable is None:
            seed_list = derive_seeds(SEED_BASE + level, seeds)
            # both arms at once: each server is its own and a sample's distribution does not depend
            # on the time it took (no pair is timed here); each arm's counters around its own samples
            done = await asyncio.gather(*(one_arm(arm, level, f"{prefix}.{name}.{arm}", seed_list) for arm in eps))
            for arm, (got, ev) in zip(eps, done):
                results[arm], evidence[arm] = got, ev
            untestable = _untestable(results["baseline"], level)
            # a baseline that failed every sample says so in its own cell ('not offered'); a level
            # that cannot be re-scored says why ('not tested')
            said = untestable if untestable is not None and untestable[0] == "not tested" else None
            if said is None:
                counters = evidence["speculative"]["counters"]
            if untestable is None:  # one instrument for both arms: the baseline scores every sample
                await rescore_pass(
                    session,
                    pair.baseline,
                    model,
                    results["baseline"] + results["speculative"],
                    level,
                    settings,
                    by="baseline",
                )
        out.append((_cell(pair, run_id, name, level, results, counters, test, said), evidence))
    return out


def _untestable(baseline: list, level: int) -> tuple[Outcome, str] | None:
    """Why no level can be tested on this baseline, from its samples at ``level``: it reports no
    prompt token ids (nothing can be re-scored), or it failed every sample; None: it can."""
    from specdec.experiments.compat.cells import failure_text, passed

    answered = [res for _row, res in baseline if passed(res)]
    if answered and not any(res.prompt_token_ids for res in answered):
        return (
            "not tested",
            "the sampling distribution is not tested here: the baseline reports no prompt token ids "
            "(vLLM's return_token_ids), so no sample can be re-scored by teacher forcing on it",
        )
    if baseline and not answered:
        first = next((failure_text(res) for _row, res in baseline), "no reply")
        return "not offered", f"the baseline failed every seeded sample with logprobs at level {level}: {first}"
    return None


def _cell(
    pair: Pair,
    run_id: str,
    name: str,
    level: int,
    results: Mapping[str, list],
    counters: Mapping[str, Any] | None,
    test: Test | None,
    said: tuple[Outcome, str] | None = None,
) -> CompatCell:
    from specdec.experiments.compat.cells import first_failure, passed, untimed_cell

    ok = {arm: [res for _row, res in got if passed(res)] for arm, got in results.items()}
    drafted = counter(counters, "spec_num_draft_tokens")
    accepted = counter(counters, "spec_num_accepted_tokens")
    figures: dict[str, Any] = {}
    outcome: Outcome
    if said is not None:  # not judged from this level's own samples (``_untestable``)
        outcome, detail = said
    elif not ok["baseline"]:
        outcome, detail = (
            "not offered",
            f"the baseline failed every seeded sample: {first_failure(results['baseline'])}",
        )
    elif not ok["speculative"]:
        outcome, detail = (
            "refused",
            f"the speculative server failed every sample the baseline gave: {first_failure(results['speculative'])}",
        )
    else:
        outcome, detail, figures = _judge(results, level, drafted, accepted, test)
    return untimed_cell(
        pair,
        run_id,
        results,
        counters,
        "sampled: judged by the distribution test",
        feature=FEATURE,
        probe=name,
        output_constraint=(
            f"the same output distribution as the baseline at temperature {TEMPERATURE:g} with {level} request(s) "
            "in flight (the re-scored log-probability, permutation test)"
        ),
        identity_expected=False,
        identical=None,
        sampling_level=level,
        sampling_pairs=figures.get("pairs"),
        sampling_p_value=figures.get("p_value"),
        sampling_mean_difference=figures.get("mean_difference"),
        sampling_min_detectable_shift=figures.get("min_detectable_shift"),
        outcome=outcome,
        detail=detail,
    )


def _judge(
    results: Mapping[str, list], level: int, drafted: int | None, accepted: int | None, test: Test | None
) -> tuple[Outcome, str, dict[str, Any]]:
    """(outcome, detail, figures) of a level where both arms gave samples."""
    scored = {
        arm: {(row.prompt_id, res.sample_index): res.rescored_logprob_sum for row, res in got}
        for arm, got in results.items()
    }
    both = sorted(
        k for k, v in scored["baseline"].items() if v is not None and scored["speculative"].get(k) is not None
    )
    if not both:
        reason = next(
            (res.not_rescored_reason for got in results.values() for _row, res in got if res.not_rescored_reason),
            "no sample was re-scored",
        )
        return "not tested", f"the samples could not be re-scored by teacher forcing on the baseline: {reason}", {}
    strata: dict[str, tuple[list[float], list[float]]] = {}
    for prompt, index in both:
        b, s = strata.setdefault(prompt, ([], []))
        b.append(float(scored["baseline"][prompt, index]))
        s.append(float(scored["speculative"][prompt, index]))
    figures: dict[str, Any] = {"pairs": len(both)}
    if test is None:
        return "not tested", f"{len(both)} pairs of samples; no distribution test was run (not judged)", figures
    res = test.compare(list(strata.values()))
    figures |= {k: res.get(k) for k in ("p_value", "mean_difference", "min_detectable_shift")}
    at = f"{len(both)} pairs over {len(strata)} prompts at {level} in flight"
    if res.get("verdict") is None:
        return "not tested", f"{at}: {res.get('excluded_reason') or 'the test gave no verdict'}", figures
    p, alpha, shift = res["p_value"], res["alpha"], res["mean_difference"]
    if res["verdict"] == test.differs:
        return (
            "broken",
            f"samples off the target's distribution with speculation ({at}): the re-scored log-probability "
            f"differs by {shift:+.2f} nats, p = {p:.3g} < {alpha:g}",
            figures,
        )
    if not drafted:
        why = "the server exports no speculation counter" if drafted is None else "nothing was drafted"
        return "not tested", f"same distribution not rejected ({at}, p = {p:.3g}), but {why} while sampling", figures
    if not accepted:
        return (
            "not tested",
            f"same distribution not rejected ({at}, p = {p:.3g}), but none of the {drafted} drafted tokens was "
            "accepted: the acceptance path of speculative sampling did not run",
            figures,
        )
    mds = res.get("min_detectable_shift")
    power = f"; a shift of {mds:.2f} nats would be found 80% of the time" if mds is not None else ""
    return (
        "works",
        f"same distribution not rejected with speculation drafting ({at}): re-scored log-probability "
        f"{shift:+.2f} nats, p = {p:.3g}{power}",
        figures,
    )
