"""What is sent when: the order of a replay's blocks.

A *block* is one arm running one level's rows once (one repeat). The default
schedule interleaves the arms inside each repeat of each level, all servers
kept up, and counterbalances their order (level 1: A B, B A, A B, ...; then
level 2), so slow drift of the host shows up as variance between repeats
instead of as a bias of one arm, and neither arm always goes first after a
level change. (An A/A run on this machine showed the second block of a pair
about 5% faster at level 2 in both repeats with a fixed A B order.) Then the
sampling-mode blocks, when the traffic has rows with temperature > 0: each
such prompt sent once per seed of a fixed list, the same list in every arm. After a
level's timed repeats come its verification blocks (the lossless pass with
logprobs, kept apart so logprobs cannot perturb timing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Literal


@dataclass(frozen=True)
class Block:
    kind: Literal["timed", "verify", "sample"]
    arm: str
    level: int
    repeat: int


def interleaved(levels: list[int], repeats: int, arms: list[str], verify: bool,
                sample: bool = False) -> Iterator[Block]:
    for level in levels:
        for repeat in range(repeats):
            for arm in (arms if repeat % 2 == 0 else arms[::-1]):
                yield Block("timed", arm, level, repeat)
        if verify:
            for arm in arms:
                yield Block("verify", arm, level, 0)
        if sample:
            for arm in arms:
                yield Block("sample", arm, level, 0)
