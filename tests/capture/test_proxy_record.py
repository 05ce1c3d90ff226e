"""From a proxied exchange to a traffic row: fields as sent, recorded length,
natural end, session and turn, category (header, rules, unknown) and the two
content modes."""

import json

import pytest

from specdec.capture.proxy.record import COUNTED_NOTE, NO_TEMPERATURE_NOTE, Exchange, NotRecorded, RowMaker
from specdec.capture.proxy.redact import Redactor, approx_tokens
from specdec.capture.proxy.rules import CategoryRule, CategoryRules, load_rules
from specdec.errors import InputFileError
from specdec.schemas.records import TrafficRow

SSE = (
    b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n'
    b'data: {"choices":[{"delta":{"content":"Hel"}}]}\n\n'
    b'data: {"choices":[{"delta":{"content":"lo"},"finish_reason":"stop"}]}\n\n'
    b'data: {"choices":[],"usage":{"prompt_tokens":11,"completion_tokens":3}}\n\n'
    b"data: [DONE]\n\n"
)
CHAT = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Say hello to Zorblax"},
    {"role": "assistant", "content": "Hello Zorblax"},
    {"role": "user", "content": "Again, to Quuxine"},
]


def exchange(
    body: dict,
    sse: bytes = SSE,
    *,
    path="/v1/chat/completions",
    category=None,
    session=None,
    status=200,
    content_type="text/event-stream",
    complete=True,
) -> Exchange:
    return Exchange(
        prompt_id="px-1",
        path=path,
        arrival_ms=12.5,
        wall_ns=0,
        body=json.dumps(body).encode(),
        category=category,
        session=session,
        status=status,
        content_type=content_type,
        chunks=[sse[:30], sse[30:]],
        complete=complete,
    )


def test_a_chat_request_becomes_a_row_with_its_settings_as_sent():
    body = {
        "model": "m1",
        "messages": CHAT,
        "stream": True,
        "temperature": 0.7,
        "top_p": 0.9,
        "top_k": 20,
        "seed": 5,
        "stop": "END",
        "max_tokens": 100,
        "response_format": {"type": "json_object"},
    }
    row = RowMaker().row(exchange(body, session="s-1"))
    assert json.loads(row["messages"]) == CHAT
    assert (row["temperature"], row["top_p"], row["top_k"], row["seed"], row["stop"], row["model"]) == (
        0.7,
        0.9,
        20,
        5,
        ["END"],
        "m1",
    )
    # the recorded length (usage), not the max_tokens the client asked for
    assert row["max_tokens"] == row["recorded_output_tokens"] == 3
    assert row["input_tokens"] == 11 and row["ended_naturally"] is True
    assert row["session_id"] == "s-1" and row["turn_index"] == 1  # one earlier assistant message
    assert row["arrival_ms"] == 12.5 and row["source"] == "proxy" and row["category"] == "unknown"
    assert json.loads(row["response_format"]) == {"type": "json_object"} and row["tools"] is None
    assert row["content_note"] is None and row["prompt"] is None
    TrafficRow.model_validate(row)


def test_without_a_usage_block_the_length_is_counted_from_output_chunks():
    sse = SSE.replace(b',"usage":{"prompt_tokens":11,"completion_tokens":3}', b"")
    row = RowMaker().row(exchange({"messages": CHAT[:2]}, sse))
    # the role-only first chunk carries no output: 2, not 3
    assert row["max_tokens"] == 2 and row["input_tokens"] is None
    # not sent: the OpenAI default, and the row says it was not sent
    assert row["temperature"] == 1.0 and row["content_note"] == f"{COUNTED_NOTE}; {NO_TEMPERATURE_NOTE}"
    assert row["session_id"] is None and row["turn_index"] is None


