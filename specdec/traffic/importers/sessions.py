"""Session turns (BurstGPT ``Session ID``) built from the length buckets'
content, counted without tokenizing the conversation.

What a turn is (as before): the previous turn's messages, a stand-in
assistant reply (material, about the previous turn's recorded output length,
at most ``MAX_REPLY_TOKENS``) and a new user message, so that the whole chat
reaches the turn's input length; the first turn is one user message; when
the history and reply alone leave no room (the chat would pass the input
length even with the shortest user message), the turn is composed alone and
the note says so. All turns of a session share its category.

What changed: the new user message is the content of a length bucket
(``content.bucket_target``: composed once, reused by every row of the bucket,
session or not), aimed at what the history leaves of the input length, and
the reply is the category's material cut to a length, composed once per
category and length. So two turns (of any sessions) with the same remainder
send the same user text, as rows of one bucket already do. A row costs
lookups and a join of cached JSON pieces (a session keeps the tuple of its
messages' JSON bytes, shared with the caches, and the count of its chat),
where composing it cost ~3 ms of tokenizing (a million rows: ~50 minutes).

Counting: with a chat template that puts special tokens around every message
(SmolLM2's ``<|im_start|>role\\n...<|im_end|>``), a chat's count is a
constant plus one term per message, each term a function of that message
alone:

    chat(m_1..m_n) = K + f(m_1) + ... + f(m_n)

with ``f(m) = chat([p, m]) - chat([p])`` for a fixed probe message ``p`` and
``K = 2 chat([p]) - chat([p, p])``. A turn's count is then the previous
turn's count plus ``f(reply)`` plus ``f(user) = chat([user]) - K``, the
bucket's own count less ``K``: exact. Whether the counter is additive is
checked once, on probe conversations (pool texts and joins a template
without separators would merge); a counter that is not (a template that
joins messages with plain text) gets every turn composed and tokenized whole,
as before (``content.ContentAssigner._session_turn``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace

from specdec.traffic.importers.utf8 import Utf8Parts
from specdec.traffic.prompt_pool import Composed, PoolPrompt, TokenCounter, Unit, tolerance

#: Longest stand-in assistant reply between two turns of a session.
MAX_REPLY_TOKENS = 256
_PROBE = {"role": "user", "content": "Reference text"}


@dataclass(frozen=True, slots=True)
class Bucket:
    """A length bucket's content (``content.ContentAssigner.bucket``)."""

    prompt: PoolPrompt
    done: Composed  # one user message; ``reached`` is its chat count
    aim: int  # the length it was composed for
    message_json: bytes  # the message as a JSON object, UTF-8


@dataclass(slots=True)
class Session:
    """What a session keeps between its turns."""

    choice: str  # its category (or tier)
    parts: tuple[bytes, ...] = ()  # its last turn's messages, each a JSON object (shared with the caches)
    tokens: int = 0  # that turn's chat count
    last_output: int = 0  # that turn's recorded output length
    # the row-by-row path only (a counter that is not additive; None: not used, so no memory per session):
    messages: list[dict] | None = None
    units: list[Unit] | None = None  # the session's material, in order
    offset: int = 0  # units of it already used


@dataclass(frozen=True, slots=True)
class Turn:
    """One turn's content: ``prompt`` (a first turn) or ``messages`` (JSON text)."""

    prompt: PoolPrompt
    note: str
    status: str
    text: str | None
    messages: Utf8Parts | None


class SessionTurns:
    """Turns from buckets (see the module docstring). ``bucket(choice,
    target)`` gives a bucket's content; ``material(choice)`` the category's
    units in reading order (the replies are cut from its start)."""

    def __init__(
        self,
        counter: TokenCounter,
        bucket: Callable[[str, int], Bucket],
        material: Callable[[str], list[Unit]],
        probes: list[str],
    ):
        self.counter, self.bucket, self.material = counter, bucket, material
        one = counter.chat([_PROBE])
        self.k = 2 * one - counter.chat([_PROBE, _PROBE])
        self._one = one
        self.additive = self._additive(probes)
        self._replies: dict[tuple[str, int], tuple[bytes, int, int]] = {}

    def f(self, message: dict) -> int:
        """A message's own term in a chat's count."""
        return self.counter.chat([_PROBE, message]) - self._one

    def _additive(self, probes: list[str]) -> bool:
        """Whether every probe conversation counts as the sum of its terms."""
        texts = ["Reference text", "more words", "and the end", *probes]
        roles = ("user", "assistant")
        for i in range(len(texts) - 2):
            chat = [{"role": roles[j % 2], "content": texts[i + j]} for j in range(3)]
            if self.counter.chat(chat) != self.k + sum(self.f(m) for m in chat):
                return False
        return True

    def reply(self, choice: str, budget: int) -> tuple[bytes, int, int]:
        """The stand-in reply of about ``budget`` tokens: (JSON bytes, its
        term, the tokens of its units); whole units from the material's
        start, at least one (as the row-by-row path takes them)."""
        hit = self._replies.get((choice, budget))
        if hit is None:
            taken: list[Unit] = []
            used = 0
            for u in self.material(choice):
                if used + u.tokens > budget and taken:
                    break
                taken.append(u)
                used += u.tokens
            message = {"role": "assistant", "content": "".join(u.text for u in taken).strip() or "OK."}
            hit = self._replies[(choice, budget)] = (_json(message), self.f(message), used)
        return hit

    def turn(self, s: Session, target: int, output_tokens: int, extra: dict) -> Turn:
        """The next turn of ``s`` for an input length of ``target`` tokens."""
        tol = tolerance(target)
        b = None
        if s.parts:
            reply, term, used = self.reply(s.choice, min(max(s.last_output, 1), MAX_REPLY_TOKENS))
            history = s.tokens + term  # the chat's count up to the reply
            want = target - (history - self.k)  # what is left for the user message, counted alone
            if want >= 1:
                b = self.bucket(s.choice, want)
                reached = history + b.done.reached - self.k
                if reached > target + tol:  # the history leaves no room: the turn alone
                    b = None
                else:
                    extra["history"] = f"{len(s.parts)} earlier message(s) + stand-in reply of {used} tokens"
                    parts = (*s.parts, reply, b.message_json)
            if b is None:
                extra["history"] = "dropped: the earlier turns are longer than this turn's input length"
        if b is None:
            b = self.bucket(s.choice, target)
            reached, parts = b.done.reached, (b.message_json,)
        if abs(reached - target) <= tol:
            status = "ok"
        elif b.done.status in ("over", "short"):
            status = b.done.status
        else:
            status = "missed"
        s.parts, s.tokens, s.last_output = parts, reached, output_tokens
        note = replace(b.done, target=target, reached=reached, status=status).note(composed_for=b.aim, **extra)
        if len(parts) == 1:
            return Turn(b.prompt, note, status, b.done.messages[0]["content"], None)
        joined = [b"["]
        for i, p in enumerate(parts):
            joined += (b", ", p) if i else (p,)
        joined.append(b"]")
        return Turn(b.prompt, note, status, None, Utf8Parts(tuple(joined)))


def _json(message: dict) -> bytes:
    """A message as ``json.dumps`` writes it inside a list (``ensure_ascii=False``), UTF-8."""
    return json.dumps(message, ensure_ascii=False).encode("utf-8")
