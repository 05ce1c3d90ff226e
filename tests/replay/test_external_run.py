"""Whole replays against external (fake) servers: a failed warm-up stops the
run with a clear message, secrets stay out of every file, captured rounds are
taken from the servers' capture folder, and counters are read once per arm,
level and position."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from aiohttp import web

from specdec.errors import EngineError, SpecdecError
from specdec.replay.experiment import run_replay
from specdec.replay.progress import Progress
from specdec.replay.runner import request_id
from specdec.schemas.arrow import table_from_columns, write_parquet_atomic
from specdec.schemas.records import RoundTrace
from tests.support.fake_server import FakeVllm, stub_config, threaded

SPEC_METRICS = (
    "vllm:spec_decode_num_drafts_total 0\nvllm:spec_decode_num_draft_tokens_total 0\n"
    "vllm:spec_decode_num_accepted_tokens_total 0\nvllm:generation_tokens_total 1\n"
)


def _all_text(run_dir) -> str:
    out = []
    for f in run_dir.rglob("*"):
        if f.is_file():
            out.append(f.read_bytes().decode("utf-8", "replace"))
    return "\n".join(out)


@pytest.mark.parametrize(
    "status, hint",
    [
        (501, "no OpenAI-compatible"),
        (404, "no OpenAI-compatible"),
        (401, "API key"),
    ],
)
def test_failed_warmup_stops_the_run_with_url_status_and_fix(tmp_path, fixtures, status, hint):
    with threaded(FakeVllm(status=status), FakeVllm(status=status)) as (b, s):
        with pytest.raises(EngineError) as e:
            run_replay(stub_config(tmp_path, fixtures, baseline_url=b, speculative_url=s))
    msg = str(e.value)
    assert b in msg and f"HTTP {status}" in msg and hint in msg
    manifest = json.loads((tmp_path / "runs" / "x" / "manifest.json").read_text())
    assert manifest["finished"] is False


def test_v1_suffix_is_named_as_the_likely_fix(tmp_path, fixtures):
    with threaded(FakeVllm(), FakeVllm()) as (b, s):
        with pytest.raises(EngineError, match="remove the /v1 suffix"):
            run_replay(stub_config(tmp_path, fixtures, baseline_url=b + "/v1", speculative_url=s + "/v1"))


def test_hung_server_fails_fast_with_short_timeouts(tmp_path, fixtures):
    with threaded(FakeVllm(hang_s=5), FakeVllm(hang_s=5)) as (b, s):
        with pytest.raises(EngineError, match="(?s)request_timeout.*sent nothing for 0.5 s"):
            run_replay(stub_config(tmp_path, fixtures, baseline_url=b, speculative_url=s, request_timeout_s=0.5))


def test_url_credentials_and_api_key_are_written_nowhere(tmp_path, fixtures, monkeypatch):
    monkeypatch.setenv("SPECDEC_TEST_KEY", "sk-live-abcdef123456")
    secrets = ("sk-live-abcdef123456", "pa55word99", "qwerty98765", "alice")

    def with_creds(url):
        return url.replace("http://", "http://alice:pa55word99@") + "?api_key=qwerty98765"

    key = "sk-live-abcdef123456"
    # a complete run: both servers want the key
    with threaded(FakeVllm(api_key=key), FakeVllm(api_key=key)) as (b, s):
        run_dir = run_replay(
            stub_config(
                tmp_path,
                fixtures,
                baseline_url=with_creds(b),
                speculative_url=with_creds(s),
                api_key_env="SPECDEC_TEST_KEY",
            )
        )
    everything = _all_text(run_dir)
    for secret in secrets:
        assert secret not in everything, secret
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["arms"][0]["endpoint"].startswith("http://***@127.0.0.1")
    # the requests authenticated with the key
    assert pq.read_table(run_dir / "requests.parquet").column("success").to_pylist() == [True] * 12
    # a stopped run: the error text and files name no secret either
    with threaded(FakeVllm(api_key=key), FakeVllm(status=500)) as (b, s):
        with pytest.raises(EngineError) as e:  # the speculative server fails its warm-up
            run_replay(
                stub_config(
                    tmp_path,
                    fixtures,
                    run_id="y",
                    baseline_url=with_creds(b),
                    speculative_url=with_creds(s),
                    api_key_env="SPECDEC_TEST_KEY",
                )
            )
    everything = _all_text(tmp_path / "runs" / "y") + str(e.value)
    for secret in secrets:
        assert secret not in everything, secret


def test_missing_api_key_variable_is_refused_before_anything_is_created(tmp_path, fixtures):
    with pytest.raises(SpecdecError, match="NOPE_NOT_SET"):
        run_replay(
            stub_config(
                tmp_path,
                fixtures,
                baseline_url="http://127.0.0.1:9",
                speculative_url="http://127.0.0.1:9",
                api_key_env="NOPE_NOT_SET",
            )
        )
    assert not (tmp_path / "runs").exists()


def test_bad_url_is_refused_before_anything_is_created(tmp_path, fixtures):
    with pytest.raises(SpecdecError, match="--baseline-url"):
        run_replay(stub_config(tmp_path, fixtures, baseline_url="ftp://x", speculative_url="http://127.0.0.1:9"))
    assert not (tmp_path / "runs").exists()


def _fake_capture(folder, run_id: str, other_run: str) -> None:
    """What a sidecar's capture folder holds: rows of this run's speculative
    requests (3 prompts x 2 levels, 2 verify rounds each) and someone else's."""
    cols = {f: [] for f in RoundTrace.model_fields}

    def add(engine_id, step, k, a):
        vals = dict(
            run_id="adhoc",
            engine_request_id=engine_id,
            pid=7,
            process_token="7-abcd",
            step_index=step,
            round_index=step,
            phase="decode",
            tokens_proposed=k,
            tokens_accepted=a,
            tokens_emitted=a + 1,
            batch_size=1,
            num_scheduled_tokens=1 + k,
            context_len=10,
            draft_ms=0.1,
            verify_ms=5.0,
            wall_time_ns=1,
        )
        for f in cols:
            cols[f].append(vals.get(f))

    for level in (1, 2):
        for i in range(3):
            rid = f"chatcmpl-{request_id(run_id, 'speculative', level, i)}-0123abcd"
            add(rid, 1, 4, 3)
            add(rid, 2, 4, 1)
    add(f"chatcmpl-{request_id(other_run, 'speculative', 1, 0)}-0123abcd", 1, 4, 4)
    write_parquet_atomic(table_from_columns(RoundTrace, cols), folder / "rounds-7-abcd-000000.parquet")
    (folder / "rounds-8-ffff-000000.parquet").write_bytes(b"PAR1 truncated")  # a broken part is skipped


