"""The float32 identity test on the embedded engine: two local vLLM CPU servers
(baseline, ngram k=4), the verification pass at two levels, the lossless marts.

In float32 speculation must change no greedy token (issue 6, item 7): every
pair identical, so no divergence is left to explain."""

import asyncio

import aiohttp
import duckdb
import pytest

from specdec.analytics.build import build
from specdec.replay.config import DEFAULT_SPEC_CONFIG
from specdec.replay.server import LocalServer, ServerSpec
from specdec.replay.traffic import load_traffic
from specdec.replay.verify import eos_ids_for_model, greedy_table, verify_pass
from specdec.runfolder import greedy_part
from specdec.schemas.arrow import write_parquet_atomic
from tests.analytics.conftest import make_manifest, write_run

pytestmark = pytest.mark.engine

LEVELS = (1, 2)
MAX_TOKENS = 32


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, model_dir, fixtures):
    run_dir = tmp_path_factory.mktemp("lossless")
    rows = [r.model_copy(update={"max_tokens": MAX_TOKENS}) for r in load_traffic(fixtures / "traffic_small.jsonl").rows]
    eos = eos_ids_for_model(model_dir)
    spec = ServerSpec(model=model_dir, dtype="float32", max_num_seqs=4)
    write_run(run_dir, requests=[], rounds=[], manifest=make_manifest(dtype="float32"))
    for arm, spec_config in (("baseline", None), ("speculative", DEFAULT_SPEC_CONFIG)):
        with LocalServer(spec, spec_config, run_dir / "capture", "t", run_dir / f"server-{arm}.log") as srv:
            async def go():
                async with aiohttp.ClientSession() as session:
                    return {level: await verify_pass(session, srv.base_url, "specdec-target", rows, level,
                                                     lambda i: f"sd.t.{arm}.c{level}.r0.{i:05d}.verify", None, eos)
                            for level in LEVELS}

            for level, results in asyncio.run(go()).items():
                path = greedy_part(run_dir, arm, level, 0)
                path.parent.mkdir(parents=True, exist_ok=True)
                write_parquet_atomic(greedy_table("t", arm, level, 0, results), path)
    return run_dir


def test_every_check_succeeds_with_complete_logprobs(run_dir, model_dir):
    con = duckdb.connect(str(build(run_dir)), read_only=True)
    bad = con.execute("select count(*) from stg_greedy_checks where not success or len(token_ids) <> ? "
                      "or len(top2_logprobs) <> ? or list_contains(top2_logprobs, null)",
                      [MAX_TOKENS, MAX_TOKENS]).fetchone()[0]
    assert bad == 0
    assert eos_ids_for_model(model_dir) == frozenset({2})  # SmolLM2-Instruct: <|im_end|>
    # greedy: the top-1 logprob is never below the top-2
    assert con.execute("select count(*) from (select unnest(list_transform(range(1, len(token_ids) + 1), "
                       "lambda i: top1_logprobs[i] >= top2_logprobs[i])) as ok from stg_greedy_checks) "
                       "where not ok").fetchone()[0] == 0


def test_float32_speculation_changes_no_greedy_token(run_dir):
    con = duckdb.connect(str(build(run_dir)), read_only=True)
    got = con.execute("select sum(pairs), sum(identical), sum(near_tie), sum(suspect) from lossless").fetchone()
    assert got == (3 * len(LEVELS), 3 * len(LEVELS), 0, 0)
    assert con.execute("select count(*) from lossless_divergences").fetchone()[0] == 0
