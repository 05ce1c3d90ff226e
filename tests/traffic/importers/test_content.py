"""Content for traces without text: prompts by category or mix, real context
composed up to the input length, shared prefixes, sessions, content_note."""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest

from specdec.traffic.importers import ImportOptions, import_trace
from specdec.traffic.prompt_pool import compose, load_pool, split_units, tolerance

SENTENCES = [
    f"Sentence number {w} is here."
    for w in ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
]


def tiny_pool(tmp_path):
    folder = tmp_path / "pool"
    folder.mkdir()
    prompts = [
        {"id": "c1", "category": "code", "tier": "high", "language": "en", "text": "Fix the bug."},
        {"id": "t1", "category": "chat", "tier": "low", "language": "en", "text": "How are you today?"},
    ]
    pieces = [{"id": "d1", "kind": "document", "language": "en", "title": "ten sentences", "text": " ".join(SENTENCES)}]
    (folder / "prompts.jsonl").write_text("".join(json.dumps(p) + "\n" for p in prompts))
    (folder / "context.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pieces))
    return load_pool(folder)


def test_compose_takes_real_sentences_in_order_until_the_target(tmp_path, counter):
    pool = tiny_pool(tmp_path)
    prompt = pool.prompts[0]  # "Fix the bug." = 4 tokens; as a chat 4 + 4 + 2 = 10
    units = split_units(pool.pieces[0], counter)
    assert [u.tokens for u in units][:2] == [6, 6]  # "Sentence number one is here. "
    done = compose(prompt, 40, units, counter)
    content = done.messages[-1]["content"]
    # 40 - 10 (chat) - 0 (separator) = 30 tokens of context: five whole sentences
    assert content == " ".join(SENTENCES[:5]) + "\n\nFix the bug."
    assert done.reached == counter.chat(done.messages) == 40 and done.status == "ok"
    assert done.context == [("d1", 30)] and done.cut is None


def test_compose_cuts_the_last_sentence_at_a_word(tmp_path, counter):
    pool = tiny_pool(tmp_path)
    done = compose(pool.prompts[0], 43, split_units(pool.pieces[0], counter), counter)
    assert done.messages[-1]["content"].startswith(" ".join(SENTENCES[:5]) + " Sentence number six\n\n")
    assert done.reached == 43 and done.cut == "d1"


def test_prompt_alone_longer_than_the_target_is_said(tmp_path, counter):
    pool = tiny_pool(tmp_path)
    done = compose(pool.prompts[0], 1, split_units(pool.pieces[0], counter), counter)
    assert done.status == "over" and done.messages == [{"role": "user", "content": "Fix the bug."}]
    assert done.reached == 10


def test_material_is_never_repeated_when_it_runs_out(tmp_path, counter):
    pool = tiny_pool(tmp_path)
    done = compose(pool.prompts[0], 500, split_units(pool.pieces[0], counter), counter)
    content = done.messages[-1]["content"]
    assert done.status == "short" and done.reached == 70  # 60 tokens of material + 10
    assert all(content.count(s) == 1 for s in SENTENCES)
    assert json.loads(done.note())["status"] == "short"


def test_tolerance():
    assert (tolerance(100), tolerance(800), tolerance(801), tolerance(5000)) == (8, 8, 9, 50)


def test_every_row_gets_a_prompt_of_its_category_and_a_true_note(traces, counter):
    report = import_trace("azure", traces / "azure_conv_excerpt.csv", ImportOptions(), counter=counter)
    pool = {p.id: p for p in load_pool().prompts}
    for row in report.rows:
        note = json.loads(row.content_note)
        assert pool[note["pool_prompt"]].category == row.category == "chat"
        assert row.chat()[-1]["content"].endswith(pool[note["pool_prompt"]].text)
        assert note["target_tokens"] == row.input_tokens
        assert note["reached_tokens"] == counter.chat(row.chat())  # the note tells the truth
        assert abs(note["reached_tokens"] - note["target_tokens"]) <= note["tolerance"] or note["status"] != "ok"
        assert note["context"][0].startswith("dlg-") or note["status"] == "over"  # chat reads dialogues first
    assert report.content["ok"] >= 10


def test_code_rows_read_code_first(traces, counter):
    report = import_trace("azure", traces / "azure_code_excerpt.csv", ImportOptions(), counter=counter)
    firsts = [json.loads(r.content_note)["context"][:1] for r in report.rows]
    assert all(f == [] or f[0].startswith("code-") for f in firsts)


def test_category_can_be_a_tier(traces, counter):
    report = import_trace(
        "mooncake", traces / "mooncake_small.jsonl", ImportOptions(category="medium"), counter=counter
    )
    assert {r.tier for r in report.rows} == {"medium"}
    assert {r.category for r in report.rows} <= {"summarize", "rewrite", "translate"}


def test_unknown_category_is_refused(traces, counter):
    from specdec.errors import SpecdecError

    with pytest.raises(SpecdecError, match="neither a category nor a tier"):
        import_trace("mooncake", traces / "mooncake_small.jsonl", ImportOptions(category="poetry"), counter=counter)
    with pytest.raises(SpecdecError, match="give --category or --mix"):
        import_trace("mooncake", traces / "mooncake_small.jsonl", ImportOptions(), counter=counter)


def test_mix_shares_follow_the_weights_and_the_seed(tmp_path, counter):
    path = tmp_path / "t.jsonl"
    path.write_text(
        "".join(
            json.dumps({"timestamp": i * 10, "input_length": 30, "output_length": 4, "hash_ids": []}) + "\n"
            for i in range(600)
        )
    )

    def shares(seed):
        r = import_trace("mooncake", path, ImportOptions(mix={"code": 3, "chat": 7}, seed=seed), counter=counter)
        return Counter(row.category for row in r.rows), [row.prompt for row in r.rows]

    (cats, texts), (again, texts_again) = shares(0), shares(0)
    assert cats == again and texts == texts_again
    assert set(cats) == {"code", "chat"} and cats["code"] / 600 == pytest.approx(0.3, abs=0.06)
    assert shares(1)[1] != texts


def test_rows_sharing_hash_ids_share_their_leading_text(traces, counter):
    report = import_trace("mooncake", traces / "mooncake_small.jsonl", ImportOptions(category="chat"), counter=counter)
    a, b, c, d, _ = (r.prompt for r in report.rows)  # hash_ids [0,1,2], [0,3], [0,1,2], [4,5]
    common = os.path.commonprefix
    block0 = len(common([a, b]))
    assert counter.text(a[:block0]) >= 500  # all of block 0 (512 tokens, whole sentences)
    assert len(common([a, c])) > block0  # blocks 0, 1, 2 shared
    assert counter.text(common([a, c])) >= 1000
    assert len(common([a, d])) < 40  # different first block: no shared prefix
    notes = [json.loads(r.content_note) for r in report.rows]
    assert [n["hash_blocks"] for n in notes[:2]] == ["3 of 3", "2 of 2"]


def test_input_length_can_be_capped(traces, counter):
    report = import_trace(
        "azure", traces / "azure_code_excerpt.csv", ImportOptions(max_input_tokens=1000), counter=counter
    )
    capped = [r for r in report.rows if r.input_tokens > 1000]
    assert report.capped == len(capped) == 6  # 4808, 3180, 7433, 6985, 1145, 7427
    for r in capped:
        note = json.loads(r.content_note)
        assert note["capped_from"] == r.input_tokens and note["target_tokens"] == 1000
        assert counter.chat(r.chat()) <= 1000 + tolerance(1000)


def test_sessions_replay_earlier_turns_as_context(traces, counter):
    report = import_trace("burstgpt", traces / "burstgpt_sessions.csv", ImportOptions(category="chat"), counter=counter)
    rows = {r.prompt_id: r for r in report.rows}
    t0, t1, t2 = (rows[f"burstgpt-r{n}"] for n in (2, 4, 6))
    assert [(r.session_id, r.turn_index) for r in (t0, t1, t2)] == [("s-17", 0), ("s-17", 1), ("s-17", 2)]
    m0, m1, m2 = t0.chat(), t1.chat(), t2.chat()
    assert m1[: len(m0)] == m0 and m1[len(m0)]["role"] == "assistant" and m1[-1]["role"] == "user"
    assert m2[: len(m1)] == m1 and len(m2) == 5
    assert rows["burstgpt-r5"].session_id == "s-42" and rows["burstgpt-r5"].turn_index == 0
    assert rows["burstgpt-r3"].session_id is None and rows["burstgpt-r3"].turn_index is None
    assert {t0.category, t1.category, t2.category} == {"chat"}
    for r in (t1, t2):
        note = json.loads(r.content_note)
        assert "earlier message" in note["history"] and note["reached_tokens"] == counter.chat(r.chat())


def test_fit_context_keeps_input_and_output_within_the_context(traces, counter):
    report = import_trace(
        "burstgpt", traces / "burstgpt_v1.csv", ImportOptions(category="chat", fit_context=200), counter=counter
    )
    # outputs 18, 250, 0 (-> 1), 42: the 250-token output leaves no room and is left out
    assert [r.max_tokens for r in report.rows] == [18, 1, 42] and report.unfit == 1
    for r in report.rows:
        note = json.loads(r.content_note)
        assert counter.chat(r.chat()) + r.max_tokens <= 200
        room = 200 - r.max_tokens
        assert note["target_tokens"] == min(r.input_tokens, room - tolerance(room))
    assert report.capped == 2  # 472 and 417 input tokens; 90 fits
    assert "1 whose output alone does not fit --fit-context 200" in "\n".join(report.lines())
