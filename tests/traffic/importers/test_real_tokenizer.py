"""With the served model's own tokenizer and chat template (the prepared
SmolLM2 folder), composed rows reach their input length within tolerance and
each content_note states the real count."""

from __future__ import annotations

import json

from specdec.replay.http.client import build_payload
from specdec.traffic.importers import ImportOptions, import_trace
from specdec.traffic.prompt_pool import HFTokenCounter


def test_azure_conversation_excerpt_with_the_real_tokenizer(traces, model_dir):
    counter = HFTokenCounter(model_dir)
    report = import_trace("azure", traces / "azure_conv_excerpt.csv", ImportOptions(), counter=counter)
    assert len(report.rows) == 12
    for row in report.rows:
        note = json.loads(row.content_note)
        assert note["reached_tokens"] == counter.chat(row.chat())
        assert note["status"] == "ok" and abs(note["reached_tokens"] - row.input_tokens) <= note["tolerance"]


def test_sessions_are_sent_as_chat_messages(traces, model_dir):
    counter = HFTokenCounter(model_dir)
    report = import_trace(
        "burstgpt", traces / "burstgpt_sessions.csv", ImportOptions(mix={"chat": 0.5, "code": 0.5}), counter=counter
    )
    last = [r for r in report.rows if r.session_id == "s-17"][-1]
    body = build_payload("served", last)
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user", "assistant", "user"]
    assert body["max_tokens"] == 80 and body["ignore_eos"] is True
