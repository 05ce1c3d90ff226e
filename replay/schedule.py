"""What is sent when: the order of a replay's blocks.

A *block* is one arm running one level's rows once (one repeat). The default
schedule interleaves the arms inside each repeat of each level, both servers
kept up (level 1: A B A B ..., then level 2: ...), so slow drift of the host
shows up as variance between repeats instead of as a bias of one arm. After a
level's timed repeats come its verification blocks (the lossless pass with
logprobs, kept apart so logprobs cannot perturb timing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Literal


@dataclass(frozen=True)
class Block:
    kind: Literal["timed", "verify"]
    arm: str
    level: int
    repeat: int


def interleaved(levels: list[int], repeats: int, arms: list[str], verify: bool) -> Iterator[Block]:
    for level in levels:
        for repeat in range(repeats):
            for arm in arms:
                yield Block("timed", arm, level, repeat)
        if verify:
            for arm in arms:
                yield Block("verify", arm, level, 0)
