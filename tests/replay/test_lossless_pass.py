"""The lossless pass: logprob parsing from a real vLLM 0.32 stream,
typed failures, the closed loop, the GreedyCheck table, end-of-sequence ids."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from specdec.model import eos_ids_for_gguf, eos_ids_for_model
from specdec.replay.passes.lossless import (
    PASS_ERROR_TYPES,
    completion_one,
    greedy_table,
    lossless_one,
    lossless_pass,
    natural_end_position,
)
from specdec.schemas.records import GreedyCheck, TrafficRow
from tests.support.fake_server import GOOD_SSE, FakeVllm, serving

ROW = TrafficRow(prompt_id="p1", category="code", prompt="Repeat exactly: alpha beta gamma", max_tokens=16)
RID = "sd.fx.speculative.c1.r0.00000.lossless"
# The recorded stream (vLLM 0.32 CPU, float32, ngram k=4, prompt_lookup_min 1): 16 tokens in 7
# events; <|im_end|> (id 2) at positions 6, 8 and 12, generation carried on (ignore_eos).
FIXTURE_IDS = [48010, 3869, 42, 11189, 11345, 16439, 2, 198, 2, 1, 9690, 198, 2, 198, 1, 4093]


def _verify(fake: FakeVllm, eos=frozenset({2}), row: TrafficRow = ROW):
    async def go():
        async with serving(fake.server()) as (s, base):
            return await lossless_one(s, base, "m", row, RID, eos_token_ids=eos)

    return asyncio.run(go())


def _event(content: list | None, text: str = "x") -> bytes:
    choice = {"index": 0, "delta": {"content": text}, "logprobs": None if content is None else {"content": content}}
    return b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n"


def _entry(tid: int, lp: float, top: list[tuple[int, float]]) -> dict:
    return {
        "token": f"token_id:{tid}",
        "logprob": lp,
        "top_logprobs": [{"token": f"token_id:{t}", "logprob": v} for t, v in top],
    }


def _stream(*events: bytes, completion_tokens: int) -> bytes:
    usage = {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": completion_tokens}}
    return b"".join(events) + b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n"


def _positions_per_event(fixtures) -> list[int]:
    events = [
        json.loads(line[5:])
        for line in (fixtures / "vllm_chat_stream_logprobs.sse").read_text().splitlines()
        if line.startswith("data: {")
    ]
    return [len(c["logprobs"]["content"]) for e in events for c in e["choices"] if c.get("logprobs")]


def test_parses_the_recorded_vllm_logprobs_stream(fixtures):
    fake = FakeVllm((fixtures / "vllm_chat_stream_logprobs.sse").read_bytes())
    res = _verify(fake)
    assert res.stream.success and res.stream.error_type is None and res.stream.output_tokens == 16
    assert res.token_ids == FIXTURE_IDS
    # several tokens per stream event under speculation: 16 positions from 7 events
    assert _positions_per_event(fixtures) == [1, 5, 3, 1, 3, 1, 2]
    # position 0: "Repeat" (48010) over token 49; position 4: " beta" with a wide margin
    assert res.top1_logprobs[0] == pytest.approx(-2.0051002502441406)
    assert res.top2_logprobs[0] == pytest.approx(-2.5505123138427734)
    assert res.top2_token_ids[0] == 49
    assert res.top1_logprobs[4] - res.top2_logprobs[4] == pytest.approx(-0.028198285028338432 + 5.366790771484375)
    assert len(res.top1_logprobs) == len(res.top2_logprobs) == len(res.top2_token_ids) == 16
    # the model would have stopped at its first <|im_end|>
    assert res.natural_end_position == 6
    body = fake.bodies[0]
    assert body["logprobs"] is True and body["top_logprobs"] == 2 and body["return_tokens_as_token_ids"] is True
    assert body["temperature"] == 0.0 and body["ignore_eos"] is True and body["max_tokens"] == 16
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


def test_greedy_request_is_sent_greedy_even_for_a_sampled_row(fixtures):
    fake = FakeVllm((fixtures / "vllm_chat_stream_logprobs.sse").read_bytes())
    _verify(fake, row=ROW.model_copy(update={"temperature": 0.7}))
    assert fake.bodies[0]["temperature"] == 0.0


def test_top_logprobs_decide_top1_and_top2_whatever_their_order():
    # a tie listed second-first, and the emitted token's own logprob disagreeing
    sse = _stream(_event([_entry(5, -0.9, [(6, -0.5), (5, -0.5)]), _entry(7, -0.1, [(7, -0.1)])]), completion_tokens=2)
    res = _verify(FakeVllm(sse))
    assert res.stream.success
    assert res.token_ids == [5, 7]
    assert res.top1_logprobs == [-0.5, -0.1]
    assert res.top2_logprobs == [-0.5, None] and res.top2_token_ids == [5, None]


def _llama_entry(tid: int, lp: float, top: list[tuple[int, float]]) -> dict:
    """An entry as llama-server writes it: the text token, an integer id, bytes (no token_id: form)."""
    return {
        "id": tid,
        "token": f"t{tid}",
        "bytes": [116],
        "logprob": lp,
        "top_logprobs": [{"id": t, "token": f"t{t}", "bytes": [116], "logprob": v} for t, v in top],
    }


class FakeLlama:
    """llama-server's two endpoints of the lossless pass, answering with a recorded /completion reply."""

    def __init__(self, reply: dict | None = None, status: int = 200) -> None:
        self.reply, self.status = reply, status
        self.bodies: list[tuple[str, dict]] = []

    async def apply_template(self, request):
        self.bodies.append(("/apply-template", await request.json()))
        return web.json_response({"prompt": "<|im_start|>user\nCount<|im_end|>\n<|im_start|>assistant\n"})

    async def completion(self, request):
        self.bodies.append(("/completion", await request.json()))
        if self.status != 200:
            return web.json_response({"error": {"message": "boom"}}, status=self.status)
        return web.json_response(self.reply)

    def server(self) -> TestServer:
        app = web.Application()
        app.router.add_post("/apply-template", self.apply_template)
        app.router.add_post("/completion", self.completion)
        return TestServer(app)