def test_external_capture_dir_and_one_counter_snapshot_per_arm_level_position(tmp_path, fixtures):
    cap = tmp_path / "sidecar"
    cap.mkdir()
    _fake_capture(cap, "x", "someone-else")
    base, spec = FakeVllm(), FakeVllm(metrics_text=SPEC_METRICS)
    with threaded(base, spec) as (b, s):
        run_dir = run_replay(stub_config(tmp_path, fixtures, baseline_url=b, speculative_url=s, capture_dir=cap))
    rounds = pq.read_table(run_dir / "rounds.parquet")
    assert rounds.num_rows == 12  # this run's rows only
    assert set(rounds.column("run_id").to_pylist()) == {"x"}
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["finished"] is True
    assert manifest["capture"]["source"] == "directory" and manifest["capture"]["rows"] == 12
    assert manifest["capture"]["skipped_files"][0].startswith("rounds-8-ffff")
    assert manifest["arms"][1]["speculative_config_source"] == "declared"
    snaps = pq.read_table(run_dir / "engine_counters.parquet").to_pylist()
    keys = [(r["arm"], r["level"], r["position"]) for r in snaps]
    assert sorted(keys) == sorted(
        {(a, c, p) for a in ("baseline", "speculative") for c in (1, 2) for p in ("before", "after")}
    )


def test_without_capture_dir_the_manifest_says_no_rounds(tmp_path, fixtures):
    fakes = FakeVllm(), FakeVllm()
    with threaded(*fakes) as (b, s):
        run_dir = run_replay(stub_config(tmp_path, fixtures, baseline_url=b, speculative_url=s))
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["capture"]["source"] == "none" and "no --capture-dir" in manifest["capture"]["reason"]
    # every streamed request went over specdec's own transport (replay/http/stream.py), not aiohttp
    for fake in fakes:
        assert fake.user_agents and set(fake.user_agents) == {"specdec"}


