"""What is sent when: the order of a replay's blocks.

A *block* is one arm running one level's rows once (one repeat). The default
schedule interleaves the arms inside each repeat of each level, all servers
kept up, and counterbalances their order (level 1: A B, B A, A B, ...; then
level 2), so slow drift of the host shows up as variance between repeats
instead of as a bias of one arm, and neither arm always goes first after a
level change. (An A/A run on this machine showed the second block of a pair
about 5% faster at level 2 in both repeats with a fixed A B order.) With an
odd number of repeats a level cannot be balanced (5 repeats: 3 to 2), so the
arm with the extra first place alternates from level to level (level 1: A
first 3 times, level 2: B first 3 times, ...) and the order is balanced over
the run within one block pair; the intervals fit the order as a fixed effect
(``analytics/variance.level_noise``), which removes the rest of it: the
second block of a pair ran 3-6% slower in every series of the demo run of
2026-12-06 (issue 41). Then the
sampling-mode blocks, when the traffic has rows with temperature > 0: each
such prompt sent once per seed of a fixed list, the same list in every arm. After a
level's timed repeats come its pass blocks (the lossless pass with
logprobs, kept apart so logprobs cannot perturb timing).

With fresh servers per repeat (``--restart-servers repeat``, the embedded
default), the order is repeat-major instead: a ``restart`` block, then every
level of that repeat (arms counterbalanced by repeat and level, so at 2 repeats
each level has each arm first once, and at an odd number the extra first place
alternates between levels), and the lossless-pass and sampling-pass blocks
of every level after the last repeat. A server process has a speed of its own:
two consecutive demo runs had the same baseline server configuration at
2250 ms and 2530 ms per code request at level 1 (12%) while the speculative
arm stayed at 1000 ms, so a run on one pair of processes reports that pair's
difference. Restarting between repeats puts that variation between repeats,
where the intervals see it, at the cost of one server start per arm per repeat
(repeat-major, so not one per level).

A sequential run (``max_repeats``, ``replay/load/sequential_loop.py``) is
repeat-major too, generated one repeat at a time by ``repeat_blocks``: after
each look only the levels still open run again, each keeping the arm order it
has in the fixed design (by its index among all the run's levels, not among
the open ones), so closing a level changes no other level's order.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Block:
    kind: Literal["timed", "lossless_pass", "sampling_pass", "restart"]
    arm: str
    level: int
    repeat: int


def interleaved(
    levels: list[int], repeats: int, arms: list[str], lossless: bool, sample: bool = False, restart: bool = False
) -> Iterator[Block]:
    if restart:
        yield from _repeat_major(levels, repeats, arms, lossless, sample)
        return
    for i, level in enumerate(levels):
        for repeat in range(repeats):
            for arm in arms if (repeat + i * (repeats % 2)) % 2 == 0 else arms[::-1]:
                yield Block("timed", arm, level, repeat)
        yield from _passes(level, arms, lossless, sample)


def _repeat_major(levels: list[int], repeats: int, arms: list[str], lossless: bool, sample: bool) -> Iterator[Block]:
    for repeat in range(repeats):
        if repeat:
            yield Block("restart", "", 0, repeat)
        yield from repeat_blocks(levels, levels, repeat, arms)
    yield from pass_blocks(levels, arms, lossless, sample)


def repeat_blocks(levels_open: list[int], all_levels: list[int], repeat: int, arms: list[str]) -> Iterator[Block]:
    """The timed blocks of one repeat of a repeat-major schedule, for the levels of
    ``levels_open`` in the order of ``all_levels``: the arms counterbalanced by repeat
    and by the level's index in ``all_levels`` (A B, B A, ...)."""
    for i, level in enumerate(all_levels):
        if level in levels_open:
            for arm in arms if (repeat + i) % 2 == 0 else arms[::-1]:
                yield Block("timed", arm, level, repeat)


def pass_blocks(levels: list[int], arms: list[str], lossless: bool, sample: bool) -> Iterator[Block]:
    """Every level's untimed passes, level by level, after the last repeat of a repeat-major run."""
    for level in levels:
        yield from _passes(level, arms, lossless, sample)


def _passes(level: int, arms: list[str], lossless: bool, sample: bool) -> Iterator[Block]:
    """A level's untimed passes, per arm: the lossless pass, then the sampling pass."""
    passes: tuple[tuple[Literal["lossless_pass", "sampling_pass"], bool], ...] = (
        ("lossless_pass", lossless),
        ("sampling_pass", sample),
    )
    for kind, wanted in passes:
        if wanted:
            for arm in arms:
                yield Block(kind, arm, level, 0)
