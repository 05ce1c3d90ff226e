"""Mooncake rows composed from cached prefix blocks (``importers.blocks``):
no row's whole chat is tokenized, yet every row's note states its exact
count (with the tests' word counter and with SmolLM2's own tokenizer), and
rows sharing hash ids share their blocks' text exactly (issue 24)."""

from __future__ import annotations

import json
import os
import random

from specdec.traffic.importers import ImportOptions, import_trace
from specdec.traffic.importers.blocks import BlockComposer, _spans
from specdec.traffic.importers.tokens import FastTokenCounter
from tests.support.fake_counter import FakeCounter


class Watching(FakeCounter):
    """The word counter, remembering the longest text it was asked to count."""

    longest = 0

    def text(self, text: str) -> int:
        self.longest = max(self.longest, len(text))
        return super().text(text)

    def chat(self, messages: list[dict]) -> int:
        self.longest = max(self.longest, sum(len(m["content"]) for m in messages))
        return super().chat(messages)


def _trace(path, rows: int, seed: int = 7) -> None:
    """Rows of 4-12 blocks: a few shared leading blocks, then their own; lengths between blocks."""
    rng, next_id, lines = random.Random(seed), 100, []
    for i in range(rows):
        shared = list(range(rng.choice([0, 2, 4])))
        own = list(range(next_id, next_id + rng.randint(4, 8)))
        next_id += len(own)
        ids = shared + own
        length = 512 * (len(ids) - 1) + rng.randint(40, 500)
        lines.append(json.dumps({"timestamp": 10 * i, "input_length": length, "output_length": 8, "hash_ids": ids}))
    path.write_text("\n".join(lines) + "\n")


def test_no_row_chat_is_tokenized_whole_and_every_note_is_exact(tmp_path):
    path = tmp_path / "t.jsonl"
    _trace(path, 40)
    counter = Watching()
    rows = import_trace("mooncake", path, ImportOptions(mix={"chat": 1, "code": 1}), counter=counter).rows
    # before: each row's whole chat went through the counter (up to 4 times)
    assert counter.longest < min(len(r.prompt) for r in rows)
    plain, notes = FakeCounter(), [json.loads(r.content_note) for r in rows]
    assert [n["reached_tokens"] for n in notes] == [plain.chat(r.chat()) for r in rows]
    # short: the row's blocks wrapped onto material its shared blocks hold (the trace outgrows the pool)
    assert {n["status"] for n in notes} <= {"ok", "short"} and sum(n["status"] == "ok" for n in notes) >= 25
    assert all(abs(n["reached_tokens"] - n["target_tokens"]) <= n["tolerance"] for n in notes if n["status"] == "ok")


def test_the_sum_is_the_real_count_with_the_served_models_tokenizer(tmp_path, model_dir):
    # byte-level BPE: ". " + "The" is "." " The", so a join can take a token away; the joins are measured
    path = tmp_path / "t.jsonl"
    _trace(path, 30, seed=11)
    counter = FastTokenCounter(model_dir)
    rows = import_trace(
        "mooncake", path, ImportOptions(mix={"chat": 1, "code": 1, "translate": 1}), counter=counter
    ).rows
    assert {json.loads(r.content_note)["status"] for r in rows} <= {"ok", "short"}
    assert [json.loads(r.content_note)["reached_tokens"] for r in rows] == [counter.chat(r.chat()) for r in rows]


def test_rows_with_the_same_blocks_share_the_whole_blocks_text(tmp_path):
    path = tmp_path / "t.jsonl"
    ids = list(range(8))
    path.write_text(
        "".join(
            json.dumps({"timestamp": i, "input_length": n, "output_length": 4, "hash_ids": ids}) + "\n"
            for i, n in enumerate((3700, 2300, 3900))
        )
    )
    a, b, c = (
        r.prompt for r in import_trace("mooncake", path, ImportOptions(category="chat"), counter=FakeCounter()).rows
    )
    shared = os.path.commonprefix([a, b])
    assert FakeCounter().text(shared) >= 2000  # four whole blocks of 512 tokens and more
    assert os.path.commonprefix([a, c]) >= shared and len(os.path.commonprefix([a, c])) > len(shared)


def test_block_ids_map_to_fixed_starts_and_wrap_around_the_material(counter):
    from specdec.traffic.prompt_pool import Unit

    stream = [Unit("p", f"Word{i} here. ", 3) for i in range(400)]  # 1,200 tokens: two blocks and a bit
    blocks = BlockComposer(stream, counter)
    assert [blocks.start_of(h) for h in (5, 10**12, 5, 7)] == [0, 171, 0, 342]  # 171 units of 3 = 513 tokens
    assert blocks.start_of(7) == 342 and len(blocks.block(342).units) == 171  # wraps: 58 units, then 113
    assert _spans(342, 171, 400) == [(342, 400), (0, 113)]
    assert [b.start for b in blocks.row_blocks((5, 10**12, 7))] == [0, 171]  # block 7 overlaps block 5


def test_short_rows_are_composed_once_and_said_as_compose_says(tmp_path):
    # 2 tokens: the prompt alone is longer ("over", no tokenizing); 90: cut within the first unit
    path = tmp_path / "t.jsonl"
    lines = [
        json.dumps({"timestamp": i, "input_length": n, "output_length": 4, "hash_ids": [7]})
        for i, n in enumerate([2, 90] * 30)
    ]
    path.write_text("\n".join(lines) + "\n")

    class Counting(FakeCounter):
        calls = 0

        def chat(self, messages):
            self.calls += 1
            return super().chat(messages)

    counter = Counting()
    rows = import_trace("mooncake", path, ImportOptions(category="chat"), counter=counter).rows
    notes = [json.loads(r.content_note) for r in rows]
    assert {n["status"] for n in notes[::2]} == {"over"} and {n["status"] for n in notes[1::2]} == {"ok"}
    assert [n["reached_tokens"] for n in notes] == [FakeCounter().chat(r.chat()) for r in rows]
    by_prompt = {}
    for r, n in zip(rows[1::2], notes[1::2]):
        assert by_prompt.setdefault(n["pool_prompt"], r.prompt) == r.prompt  # one composition per prompt, reused
    assert len(by_prompt) < 30
    assert (
        counter.calls < 40
    )  # 26 here (the prompts' own counts, 8 compositions); before: one or more per row (60 rows)