def _native(fake: FakeLlama, eos=frozenset({2}), row: TrafficRow = ROW):
    async def go():
        async with serving(fake.server(), transport="aiohttp") as (s, base):
            return await completion_one(s, base, "m", row, RID, eos_token_ids=eos)

    return asyncio.run(go())


def _recorded(fixtures, arm: str) -> dict:
    return json.loads((fixtures / "llama_cpp" / f"completion_logprobs_{arm}.json").read_text())


def test_llama_cpp_checks_read_every_position_of_its_own_endpoint_the_speculated_ones_without_top2(fixtures):
    base, spec = (_native(FakeLlama(_recorded(fixtures, arm))) for arm in ("baseline", "ngram"))
    for res in (base, spec):
        assert res.stream.success and res.stream.output_tokens == 48 and len(res.token_ids) == 48
    assert base.token_ids == spec.token_ids  # greedy: the same 48 ids with and without ngram-mod
    assert all(t is not None for t in base.top2_token_ids)  # no speculation: every position ranked
    # ngram-mod drafted 10 and all were accepted: positions 37-47 came from the speculative path
    assert [i for i, t in enumerate(spec.top2_token_ids) if t is None] == list(range(37, 48))
    assert spec.top1_logprobs[40] == 0.0 and spec.top2_logprobs[40] is None
    assert base.top1_logprobs[10] == pytest.approx(-0.36803147196769714) and base.top2_token_ids[10] == 198
    assert base.natural_end_position is None  # end-of-sequence never ranked first in 48 tokens
    row = greedy_table("t", "speculative", 1, 0, [(ROW, spec)]).to_pylist()[0]
    GreedyCheck.model_validate(row)


def test_llama_cpp_checks_send_the_rows_messages_greedy_with_two_alternatives(fixtures):
    fake = FakeLlama(_recorded(fixtures, "baseline"))
    _native(fake, row=ROW.model_copy(update={"temperature": 0.7, "max_tokens": 48}))
    (p1, template), (p2, body) = fake.bodies
    assert (p1, p2) == ("/apply-template", "/completion") and template == {"messages": ROW.chat()}
    assert body["prompt"].endswith("assistant\n") and body["n_predict"] == 48 and body["temperature"] == 0.0
    assert body["n_probs"] == 2 and body["ignore_eos"] is True and body["stream"] is False


@pytest.mark.parametrize(
    "change, problem",
    [
        (lambda r: r.update(completion_probabilities=r["completion_probabilities"][:-1]), "47 probability entries"),
        (lambda r: r.update(tokens=[*r["tokens"][:-1], 7]), "position 47: token 7"),
        (lambda r: r.update(tokens_predicted=50), "50 completion token(s)"),
        (lambda r: r.pop("tokens"), "KeyError"),
    ],
)
def test_a_malformed_completion_reply_is_a_typed_failure(fixtures, change, problem):
    reply = _recorded(fixtures, "baseline")
    change(reply)
    res = _native(FakeLlama(reply))
    assert not res.stream.success and res.stream.error_type == "bad_logprobs", res.stream
    assert problem in res.stream.error_message


