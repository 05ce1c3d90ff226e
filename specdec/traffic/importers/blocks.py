"""Mooncake prefix blocks composed from cached pieces, so a row with ~40k
input tokens costs lookups and one string join instead of a tokenization of
its whole chat (~30 ms a row on this 2-core host: 19 rows/s).

A block (one hash id, a 512-token prefix block in the trace) is a run of
material units from one global stream, starting at a unit index; its text and
its exact token count are computed once per start index (a block is a
function of where it starts). A row's context is its blocks' texts in order,
then a tail: the first ``m`` units of the next block (possibly the whole
block), then ``rstrip`` as ``prompt_pool.compose`` does. So rows sharing
leading hash ids share their leading text exactly.

How a row's chat is counted without tokenizing it (all terms cached):

    chat(row) = Q(prompt) + sum(tokens(B_i)) + sum(join(B_i, B_i+1))
                + join(B_k, tail) + tokens(tail) + dP(first unit)

* ``tokens(B)``: the block's text tokenized alone (exact);
* ``join(A, B)``: what tokenizing A+B adds to tokenizing each alone (a BPE
  pre-token can span the join: ". " + "The" is "." " The", one token less),
  measured on the last ``WINDOW`` characters of A and the first of B;
* ``dP(x)``: the same for the chat template's text in front of the content;
* ``Q(prompt)``: the chat of a fixed reference context and the prompt, less
  that context's own terms (the template, the separator and the prompt).

This is exact when every pre-token touching a join lies within ``WINDOW``
characters of it and the context's end (never whitespace, after ``rstrip``)
meets the separator the same way the reference's does: true for byte-level
BPE with the GPT-2 split (SmolLM2, tests/traffic/importers/test_blocks.py compares
the sum with the real count on every row of a Mooncake slice) and for the
tests' word counter. The note's ``reached_tokens`` is this sum.

Memory: the caches are keyed by positions in the material (bounded by the
pool, not the trace); the one thing that grows is the map from hash id to
start index, 4 bytes per id in an array for ids below ``DENSE_IDS``
(Mooncake numbers its blocks densely from 0), a dict entry beyond.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

from specdec.traffic.importers.utf8 import Utf8Blocks
from specdec.traffic.prompt_pool import (
    EXACT,
    SEPARATOR,
    Composed,
    PoolPrompt,
    TokenCounter,
    Unit,
    _by_piece,
    _cut,
    tolerance,
)

#: Tokens of one Mooncake prefix block (trace-formats.md).
BLOCK_TOKENS = 512
#: Characters either side of a join tokenized to measure what the join adds.
WINDOW = 256
#: Hash ids below this are mapped in an array (4 bytes each); others in a dict.
DENSE_IDS = 1 << 26
#: The reference context ``Q`` is measured with (any short sentence).
_REFERENCE = "Reference text."
#: Follows a window when the template's front join is measured, so the
#: window's end meets the template's end the same way every time.
_CLOSE = "\n\nEnd."


@dataclass(frozen=True, slots=True)
class Block:
    start: int  # index of its first unit in the stream
    units: tuple[Unit, ...]
    text: str
    data: bytes  # text as UTF-8 (a row's prompt is joined from these: ``utf8``)
    tokens: int  # counter.text(text): exact
    pieces: tuple[tuple[str, int], ...]  # (piece id, unit tokens) as Composed.context counts them
    n: int  # len(units)
    end: int  # the stream index after its last unit (start + n, cyclic)


class BlockComposer:
    """Blocks by hash id, and rows composed from them (see the module docstring)."""

    def __init__(self, stream: list[Unit], counter: TokenCounter):
        self.stream, self.counter = stream, counter
        self._dense = array("i")  # hash id -> start index + 1 (0: not seen)
        self._sparse: dict[int, int] = {}
        self._cursor = 0
        self._blocks: dict[int, Block] = {}
        self._joins: dict[tuple, int] = {}
        self._windows: dict[tuple[str, str], int] = {}
        self._alone: dict[str, int] = {}  # a window's own count (one window meets many others)
        self._cuts: dict[tuple[Unit, int], Unit | None] = {}
        self._steps: dict[tuple[int, int], tuple[int | None, int]] = {}
        self._front: dict[str, int] = {}
        self._tails: dict[tuple[int, int], tuple[str, int]] = {}
        self._q: dict[str, int] = {}
        self._asked: dict[str, bytes] = {}  # prompt id -> SEPARATOR + its text, as UTF-8
        self._measured_texts: dict[str, int] = {}
        self._heads: dict[tuple[int, int], list[tuple[str, int]]] = {}
        self._measured = _Measured(self.measured, counter)

    # -------------------------------------------------------------- blocks
    def start_of(self, hash_id: int) -> int:
        """The start index of a hash id's block, assigned from the cursor the first time it is seen."""
        if 0 <= hash_id < DENSE_IDS:
            if hash_id >= len(self._dense):
                self._dense.extend(array("i", [0]) * max(hash_id + 1 - len(self._dense), len(self._dense) // 2))
            if self._dense[hash_id]:
                return self._dense[hash_id] - 1
            start = self._dense[hash_id] = self._cursor
            self._dense[hash_id] = start + 1
        elif hash_id in self._sparse:
            return self._sparse[hash_id]
        else:
            start = self._sparse[hash_id] = self._cursor
        self._cursor = (start + len(self.block(start).units)) % len(self.stream)
        return start

    def block(self, start: int) -> Block:
        hit = self._blocks.get(start)
        if hit is None:
            units: list[Unit] = []
            tokens, i = 0, start
            while tokens < BLOCK_TOKENS and len(units) < len(self.stream):
                units.append(self.stream[i])
                tokens += self.stream[i].tokens
                i = (i + 1) % len(self.stream)
            text = "".join(u.text for u in units)
            hit = self._blocks[start] = Block(
                start,
                tuple(units),
                text,
                text.encode("utf-8"),
                self.counter.text(text),
                tuple(_by_piece(units)),
                len(units),
                (start + len(units)) % len(self.stream),
            )
        return hit

    def row_blocks(self, hash_ids: tuple[int, ...]) -> list[Block]:
        """A row's blocks in order, stopping before one whose material the row
        already holds (the row is longer than all material). The material held
        is kept as runs (start, length) on the cyclic stream: a row's new
        blocks follow each other, so a row holds one to a few runs.
        (~27 blocks a row: the id and block lookups are inlined, and a block
        that continues a row's only run is taken without the general check.)"""
        n = len(self.stream)
        dense, cache = self._dense, self._blocks  # the array grows in place: the same object throughout
        runs: list[list[int]] = []  # [start, length], merged when a block continues the last run
        out: list[Block] = []
        end = held = -1  # while the row holds one run: where it ends on the stream, and its length
        for h in hash_ids:
            start = dense[h] - 1 if 0 <= h < len(dense) else -1
            if start < 0:
                start = self.start_of(h)
            b = cache.get(start) or self.block(start)
            length = b.n
            if start == end and held + length <= n:  # continues the only run, not onto itself
                held += length
                end = b.end
                out.append(b)
                continue
            if end >= 0:
                runs[0][1] = held  # the only run, as the fast path left it
            overlaps = False
            for s, ln in runs:  # a loop, not any(<generator>): this runs for every block of every row
                if (b.start - s) % n < ln or (s - b.start) % n < length:
                    overlaps = True
                    break
            if overlaps:
                break
            if runs and (runs[-1][0] + runs[-1][1]) % n == b.start:
                runs[-1][1] += length
            else:
                runs.append([b.start, length])
            if len(runs) == 1:
                held, end = runs[0][1], (runs[0][0] + runs[0][1]) % n
            else:
                end = -1
            out.append(b)
        return out

    # -------------------------------------------------------------- counting terms
    def join(self, key: tuple, left: str, right: str) -> int:
        """What tokenizing ``left + right`` adds to tokenizing each alone (the
        windows either side of the join), cached under ``key``."""
        hit = self._joins.get(key)
        if hit is None:  # many keys share their windows (tails longer than the window): measured once
            a, b = left[-WINDOW:], right[:WINDOW]
            hit = self._windows.get((a, b))
            if hit is None:
                t = self.counter.text
                hit = self._windows[(a, b)] = t(a + b) - self.alone(a) - self.alone(b)
            self._joins[key] = hit
        return hit

    def alone(self, window: str) -> int:
        """``counter.text(window)``, cached: tokenizing costs ~0.45 us a
        character on this host (SmolLM2's byte-level pre-tokenizer), and the
        windows either side of the joins are few next to their pairs."""
        hit = self._alone.get(window)
        if hit is None:
            hit = self._alone[window] = self.counter.text(window)
        return hit

    def cut(self, unit: Unit, budget: int) -> Unit | None:
        """``prompt_pool._cut`` (a unit's longest prefix within ``budget``
        tokens, at a word), cached: a binary search of ~8 tokenizations, the
        prefixes' counts kept (``measured``), so another budget's search
        tokenizes only the prefixes no search tried before."""
        key = (unit, budget)
        if key not in self._cuts:
            self._cuts[key] = _cut(unit, budget, self._measured)
        return self._cuts[key]

    def measured(self, text: str) -> int:
        """``counter.text(text)`` cached, for texts drawn from the material at
        a unit's inner positions (cut prefixes, tails ending in a cut unit):
        bounded by the material, not the rows."""
        hit = self._measured_texts.get(text)
        if hit is None:
            hit = self._measured_texts[text] = self.counter.text(text)
        return hit

    def front(self, context: str) -> int:
        """The chat template's front join with ``context`` (up to a constant that cancels)."""
        w = context[:WINDOW] + _CLOSE
        hit = self._front.get(w)
        if hit is None:
            hit = self._front[w] = self.counter.chat([{"role": "user", "content": w}]) - self.counter.text(w)
        return hit

    def q(self, prompt: PoolPrompt) -> int:
        hit = self._q.get(prompt.id)
        if hit is None:
            chat = self.counter.chat([{"role": "user", "content": _REFERENCE + SEPARATOR + prompt.text}])
            hit = self._q[prompt.id] = chat - self.counter.text(_REFERENCE) - self.front(_REFERENCE)
        return hit

    def tail(self, block: Block, m: int) -> tuple[str, int]:
        """The first ``m`` units of a block, rstripped, and their token count."""
        hit = self._tails.get((block.start, m))
        if hit is None:
            text = "".join(u.text for u in block.units[:m]).rstrip()
            hit = self._tails[(block.start, m)] = (text, self.counter.text(text) if text else 0)
        return hit

    def head_pieces(self, block: Block, m: int) -> list[tuple[str, int]]:
        """``_by_piece`` of a block's first ``m`` units, cached (bounded by the material)."""
        hit = self._heads.get((block.start, m))
        if hit is None:
            hit = self._heads[(block.start, m)] = _by_piece(list(block.units[:m]))
        return hit

    def step(self, prev: Block | None, nxt: Block) -> tuple[int | None, int]:
        """For ``nxt`` after ``prev`` (None: first): what the row's count
        would add with ``nxt`` as its last block (rstripped; None when that
        is empty) and what taking ``nxt`` whole adds; cached per pair, so a
        whole block costs one lookup."""
        key = (-1 if prev is None else prev.start, nxt.start)
        hit = self._steps.get(key)
        if hit is None:
            text, tokens = self.tail(nxt, len(nxt.units))
            check = None
            if text:
                check = (
                    self.join((prev.start, nxt.start, len(nxt.units)), prev.text, text) + tokens
                    if prev
                    else tokens + self.front(text)
                )
            step = nxt.tokens + (
                self.join((prev.start, nxt.start), prev.text, nxt.text) if prev else self.front(nxt.text)
            )
            hit = self._steps[key] = (check, step)
        return hit

    # -------------------------------------------------------------- one row
    def compose(self, prompt: PoolPrompt, target: int, blocks: list[Block]) -> Composed | None:
        """The row's content from its blocks (the message's content a
        ``Utf8Blocks``: the whole blocks and the row's own tail, not joined here), or None when the target is too
        small for whole blocks and units (the prompt alone, or its first unit,
        overshoots): the caller composes those rows unit by unit
        (``prompt_pool.compose``), as every row was composed before."""
        q = self.q(prompt)
        pre, whole = q, []  # tokens (the prompt's terms, joins included) of the whole blocks taken, and those blocks
        prev, last_k, units = None, len(blocks) - 1, 0
        steps, below, key = self._steps, target - EXACT, -1  # key: the previous block's start (-1: none)
        for k, nxt in enumerate(blocks):
            if k < last_k:  # whole, as far as the next block still fits (a fast path: no _Row)
                check, step = steps.get((key, nxt.start)) or self.step(prev, nxt)
                if check is not None and pre + check < below:
                    pre += step
                    whole.append(nxt)
                    units += len(nxt.units)
                    prev, key = nxt, nxt.start
                    continue
            last = k == last_k
            row = _Row(self, prompt, target, pre, prev, nxt)
            found = row.closest()
            if found is None or (k == 0 and found[1] > target + tolerance(target)):
                return None
            return row.result(whole, units, *found, last)
        return None


class _Row:
    """One row's choice of tail within the block after its whole blocks."""

    def __init__(
        self, owner: BlockComposer, prompt: PoolPrompt, target: int, fixed: int, prev: Block | None, nxt: Block
    ):
        self.o, self.prompt, self.target, self.fixed, self.prev, self.nxt = owner, prompt, target, fixed, prev, nxt
        self._counts: dict[int, int | None] = {}

    def counted(self, text: str, tokens: int, key: tuple) -> int:
        """The row's chat tokens with ``text`` (rstripped, not empty) as its
        tail; ``key`` names the tail for the join cache (the previous block's
        start first)."""
        if self.prev is None:
            return self.fixed + tokens + self.o.front(text)
        return self.fixed + self.o.join(key, self.prev.text, text) + tokens

    def count(self, m: int) -> int | None:
        """The row's count with the first ``m`` units of ``nxt`` as its tail
        (None: that tail is empty), kept for the row (the search asks twice)."""
        if m not in self._counts:
            text, tokens = self.o.tail(self.nxt, m)
            key = (self.prev.start if self.prev else -1, self.nxt.start, m)
            self._counts[m] = self.counted(text, tokens, key) if text else None
        return self._counts[m]

    def closest(self) -> tuple[int, int] | None:
        """The ``m`` in 1..n whose count is closest to the target (counts grow with m), and that
        count: binary search; None when no tail has a count."""
        lo, hi = 1, len(self.nxt.units)
        while lo < hi:  # the smallest m whose count reaches the target
            mid = (lo + hi) // 2
            c = self.count(mid)
            if c is None or c < self.target:
                lo = mid + 1
            else:
                hi = mid
        best: tuple[int, int] | None = None
        for m in (lo - 1, lo):
            c = self.count(m) if m >= 1 else None
            # a tie: the longer tail
            if c is not None and (best is None or abs(c - self.target) <= abs(best[1] - self.target)):
                best = (m, c)
        return best

    def result(self, whole: list[Block], whole_units: int, m: int, reached: int, last: bool) -> Composed:
        """The row with the first ``m`` units of ``nxt`` as its tail (``reached``: its count, from ``closest``),
        or a unit cut at a word where that comes closer to the target."""
        nxt, target, tol = self.nxt, self.target, tolerance(self.target)
        text, _ = self.o.tail(nxt, m)
        tail_units, cut = None, None  # None: the first m units whole (their pieces cached: ``head_pieces``)
        if abs(reached - target) > tol:  # between two units: cut one at a word (tokenized: rare)
            m0 = m if reached < target else m - 1
            if m0 < len(nxt.units):
                before = self.count(m0) if m0 >= 1 else None
                part = self.o.cut(nxt.units[m0], target - (before if before is not None else self.fixed))
                if part is not None:
                    cut_text = ("".join(u.text for u in nxt.units[:m0]) + part.text).rstrip()
                    cut_reached = (
                        self.counted(
                            cut_text,
                            self.o.measured(cut_text),
                            (self.prev.start if self.prev else -1, nxt.start, m0, part.text),
                        )
                        if cut_text
                        else None
                    )
                    if cut_reached is not None and abs(cut_reached - target) < abs(reached - target):
                        text, reached, cut = cut_text, cut_reached, nxt.units[m0].piece
                        tail_units = list(nxt.units[:m0]) + [part]
        asked = self.o._asked.get(self.prompt.id)
        if asked is None:
            asked = self.o._asked[self.prompt.id] = (SEPARATOR + self.prompt.text).encode("utf-8")
        content = Utf8Blocks(tuple(whole), text.encode("utf-8") + asked)
        pieces: list[tuple[str, int]] = []
        tail_pieces = self.o.head_pieces(nxt, m) if tail_units is None else _by_piece(tail_units)
        for ps in [b.pieces for b in whole] + [tail_pieces]:
            # each block's pieces are merged already: only where two blocks meet is left
            if pieces and ps and pieces[-1][0] == ps[0][0]:
                pieces[-1] = (ps[0][0], pieces[-1][1] + ps[0][1])
                pieces.extend(ps[1:])
            else:
                pieces.extend(ps)
        done = Composed(
            [{"role": "user", "content": content}],
            self.prompt.id,
            target,
            reached,
            pieces,
            cut,
            whole_units + (m if tail_units is None else len(tail_units)),
        )
        if reached < target - tol:
            done.status = "short" if last and cut is None and m == len(nxt.units) else "missed"
        elif reached > target + tol:
            done.status = "missed"
        return done


class _Measured:
    """A token counter whose ``text`` is ``BlockComposer.measured`` (``_cut`` takes a counter)."""

    def __init__(self, text, counter: TokenCounter):
        self.text, self.chat = text, counter.chat


def _spans(start: int, length: int, n: int) -> list[tuple[int, int]]:
    """The unit indices ``start .. start+length`` of a cyclic stream of ``n`` units, as one or two ranges."""
    end = start + length
    return [(start, end)] if end <= n else [(start, n), (0, end - n)]
