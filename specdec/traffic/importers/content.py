"""Give each imported trace row real content from the prompt pool.

Per row, all choices are seeded and deterministic (``unit_hash`` of the seed and
the row's key):

* category: ``--category C`` (C a category or a tier), else ``--mix`` (a
  weighted draw; weights are normalized), else the trace's own label (Azure's
  code / conversation files); a session's turns share one category;
* prompt: one of the category's prompts, among those that fit the row's input
  length (the shortest when none fits);
* context, in front of the prompt, until the chat reaches the input length
  (``specdec.traffic.prompt_pool.compose``):
  - Mooncake ``hash_ids``: each hash id (a 512-token prefix block in the trace)
    is given its own run of material units, the first time it is seen, from one
    global stream of material; a row's context is its blocks in order, so rows
    sharing leading hash ids share leading text and prefix caching sees it.
    Blocks' texts and token counts are cached and a row is counted as their
    sum plus the measured joins (``blocks``: exact, never a whole chat
    tokenized); a row too short for that is composed unit by unit;
  - sessions (BurstGPT ``Session ID``): a turn's messages are the previous
    turn's messages, a stand-in assistant reply (material, about the previous
    turn's recorded output length, at most ``MAX_REPLY_TOKENS``) and a new user
    message; when that history is already longer than the turn's input length
    the turn is composed alone and the note says so. The user message is a
    length bucket's content and the conversation is counted as the sum of its
    messages' terms (``sessions``: exact for a template with special tokens
    around each message, checked once; otherwise each turn is composed and
    tokenized whole);
  - otherwise: the pieces the prompt's category reads first (code for code,
    documents for summaries, dialogues for chat), same language first.
    These rows are composed once per category and length bucket and the
    content is reused by every row of that bucket (``bucket_target``: buckets
    narrow enough that the content stays within each row's tolerance; the
    note gives the row's own target, the bucket's ``composed_for`` and the
    status against the row's target). Why: composing and tokenizing each row
    cost ~4-16 ms of CPU, hours for a million-row trace; a trace has a few
    hundred buckets per category. The price: rows of one bucket send the same
    text, so a server's prefix cache sees them as repeats (mind it when
    TTFT is what is measured; a session turn's user message comes from the
    same buckets).
"""

from __future__ import annotations

import json
import math
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace

from specdec.errors import SpecdecError
from specdec.traffic.importers.blocks import BlockComposer
from specdec.traffic.importers.sessions import MAX_REPLY_TOKENS, Bucket, Session, SessionTurns
from specdec.traffic.importers.utf8 import Utf8Parts
from specdec.traffic.prompt_pool import (
    KIND_PREFERENCE,
    Composed,
    Pool,
    PoolPrompt,
    TokenCounter,
    Unit,
    compose,
    split_units,
    tolerance,
    unit_hash,
)

_LANG_RANK = {
    "en": {"en": 0, "mixed": 1, "zh": 2},
    "zh": {"zh": 0, "mixed": 1, "en": 2},
    "mixed": {"mixed": 0, "en": 1, "zh": 1},
}


#: Short Mooncake rows' compositions kept (``ContentAssigner._short``).
SHORT_CACHE = 65_536

#: Below this many tokens, length buckets are this wide (half of the smallest tolerance, 8).
_FLAT_BELOW, _FLAT_WIDTH = 800, 8
#: Above it, each bucket is this much longer than the previous (0.8%: within 1% tolerance).
_RATIO = 1.008


