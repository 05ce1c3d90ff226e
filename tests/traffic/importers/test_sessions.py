"""Session turns from the length buckets (``importers.sessions``): the
conversation semantics of before (history, stand-in reply, new user message,
history dropped when it leaves no room), each row's count exact without
tokenizing the conversation, and no per-row tokenizing at all once the
buckets are made (issue 24)."""

from __future__ import annotations

import json
import random

from specdec.traffic.importers import ImportOptions, import_trace
from specdec.traffic.importers.tokens import FastTokenCounter
from tests.support.fake_counter import FakeCounter


class Counting(FakeCounter):
    """The word counter, counting its calls."""

    def __init__(self):
        self.calls = 0

    def text(self, text: str) -> int:
        self.calls += 1
        return super().text(text)

    def chat(self, messages: list[dict]) -> int:
        self.calls += 1
        return super().chat(messages)


class Glued(FakeCounter):
    """A template that glues messages with no separator: not additive
    ("text" + "more" is one word), so each turn must be tokenized whole."""

    def chat(self, messages: list[dict]) -> int:
        return self.text("".join(m["content"] for m in messages)) + 2


def _trace(path, sessions: int, turns: int, seed: int = 3) -> None:
    """``sessions`` conversations of ``turns`` turns each, interleaved; input
    lengths grow by turn (the history is part of them), some sessionless rows."""
    rng, rows = random.Random(seed), []
    for s in range(sessions):
        length = rng.randint(60, 400)
        for _ in range(turns):
            rows.append((rng.uniform(0, 1000), f"s-{s}", length, rng.choice([0, 12, 90, 400])))
            length += rng.randint(-150, 700)  # sometimes shorter than its history: dropped
            length = max(length, 20)
    rows += [(rng.uniform(0, 1000), "", rng.randint(30, 900), 20) for _ in range(sessions)]
    rows.sort()
    path.write_text(
        "Timestamp,Session ID,Model,Request tokens,Response tokens\n"
        + "".join(f"{t:.3f},{s},ChatGPT,{n},{o}\n" for t, s, n, o in rows)
    )


def _import(path, counter, **opts):
    return import_trace(
        "burstgpt", path, ImportOptions(**(opts or {"mix": {"chat": 1, "code": 1}})), counter=counter
    ).rows


def test_turns_keep_their_history_and_every_count_is_exact(tmp_path):
    path = tmp_path / "s.csv"
    _trace(path, 8, 6)
    counter = FakeCounter()
    rows = _import(path, counter)
    by_session: dict[str, list] = {}
    for r in rows:
        note = json.loads(r.content_note)
        assert note["reached_tokens"] == counter.chat(r.chat()), r.prompt_id
        assert "composed_for" in note  # the user message is a bucket's content
        if r.session_id is not None:
            by_session.setdefault(r.session_id, []).append(r)
    dropped = kept = 0
    for turns in by_session.values():
        assert len({r.category for r in turns}) == 1 and [r.turn_index for r in turns] == list(range(6))
        assert turns[0].prompt is not None and "history" not in json.loads(turns[0].content_note)
        for before, after in zip(turns, turns[1:]):
            history = json.loads(after.content_note).get("history", "")
            m0, m1 = before.chat(), after.chat()
            if history.startswith("dropped"):
                dropped += 1
                assert len(m1) == 1 and after.prompt is not None
            else:
                kept += 1
                assert "earlier message(s) + stand-in reply of" in history
                assert m1[: len(m0)] == m0 and [m["role"] for m in m1[len(m0) :]] == ["assistant", "user"]
                assert len(m1) == len(m0) + 2 and after.prompt is None
    assert kept >= 12 and dropped >= 1


def test_the_reply_follows_the_previous_turns_output_and_is_capped(tmp_path):
    path = tmp_path / "s.csv"
    path.write_text("Timestamp,Session ID,Request tokens,Response tokens\n0,a,100,60\n1,a,500,400\n2,a,1500,5\n")
    counter = FakeCounter()
    t0, t1, t2 = _import(path, counter, category="chat")
    r1, r2 = t1.chat()[1]["content"], t2.chat()[3]["content"]
    assert "stand-in reply of" in json.loads(t1.content_note)["history"]
    used1 = int(json.loads(t1.content_note)["history"].split("reply of ")[1].split()[0])
    used2 = int(json.loads(t2.content_note)["history"].split("reply of ")[1].split()[0])
    assert 20 <= used1 <= 60 and 200 <= used2 <= 256  # about the previous output, at most 256 tokens
    assert counter.text(r1) <= counter.text(r2)


def test_the_sum_is_the_real_count_with_the_served_models_tokenizer(tmp_path, model_dir):
    path = tmp_path / "s.csv"
    _trace(path, 6, 5, seed=9)
    counter = FastTokenCounter(model_dir)
    rows = _import(path, counter, mix={"chat": 1, "code": 1, "translate": 1})
    assert sum(r.session_id is not None and r.turn_index > 0 and r.prompt is None for r in rows) >= 10
    for r in rows:
        assert json.loads(r.content_note)["reached_tokens"] == counter.chat(r.chat()), r.prompt_id


def test_no_tokenizing_per_row_once_the_buckets_are_made(tmp_path):
    small, large = tmp_path / "small.csv", tmp_path / "large.csv"
    lines = [f"{i},s-{i % 7},300,40\n" for i in range(70)]  # every session: 300 tokens a turn, so few buckets
    small.write_text("Timestamp,Session ID,Request tokens,Response tokens\n" + "".join(lines))
    large.write_text(
        "Timestamp,Session ID,Request tokens,Response tokens\n" + "".join(f"{i},s-{i % 7},300,40\n" for i in range(700))
    )
    a, b = Counting(), Counting()
    _import(small, a, category="chat")
    rows = _import(large, b, category="chat")
    assert a.calls == b.calls  # before: each turn composed and tokenized whole (700 rows: ~10x the calls)
    assert all(json.loads(r.content_note)["reached_tokens"] == FakeCounter().chat(r.chat()) for r in rows)


def test_a_counter_that_is_not_additive_gets_each_turn_tokenized_whole(tmp_path):
    path = tmp_path / "s.csv"
    _trace(path, 3, 4, seed=5)
    counter = Glued()
    rows = _import(path, counter, category="chat")
    later = [r for r in rows if r.turn_index]
    assert later and all("composed_for" not in json.loads(r.content_note) for r in later)
    assert all(json.loads(r.content_note)["reached_tokens"] == counter.chat(r.chat()) for r in rows)