def test_a_llama_cpp_check_that_fails_is_a_row():
    res = _native(FakeLlama(status=503))
    assert not res.stream.success and res.stream.error_type == "http_status" and res.stream.http_status == 503
    assert "HTTP 503 from /completion" in res.stream.error_message
    row = greedy_table("t", "baseline", 1, 0, [(ROW, res)]).to_pylist()[0]
    assert row["success"] is False and row["token_ids"] == []


def test_the_natural_end_is_where_end_of_sequence_ranked_first_though_another_token_was_emitted():
    # llama.cpp's ignore_eos bans end-of-sequence by a logit bias: at position 1 it still ranks first
    # in the raw alternatives, and the emitted token is the runner-up
    entries = [
        _llama_entry(5, -0.2, [(5, -0.2), (6, -1.9)]),
        _llama_entry(8, -1.4, [(2, -0.3), (8, -1.4)]),
        _llama_entry(2, -0.5, [(2, -0.5), (3, -1.0)]),
    ]
    res = _verify(FakeVllm(_stream(*(_event([e]) for e in entries), completion_tokens=3)))
    assert res.token_ids == [5, 8, 2] and res.natural_end_position == 1
    # positions without alternatives (a speculated token) do not shift the position found
    entries = [_llama_entry(5, 0.0, []), _llama_entry(6, 0.0, []), _llama_entry(8, -1.4, [(2, -0.3), (8, -1.4)])]
    res = _verify(FakeVllm(_stream(*(_event([e]) for e in entries), completion_tokens=3)))
    assert res.natural_end_position == 2
    res = _verify(FakeVllm(_stream(*(_event([e]) for e in entries), completion_tokens=3)), eos=None)
    assert res.natural_end_position is None