def bucket_target(target: int) -> int:
    """The length a row's content is composed for: the middle of the row's
    bucket, at most 4 tokens (below 800) or 0.4% (above) from ``target``,
    so a composition that reaches it within 2 tokens is within the row's tolerance."""
    if target < _FLAT_BELOW:
        return (target // _FLAT_WIDTH) * _FLAT_WIDTH + _FLAT_WIDTH // 2
    k = int(math.log(target / _FLAT_BELOW) / math.log(_RATIO))
    return round(_FLAT_BELOW * _RATIO ** (k + 0.5))


@dataclass
class Assigned:
    """A row's content: ``prompt`` (one user message) or ``messages`` (the
    chat as JSON text), either possibly ``Utf8Parts`` (``utf8``)."""

    category: str
    tier: str
    note: str
    status: str
    prompt: str | Utf8Parts | None = None
    messages: str | Utf8Parts | None = None

    @classmethod
    def of(cls, prompt: PoolPrompt, done: Composed, note: str) -> Assigned:
        single = len(done.messages) == 1
        return cls(
            prompt.category,
            prompt.tier,
            note,
            done.status,
            done.messages[0]["content"] if single else None,
            None if single else json.dumps(done.messages, ensure_ascii=False),
        )


class _Units:
    """A row's blocks' units in order for ``compose``, iterated without
    building the list (a short row reads a few of ~800); ``read`` is the most
    units any pass read."""

    __slots__ = ("blocks", "n", "read")

    def __init__(self, blocks: list):
        self.blocks, self.n, self.read = blocks, sum(len(b.units) for b in blocks), 0

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[Unit]:
        i = 0
        for b in self.blocks:
            for u in b.units:
                i += 1
                if i > self.read:
                    self.read = i
                yield u


class _Remembering:
    """The counter ``compose`` is given for short Mooncake rows: texts (cut
    prefixes of material units) through ``BlockComposer.measured``, and chats
    of one message remembered (the prompt alone comes back on every row that
    misses the cache; at most ``SHORT_CACHE`` kept)."""

    def __init__(self, measured, counter: TokenCounter):
        self.text, self.counter = measured, counter
        self._chats: dict[str, int] = {}

    def chat(self, messages: list[dict]) -> int:
        if len(messages) != 1:
            return self.counter.chat(messages)
        content = messages[0]["content"]
        hit = self._chats.get(content)
        if hit is None:
            if len(self._chats) >= SHORT_CACHE:
                self._chats.clear()
            hit = self._chats[content] = self.counter.chat(messages)
        return hit


class ContentAssigner:
    """Assigns pool content to rows, in arrival order (the order matters for
    Mooncake blocks and sessions, so it is part of the determinism)."""

    def __init__(
        self,
        pool: Pool,
        counter: TokenCounter,
        seed: int,
        category: str | None = None,
        mix: dict[str, float] | None = None,
        max_input_tokens: int | None = None,
    ):
        self.pool, self.counter, self.seed = pool, counter, seed
        self.category, self.max_input_tokens = category, max_input_tokens
        for key in [category] if category else list(mix or {}):
            if not pool.matching(key):
                raise SpecdecError(
                    f"{key!r} is neither a category nor a tier of the prompt pool "
                    f"(categories: {', '.join(pool.categories())}; tiers: high, medium, low)"
                )
        total = sum((mix or {}).values())
        self.mix = [(k, w / total) for k, w in sorted((mix or {}).items()) if w > 0] if mix else None
        self._units: dict[str, list[Unit]] = {}
        self._base: dict[str, int] = {}
        self._blocks: BlockComposer | None = None
        self._sessions: dict[str, Session] = {}
        self._turns: SessionTurns | None = None
        self._buckets: dict[tuple[str, int], Bucket] = {}
        self._material: dict[str, list[Unit]] = {}
        self._shorts: dict[tuple, Composed] = {}
        self._remembering: _Remembering | None = None
        self._matching: dict[str, list[PoolPrompt]] = {}
        self._bases: dict[str, list[int]] = {}  # choice -> its candidates' distinct lengths alone, sorted
        self._fits: dict[tuple[str, int], list[PoolPrompt]] = {}
        self.statuses: Counter[str] = Counter()
        self.capped = 0

    # -------------------------------------------------------------- choices
    def choose(self, key: str, label: str | None) -> str:
        if self.category:
            return self.category
        if self.mix:
            u, acc = unit_hash(self.seed, "category", key), 0.0
            for name, weight in self.mix:
                acc += weight
                if u < acc:
                    return name
            return self.mix[-1][0]
        if label is None or not self.pool.matching(label):
            raise SpecdecError("this trace carries no category the prompt pool knows: give --category or --mix")
        return label

    def _prompt(self, choice: str, key: str, target: int) -> PoolPrompt:
        candidates = self._matching.get(choice)
        if candidates is None:  # pool.matching scans the pool: once per choice, not per row
            candidates = self._matching[choice] = self.pool.matching(choice)
        fitting = self._fitting(choice, candidates, target)
        if not fitting:
            return min(candidates, key=lambda p: (self._base_tokens(p), p.id))
        return fitting[int(unit_hash(self.seed, "prompt", key) * len(fitting))]

    def _fitting(self, choice: str, candidates: list[PoolPrompt], target: int) -> list[PoolPrompt]:
        """The candidates whose prompt alone fits ``target``, in pool order;
        one list per choice and number of fitting lengths (a bisection a row)."""
        bases = self._bases.get(choice)
        if bases is None:
            bases = self._bases[choice] = sorted({self._base_tokens(p) for p in candidates})
        k = bisect_right(bases, target)
        hit = self._fits.get((choice, k))
        if hit is None:
            hit = self._fits[(choice, k)] = [p for p in candidates if self._base_tokens(p) <= target]
        return hit

    def _base_tokens(self, p: PoolPrompt) -> int:
        if p.id not in self._base:
            self._base[p.id] = self.counter.chat([{"role": "user", "content": p.text}])
        return self._base[p.id]

    def _piece_units(self, piece_id: str) -> list[Unit]:
        if piece_id not in self._units:
            piece = next(p for p in self.pool.pieces if p.id == piece_id)
            self._units[piece_id] = split_units(piece, self.counter)
        return self._units[piece_id]

    def _ordered_units(self, prompt: PoolPrompt, key: str) -> list[Unit]:
        kinds = KIND_PREFERENCE.get(prompt.category, ("document", "code", "dialogue"))
        ranks = _LANG_RANK[prompt.language]
        order = sorted(
            self.pool.pieces,
            key=lambda p: (kinds.index(p.kind), ranks[p.language], unit_hash(self.seed, "piece", key, p.id)),
        )
        return [u for p in order for u in self._piece_units(p.id)]

    # -------------------------------------------------------------- Mooncake blocks
    def _composer(self) -> BlockComposer:
        if self._blocks is None:
            order = sorted(self.pool.pieces, key=lambda p: unit_hash(self.seed, "stream", p.id))
            self._blocks = BlockComposer([u for p in order for u in self._piece_units(p.id)], self.counter)
        return self._blocks

    def _short(self, prompt: PoolPrompt, target: int, blocks: list) -> Composed:
        """A Mooncake row too short for whole units (``BlockComposer.compose``
        gave None), composed unit by unit as ``compose`` does; a fifth of
        Mooncake's rows ask for 13-100 tokens. A prompt alone longer than the
        target is said without tokenizing (its count is cached); the others
        are cached by prompt, target and blocks (short rows repeat), at most
        ``SHORT_CACHE`` of them."""
        base = self._base_tokens(prompt)
        if base > target + tolerance(target):  # what compose returns at once
            return Composed([{"role": "user", "content": prompt.text}], prompt.id, target, base, status="over")
        near = (prompt.id, target, blocks[0].start) if blocks else None
        hit = self._shorts.get(near) if near is not None else None
        if hit is not None:
            return hit
        key = (prompt.id, target, tuple(b.start for b in blocks))
        hit = self._shorts.get(key)
        if hit is None:
            if len(self._shorts) >= SHORT_CACHE:
                self._shorts.clear()
            units = _Units(blocks)
            hit = self._shorts[key] = compose(prompt, target, units, self._short_counter())
            if near is not None and units.read < len(blocks[0].units):
                # Every pass of compose stopped before the first block's last unit: the
                # composition is the same for any row of this prompt and target whose
                # first block this is (it read nothing else, and len(units) only
                # matters once all units are taken), so it is kept by that block too.
                self._shorts[near] = hit
        return hit

    def _short_counter(self) -> _Remembering:
        if self._remembering is None:
            self._remembering = _Remembering(self._composer().measured, self.counter)
        return self._remembering

    # -------------------------------------------------------------- one row
    def assign(
        self,
        key: str,
        input_tokens: int,
        output_tokens: int,
        *,
        label: str | None = None,
        hash_ids: tuple[int, ...] = (),
        session: str | None = None,
        cap: int | None = None,
    ) -> Assigned:
        """Content for one row; ``cap`` (the room the row's output leaves in
        the served model's context) and ``max_input_tokens`` bound the target."""
        target = input_tokens
        extra: dict[str, int | str] = {}
        limit = min((c for c in (cap, self.max_input_tokens) if c is not None), default=None)
        if limit is not None and target > limit:
            target, extra["capped_from"] = limit, input_tokens
            self.capped += 1
        state = None
        if session is not None:
            state = self._sessions.get(session)
            if state is None:
                state = self._sessions[session] = Session(self.choose(f"session:{session}", label))
            turns = None if hash_ids else self._session_turns()
            if turns is not None and turns.additive:
                turn = turns.turn(state, target, output_tokens, extra)
                self.statuses[turn.status] += 1
                return Assigned(
                    turn.prompt.category, turn.prompt.tier, turn.note, turn.status, turn.text, turn.messages
                )
            choice = state.choice
        else:
            choice = self.choose(key, label)
        prompt = self._prompt(choice, key, target)
        if hash_ids:
            blocks = self._composer().row_blocks(hash_ids)
            extra["hash_blocks"] = f"{len(blocks)} of {len(hash_ids)}"
            done = self._composer().compose(prompt, target, blocks) or self._short(prompt, target, blocks)
        elif state is not None:
            if not state.units:
                state.units = self._ordered_units(prompt, f"session:{session}")
            done = self._session_turn(state, state.units, prompt, target, extra)
            state.last_output = output_tokens
        else:
            return self._bucketed(choice, target, extra)
        self.statuses[done.status] += 1
        return Assigned.of(prompt, done, done.note(**extra))

    def bucket(self, choice: str, target: int) -> Bucket:
        """The content of ``target``'s length bucket, composed the first time the bucket is seen."""
        aim = bucket_target(target)
        hit = self._buckets.get((choice, aim))
        if hit is None:
            key = f"bucket:{choice}:{aim}"
            prompt = self._prompt(choice, key, aim)
            done = compose(prompt, aim, self._ordered_units(prompt, key), self.counter)
            hit = self._buckets[(choice, aim)] = Bucket(
                prompt, done, aim, json.dumps(done.messages[0], ensure_ascii=False).encode("utf-8")
            )
        return hit

    def _bucketed(self, choice: str, target: int, extra: dict) -> Assigned:
        """A row without prefix blocks or session: its bucket's content."""
        b = self.bucket(choice, target)
        tol = tolerance(target)
        if abs(b.done.reached - target) <= tol:
            status = "ok"
        elif b.done.status in ("over", "short"):
            status = b.done.status
        else:
            status = "missed"
        self.statuses[status] += 1
        note = replace(b.done, target=target, status=status).note(composed_for=b.aim, **extra)
        return Assigned(b.prompt.category, b.prompt.tier, note, status, b.done.messages[0]["content"])

    # -------------------------------------------------------------- sessions
    def _session_turns(self) -> SessionTurns:
        if self._turns is None:
            probes = [p.text for p in self.pool.prompts[:4]]
            for piece in self.pool.pieces[:4]:
                probes += [u.text for u in self._piece_units(piece.id)[:2]]
            self._turns = SessionTurns(self.counter, self.bucket, self._reply_material, probes)
        return self._turns

    def _reply_material(self, choice: str) -> list[Unit]:
        """The material stand-in replies are cut from: the category's reading order."""
        if choice not in self._material:
            key = f"reply:{choice}"
            self._material[choice] = self._ordered_units(self._prompt(choice, key, 0), key)
        return self._material[choice]

    def _session_turn(
        self, state: Session, units: list[Unit], prompt: PoolPrompt, target: int, extra: dict
    ) -> Composed:
        """A turn composed and tokenized whole (a counter that is not additive: ``sessions``);
        ``units``: the session's material (``state.units``)."""
        history: list[dict] = []
        if state.messages:
            reply_units: list[Unit] = []
            used = 0
            for u in units[state.offset :]:
                if used + u.tokens > min(max(state.last_output, 1), MAX_REPLY_TOKENS) and reply_units:
                    break
                reply_units.append(u)
                used += u.tokens
            state.offset += len(reply_units)
            reply = "".join(u.text for u in reply_units).strip() or "OK."
            history = state.messages + [{"role": "assistant", "content": reply}]
            extra["history"] = f"{len(state.messages)} earlier message(s) + stand-in reply of {used} tokens"
        done = compose(prompt, target, units[state.offset :], self.counter, history)
        if history and done.status == "over":
            extra["history"] = "dropped: the earlier turns are longer than this turn's input length"
            done = compose(prompt, target, units[state.offset :], self.counter)
        state.offset += done.n_units
        state.messages = done.messages
        return done