def test_no_progress_prints_one_line_per_level_and_arm(tmp_path, fixtures, capsys):
    with threaded(FakeVllm(), FakeVllm(status=200)) as (b, s):
        run_replay(stub_config(tmp_path, fixtures, baseline_url=b, speculative_url=s))
    err = capsys.readouterr().err
    for arm in ("baseline", "speculative"):
        for level in (1, 2):
            assert f"{arm} c={level}: 3/3 done, 0 failed" in err


def test_progress_lines_count_failures():
    import io

    from specdec.replay.http.client import StreamResult

    out = io.StringIO()
    p = Progress(False, stream=out)
    t = p.start_level("baseline", 4, 2)
    p.advance(t, StreamResult("a", 0, success=True))
    p.advance(t, StreamResult("b", 0, success=False, error_type="http_status"))
    p.end_level(t)
    assert "baseline c=4: 2/2 done, 1 FAILED" in out.getvalue()


class FlakyVllm(FakeVllm):
    """Serves the warm-up, then fails every other request with HTTP 500."""

    async def chat(self, request):
        n = len(self.request_ids)
        if n >= 1 and n % 2 == 1:
            self.request_ids.append(request.headers.get("X-Request-Id", ""))
            return web.Response(status=500, text="overloaded")
        return await super().chat(request)


def test_a_run_whose_levels_fail_exits_1_after_writing_everything(tmp_path, fixtures):
    from click.testing import CliRunner

    from specdec.cli.replay import main as replay_main

    with threaded(FakeVllm(), FlakyVllm()) as (b, s):
        r = CliRunner().invoke(
            replay_main,
            [
                str(fixtures / "traffic_small.jsonl"),
                "--baseline-url",
                b,
                "--speculative-url",
                s,
                "--runs-dir",
                str(tmp_path / "runs"),
                "--run-id",
                "flaky",
                "--levels",
                "1,2",
                "--warmup",
                "1",
                "--repeats",
                "1",
                "--no-lossless-pass",
                "--no-progress",
            ],
        )
    run_dir = tmp_path / "runs" / "flaky"
    assert r.exit_code == 1, r.output
    assert (run_dir / "report.html").is_file() and (run_dir / "specdec.duckdb").is_file()
    assert "level(s) failed" in r.output and "speculative c1" in r.output and "speculative c2" in r.output
    assert "baseline c1" not in r.output.split("Error:")[-1]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["finished"] is True  # it ran to the end; the levels failed their error budget


class DyingVllm(FakeVllm):
    """Serves the first level, then its /metrics stops answering (a dead server)."""

    async def metrics(self, request):
        if self.metrics_reads >= 6:
            self.metrics_reads += 1
            return web.Response(status=500)
        return await super().metrics(request)


def test_a_run_stopped_by_a_dead_server_still_reports_what_it_recorded(tmp_path, fixtures):
    """Level 1 ran in both arms; then the speculative server dies: the command
    fails with that message, and the report of what was recorded is written."""
    from click.testing import CliRunner

    from specdec.cli.replay import main as replay_main

    with threaded(FakeVllm(), DyingVllm()) as (b, s):
        r = CliRunner().invoke(
            replay_main,
            [
                str(fixtures / "traffic_small.jsonl"),
                "--baseline-url",
                b,
                "--speculative-url",
                s,
                "--runs-dir",
                str(tmp_path / "runs"),
                "--run-id",
                "half",
                "--levels",
                "1,2",
                "--repeats",
                "1",
                "--no-lossless-pass",
                "--no-progress",
            ],
        )
    assert r.exit_code == 1 and "stopped answering" in r.output
    assert "report of what was recorded before it" in r.output
    page = (tmp_path / "runs" / "half" / "report.html").read_text()
    assert "Run finished: False" in page or "not finished" in page