def test_a_length_limit_is_not_a_natural_end_and_a_plain_json_reply_is_read():
    reply = {
        "choices": [{"message": {"content": "ab"}, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 4, "completion_tokens": 7},
    }
    row = RowMaker().row(exchange({"messages": CHAT[:2]}, json.dumps(reply).encode(), content_type="application/json"))
    assert row["ended_naturally"] is False and row["max_tokens"] == 7 and row["input_tokens"] == 4


def test_a_completions_request_is_recorded_as_one_prompt():
    sse = b'data: {"choices":[{"text":"x","finish_reason":"length"}],"usage":{"prompt_tokens":2,"completion_tokens":1}}\n\n'
    row = RowMaker().row(exchange({"prompt": "def f(", "temperature": 0}, sse, path="/v1/completions"))
    assert row["prompt"] == "def f(" and row["messages"] is None and "completions" in row["content_note"]


@pytest.mark.parametrize(
    "change, reason",
    [
        ({"status": 500}, "status_500"),
        ({"complete": False}, "incomplete"),
        ({"body": {"messages": CHAT, "n": 2}}, "n_above_1"),
        ({"body": {"prompt": "x"}}, "no_messages"),
        ({"sse": b"data: [DONE]\n\n"}, "empty_response"),
        ({"body": {"messages": CHAT, "temperature": 5}}, "invalid_temperature"),
        ({"body": {"messages": CHAT}, "category": " code"}, "invalid_category"),
    ],
)
def test_exchanges_that_make_no_row_say_why(change, reason):
    kw = {"body": {"messages": CHAT}, **change}
    with pytest.raises(NotRecorded) as exc:
        RowMaker().row(exchange(kw.pop("body"), **kw))
    assert exc.value.reason == reason


def test_category_header_wins_over_rules_and_rules_go_in_order():
    rules = CategoryRules(
        [
            CategoryRule(category="code", content=r"def \w+\("),
            CategoryRule(category="chat", model="chat-.*"),
            CategoryRule(category="legacy", route="/v1/completions"),
        ]
    )
    maker = RowMaker(rules)
    code = [{"role": "user", "content": "fix def main(): pass"}]
    assert maker.row(exchange({"messages": code, "model": "chat-1"}))["category"] == "code"
    assert maker.row(exchange({"messages": CHAT, "model": "chat-1"}))["category"] == "chat"
    assert maker.row(exchange({"messages": CHAT, "model": "chat-1"}, category="mine"))["category"] == "mine"
    assert maker.row(exchange({"messages": CHAT, "model": "other-chat-1"}))["category"] == "unknown"  # full match
    assert maker.row(exchange({"prompt": "hi"}, path="/v1/completions"))["category"] == "legacy"


def test_rules_file_is_checked_and_problems_name_the_rule(tmp_path):
    good = tmp_path / "rules.json"
    good.write_text(json.dumps({"rules": [{"category": "code", "content": "```"}]}))
    assert load_rules(good).category("/v1/chat/completions", None, "see ```py") == "code"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"rules": [{"category": "code", "content": "x"}, {"category": "c", "model": "("}]}))
    with pytest.raises(InputFileError, match=r"bad.json, field 'model': rule 2: .*regular expression"):
        load_rules(bad)
    bad.write_text(json.dumps({"rules": [{"category": "code"}]}))
    with pytest.raises(InputFileError, match="at least one of route, model and content"):
        load_rules(bad)
    bad.write_text(json.dumps({"rule": []}))
    with pytest.raises(InputFileError, match='"rules"'):
        load_rules(bad)


def test_hash_mode_keeps_structure_and_replaces_every_text():
    tools = [{"type": "function", "function": {"name": "get_secret_weather", "parameters": {"type": "object"}}}]
    parts = [{"role": "user", "content": [{"type": "text", "text": "Quuxine parts"}]}]
    body = {"messages": CHAT + parts, "tools": tools, "stop": ["Zorblax"]}
    red = Redactor()
    row = RowMaker(redactor=red).row(exchange(body))
    text = json.dumps(row, ensure_ascii=False)
    for secret in ("terse", "Zorblax", "Quuxine", "get_secret_weather"):
        assert secret not in text
    messages = json.loads(row["messages"])
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "user"]
    assert messages[1]["content"] == red.text("Say hello to Zorblax")
    hexdigest, n = messages[1]["content"].split(":")[1:]
    assert len(hexdigest) == 64 and n == "4"  # Say / hello / to / Zorblax
    assert messages[4]["content"][0]["type"] == "text"
    assert json.loads(row["tools"])[0]["type"] == "function"
    assert row["content_note"].startswith("redacted (--content hash)") and "approx-v1" in row["content_note"]
    TrafficRow.model_validate(row)


def test_the_token_approximation_counts_words_punctuation_and_cjk_characters():
    assert approx_tokens("Hello, world!") == 4
    assert approx_tokens("你好世界") == 4
    assert approx_tokens("x_1 = 2") == 5  # x / _ / 1 / = / 2
    assert approx_tokens("") == 0


def test_a_tokenizer_file_gives_the_token_lengths_and_is_named(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({"[UNK]": 0, "hello": 1}, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    red = Redactor.from_tokenizer_file(tmp_path / "tokenizer.json")
    assert red.text("hello big world, hello").endswith(":5")  # hello / big / world / , / hello
    assert f"tokenizer:{tmp_path / 'tokenizer.json'}" in red.note()