def test_eos_ids_for_gguf_reads_the_end_tokens_of_its_metadata(tmp_path):
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "m.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_eos_token_id(2)
    w.add_eot_token_id(7)
    w.add_bos_token_id(1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    assert eos_ids_for_gguf(path) == frozenset({2, 7})
    (tmp_path / "bad.gguf").write_bytes(b"not a gguf file")
    assert eos_ids_for_gguf(tmp_path / "bad.gguf") is None and eos_ids_for_gguf(tmp_path / "absent.gguf") is None


@pytest.mark.parametrize(
    "sse, problem",
    [
        (GOOD_SSE, "no logprobs"),  # a server that ignored logprobs
        (_stream(_event([_entry(5, -0.1, [(5, -0.1), (6, -2.0)])]), completion_tokens=2), "1 position"),
        (
            _stream(_event([{"token": "hello", "logprob": -0.1, "top_logprobs": []}]), completion_tokens=1),
            "token_id:<n>",
        ),  # return_tokens_as_token_ids ignored: text tokens
        (_stream(_event([{"token": "token_id:5"}]), completion_tokens=1), "malformed"),  # no logprob
    ],
)
def test_bad_logprobs_are_a_typed_failure(sse, problem):
    res = _verify(FakeVllm(sse))
    assert not res.stream.success and res.stream.error_type == "bad_logprobs"
    assert problem in res.stream.error_message
    assert "bad_logprobs" in PASS_ERROR_TYPES


def test_transport_failures_are_typed_as_in_the_client(fixtures):
    res = _verify(FakeVllm(b"", status=500))
    assert not res.stream.success and res.stream.error_type == "http_status" and res.stream.http_status == 500
    cut = (fixtures / "vllm_chat_stream_logprobs.sse").read_bytes().replace(b"data: [DONE]\n\n", b"")
    res = _verify(FakeVllm(cut))
    assert res.stream.error_type == "stream_truncated"
    assert res.token_ids == FIXTURE_IDS  # what arrived is kept


def test_verify_pass_keeps_level_requests_in_flight_and_tables_as_greedy_checks(fixtures):
    fake = FakeVllm((fixtures / "vllm_chat_stream_logprobs.sse").read_bytes(), delay_s=0.01)
    rows = [ROW.model_copy(update={"prompt_id": f"p{i}", "category": "chat" if i % 2 else "code"}) for i in range(5)]

    async def go():
        async with serving(fake.server()) as (s, base):
            return await lossless_pass(
                s, base, "m", rows, 2, lambda i: f"sd.t.baseline.c2.r0.{i:05d}.lossless", None, frozenset({2})
            )

    results = asyncio.run(go())
    assert fake.max_in_flight == 2 and len(results) == 5
    assert sorted(fake.request_ids) == [f"sd.t.baseline.c2.r0.{i:05d}.lossless" for i in range(5)]
    table = greedy_table("t", "baseline", 2, 0, results)
    assert table.schema.names == list(GreedyCheck.model_fields)
    got = {r["prompt_id"]: r for r in table.to_pylist()}
    assert set(got) == {f"p{i}" for i in range(5)}
    p3 = got["p3"]
    assert p3["request_id"] == next(r.stream.request_id for row, r in results if row.prompt_id == "p3")
    assert (p3["arm"], p3["level"], p3["repeat"], p3["category"]) == ("baseline", 2, 0, "chat")
    assert p3["success"] and p3["error_type"] is None
    assert p3["token_ids"] == FIXTURE_IDS and p3["natural_end_position"] == 6 and p3["eos_token_ids"] == [2]
    assert p3["top2_token_ids"][0] == 49
    GreedyCheck.model_validate(p3)  # each row is a valid record


def test_unknown_eos_ids_give_no_natural_end(fixtures):
    res = _verify(FakeVllm((fixtures / "vllm_chat_stream_logprobs.sse").read_bytes()), eos=None)
    assert res.stream.success and res.natural_end_position is None
    row = greedy_table("t", "speculative", 1, 0, [(ROW, res)]).to_pylist()[0]
    assert row["natural_end_position"] is None and row["eos_token_ids"] is None


def test_failed_request_is_a_row_with_empty_lists():
    res = _verify(FakeVllm(b"", status=503))
    row = greedy_table("t", "speculative", 1, 0, [(ROW, res)]).to_pylist()[0]
    assert row["success"] is False and row["error_type"] == "http_status"
    assert row["token_ids"] == [] and row["top1_logprobs"] == [] and row["natural_end_position"] is None


def test_natural_end_position():
    assert natural_end_position([5, 2, 7, 2], frozenset({2})) == 1
    assert natural_end_position([2], frozenset({2, 9})) == 0
    assert natural_end_position([5, 9], frozenset({2, 9})) == 1
    assert natural_end_position([5, 7], frozenset({2})) is None  # never ended within max_tokens
    assert natural_end_position([5, 2], None) is None  # ids unknown
    assert natural_end_position([], frozenset({2})) is None


def _write(folder, name, obj):
    (folder / name).write_text(obj if isinstance(obj, str) else json.dumps(obj))


def test_eos_ids_for_model_reads_generation_config_config_and_tokenizer(tmp_path):
    _write(tmp_path, "generation_config.json", {"eos_token_id": [2, 7], "bos_token_id": 1})
    _write(tmp_path, "config.json", {"eos_token_id": 3})
    _write(tmp_path, "tokenizer_config.json", {"eos_token": {"content": "<|end|>"}})
    _write(
        tmp_path, "tokenizer.json", {"added_tokens": [{"id": 0, "content": "<unk>"}, {"id": 11, "content": "<|end|>"}]}
    )
    assert eos_ids_for_model(str(tmp_path)) == frozenset({2, 3, 7, 11})


def test_eos_ids_for_model_single_int_and_unknowns(tmp_path):
    _write(tmp_path, "config.json", {"eos_token_id": 2})
    assert eos_ids_for_model(tmp_path) == frozenset({2})
    empty = tmp_path / "empty"
    empty.mkdir()
    assert eos_ids_for_model(empty) is None  # nothing said: unknown, not "no end"
    _write(empty, "config.json", "{not json")
    _write(empty, "generation_config.json", {"eos_token_id": None})
    assert eos_ids_for_model(empty) is None
    _write(empty, "generation_config.json", {"eos_token_id": [True, -1, "2"]})  # not token ids
    assert eos_ids_for_model(empty) is None
    assert eos_ids_for_model(str(tmp_path / "no-such-folder")) is None
    assert eos_ids_for_model("specdec-target") is None  # an external server's model name


def test_a_llama_cpp_checks_failure_text_holds_no_secret_of_the_url():
    """A server that echoes the request's URL (its api_key query) into its error: the row's text
    is redacted as the stream's is (``redact_text`` with the endpoint's secrets)."""
    from specdec.http.urls import parse_endpoint

    class Echo(FakeLlama):
        async def completion(self, request):
            return web.json_response({"error": {"message": f"bad request to {request.url}"}}, status=400)

    async def go():
        async with serving(Echo().server(), transport="aiohttp") as (s, base):
            ep = parse_endpoint(base + "?api_key=s3cr3t-value")
            return await completion_one(s, ep, "m", ROW, RID)

    res = asyncio.run(go())
    assert res.stream.error_type == "http_status" and "s3cr3t-value" not in res.stream.error_message
    assert "***" in res.stream.error_message  # the echo was there, masked
