"""Are the sampling check's samples distinct across seeds?

A sample is one seed's output for one prompt. An arm that ignores the seed
(every seed the same output) has no distribution to compare: its samples are
one draw repeated. Comparing it with the other arm would call a seed-handling
fault a distribution defect, or hide one. So before the distribution test
(``sampling_check.py``) each arm's samples are checked, per prompt:

- ``distinct_share``: distinct generated token sequences / samples, at a
  prompt with at least 2 samples; per arm, the mean over such prompts (1.0:
  every seed gave its own sequence; 1/n: all n the same).
- ``not_distinct_prompts``: the prompts (with at least 2 samples) whose
  samples are all one sequence.
- **not distinct** (the group's verdict becomes ``NOT_DISTINCT``): at some
  prompt one arm's samples are all one sequence while at least half of the
  other arm's are distinct (``SHARE_OTHER``): that arm ignores the seed; or
  every prompt gave one sequence in both arms: no randomness reached the
  output (seed or temperature ignored by both, or a prompt set too peaked to
  test). A prompt whose distribution is that peaked gives mostly repeated
  sequences in both arms, so the rule does not fire on it.

Unknown (``None`` everywhere, never flagged) when a sample's token ids are
missing (files written before they were recorded).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

__all__ = ["NOT_DISTINCT", "SHARE_OTHER", "Distinctness", "distinctness"]

NOT_DISTINCT = "samples not distinct"
#: The other arm's share of distinct sequences at a prompt above which one arm's single sequence means "seed ignored".
SHARE_OTHER = 0.5


@dataclass(frozen=True)
class Distinctness:
    per_arm: dict[str, dict]  # arm -> {"distinct_share": float | None, "not_distinct_prompts": int | None}
    not_distinct: bool


def _counts(samples: list[tuple[str, list[int]]]) -> dict[str, tuple[int, int]]:
    """Prompt -> (distinct sequences, samples), for prompts with at least 2 samples."""
    seqs: dict[str, list[tuple[int, ...]]] = defaultdict(list)
    for prompt, ids in samples:
        seqs[prompt].append(tuple(ids))
    return {p: (len(set(s)), len(s)) for p, s in seqs.items() if len(s) >= 2}


def distinctness(arms: dict[str, list[tuple[str, list[int] | None]]]) -> Distinctness:
    """``arms``: arm -> (prompt_id, token ids) of its samples used in the test."""
    if any(ids is None for samples in arms.values() for _, ids in samples):
        return Distinctness({arm: {"distinct_share": None, "not_distinct_prompts": None} for arm in arms}, False)
    counts = {arm: _counts([(p, ids) for p, ids in samples if ids is not None]) for arm, samples in arms.items()}
    per_arm = {
        arm: {
            "distinct_share": (sum(k / n for k, n in c.values()) / len(c)) if c else None,
            "not_distinct_prompts": sum(k == 1 for k, _ in c.values()),
        }
        for arm, c in counts.items()
    }
    return Distinctness(per_arm, _seed_ignored(counts) or _nothing_random(counts))


def _seed_ignored(counts: dict[str, dict[str, tuple[int, int]]]) -> bool:
    """At some prompt, one arm's samples are one sequence and the other's at least SHARE_OTHER distinct."""
    for arm, by_prompt in counts.items():
        for other, theirs in counts.items():
            if other == arm:
                continue
            for p, (k, _) in by_prompt.items():
                if k == 1 and p in theirs and theirs[p][0] / theirs[p][1] >= SHARE_OTHER:
                    return True
    return False


def _nothing_random(counts: dict[str, dict[str, tuple[int, int]]]) -> bool:
    """Every prompt (with at least 2 samples) one sequence in every arm."""
    ks = [k for by_prompt in counts.values() for k, _ in by_prompt.values()]
    return bool(ks) and all(k == 1 for k in ks)