def test_repeats_interleave_the_arms_and_each_block_empties_the_prefix_cache_first(tmp_path, fixtures):
    base, spec = FakeVllm(), FakeVllm(metrics_text=SPEC_METRICS)
    spec.serves_reset = False  # a server without the dev endpoint: the snapshot must say so
    with threaded(base, spec) as (b, s):
        run_dir = run_replay(stub_config(tmp_path, fixtures, baseline_url=b, speculative_url=s, repeats=2))
    reqs = pq.read_table(run_dir / "requests.parquet").to_pylist()
    assert sorted({(r["arm"], r["level"], r["repeat"]) for r in reqs}) == [
        (a, c, r) for a in ("baseline", "speculative") for c in (1, 2) for r in (0, 1)
    ]
    # blocks in send order: per level and repeat, the arms counterbalanced (A B, then B A)
    first_send = {}
    for r in reqs:
        key = (r["level"], r["repeat"], r["arm"])
        first_send[key] = min(first_send.get(key, r["wall_send_ns"]), r["wall_send_ns"])
    order = [k for k, _ in sorted(first_send.items(), key=lambda kv: kv[1])]
    assert order == [
        (c, rep, a)
        for c in (1, 2)
        for rep in (0, 1)
        for a in (("baseline", "speculative") if rep == 0 else ("speculative", "baseline"))
    ]
    assert base.resets == 4  # one before each of its 4 blocks
    snaps = pq.read_table(run_dir / "engine_counters.parquet").to_pylist()
    before = {
        (s_["arm"], s_["level"], s_["repeat"]): s_["prefix_cache_reset"] for s_ in snaps if s_["position"] == "before"
    }
    assert set(before.values()) == {True, False}
    assert all(v is True for (a, _, _), v in before.items() if a == "baseline")
    assert all(v is False for (a, _, _), v in before.items() if a == "speculative")
    assert len(snaps) == 2 * 2 * 2 * 2  # arm x level x repeat x position, once each
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["schedule"]["repeats"] == 2 and manifest["schedule"]["prefix_cache"] == "reset"


def test_rows_with_temperature_get_a_seeded_sampling_pass_in_every_arm(tmp_path, fixtures):
    sse = (fixtures / "vllm_chat_stream_logprobs.sse").read_bytes()  # a real stream with logprobs, 16 tokens
    traffic = tmp_path / "mix.jsonl"
    traffic.write_text(
        json.dumps({"prompt_id": "warm", "category": "chat", "prompt": "Say hi", "max_tokens": 16, "temperature": 0.8})
        + "\n"
    )
    base, spec = FakeVllm(sse), FakeVllm(sse)
    with threaded(base, spec) as (b, s):
        run_dir = run_replay(
            stub_config(tmp_path, fixtures, traffic=traffic, baseline_url=b, speculative_url=s, levels=[1], samples=3)
        )
    rows = pq.read_table(run_dir / "sample_checks.parquet").to_pylist()
    assert sorted((r["arm"], r["sample_index"]) for r in rows) == [
        (a, i) for a in ("baseline", "speculative") for i in range(3)
    ]
    seeds = {
        a: [r["seed"] for r in sorted(rows, key=lambda r: r["sample_index"]) if r["arm"] == a]
        for a in ("baseline", "speculative")
    }
    assert seeds["baseline"] == seeds["speculative"] and len(set(seeds["baseline"])) == 3
    sent = [b_ for b_ in spec.bodies if "seed" in b_]
    assert sorted(b_["seed"] for b_ in sent) == sorted(seeds["speculative"])
    assert all(b_["temperature"] == 0.8 and b_["logprobs"] for b_ in sent)


def test_every_block_gets_resource_samples_read_from_metrics(tmp_path, fixtures):
    """External servers: no process to read (rss_bytes None), the gauges from
    /metrics; at least two samples per block (one at its start, one at its end)."""
    gauges = 'vllm:kv_cache_usage_perc{engine="0"} 0.125\nvllm:num_requests_running{engine="0"} 2\n'
    base, spec = FakeVllm(metrics_text=gauges), FakeVllm(metrics_text=SPEC_METRICS)
    with threaded(base, spec) as (b, s):
        run_dir = run_replay(stub_config(tmp_path, fixtures, baseline_url=b, speculative_url=s))
    rows = pq.read_table(run_dir / "resources.parquet").to_pylist()
    per_block = {}
    for r in rows:
        per_block.setdefault((r["arm"], r["level"], r["repeat"]), []).append(r)
    assert sorted(per_block) == [(a, c, 0) for a in ("baseline", "speculative") for c in (1, 2)]
    assert all(len(v) >= 2 for v in per_block.values())
    assert {r["rss_bytes"] for r in rows} == {None}
    assert {r["kv_cache_usage"] for r in rows if r["arm"] == "baseline"} == {0.125}
    assert {r["requests_running"] for r in rows if r["arm"] == "baseline"} == {2.0}
    assert {r["kv_cache_usage"] for r in rows if r["arm"] == "speculative"} == {None}  # not exported there
    assert not (run_dir / "resources").exists()  # part files merged, their folder removed
