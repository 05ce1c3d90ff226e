"""The quantization cells on the real llama.cpp (issue 22): ``specdec compat --engine
llama.cpp --probe quantization`` makes (or reuses from the cache) the Q8_0 and F16
files with the llama.cpp source's tools, starts its own servers (one per target and
configuration: the cells differ in server flags, so no shared pair) and fills 9
cells: target Q4_1, Q8_0, F16 x draft Q4_1, Q8_0, ngram-mod. About 2-3 minutes on 2
cores once the files are cached; making them adds the llama-quantize build once per
machine (minutes) and about 15 s."""

from __future__ import annotations

import os
import re
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from specdec.cli.main import main
from specdec.engines.llama_cpp_quant import sha256_of
from specdec.runfolder import read_manifest

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def quant_run(tmp_path_factory):
    from specdec.engines.llama_build import build_llama_quantize
    from specdec.errors import EngineError

    try:
        build_llama_quantize()
    except EngineError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"llama.cpp tools could not be built: {exc}")
        pytest.skip(f"llama.cpp tools could not be built here: {exc}")
    run_dir = tmp_path_factory.mktemp("compat-quant") / "q1"
    result = CliRunner().invoke(
        main,
        ["compat", "--engine", "llama.cpp", "--probe", "quantization", "-o", str(run_dir), "--request-timeout", "150"],
    )
    print(result.output)
    assert result.exit_code == 0, result.output
    return run_dir, result.output


def test_nine_quantization_cells_with_acceptance_and_speedup(quant_run):
    run_dir, _ = quant_run
    con = duckdb.connect(str(run_dir / "specdec.duckdb"), read_only=True)
    rows = con.sql(
        "select target_bits, draft_bits, spec_method, outcome, acceptance_rate, mean_acceptance_length, "
        "speedup, speedup_ci_low, speedup_ci_high, speedup_pairs, draft_tokens, detail "
        "from compatibility where feature = 'quantization'"
    ).fetchall()
    assert {(r[0], r[1], r[2]) for r in rows} == {
        (t, d, "draft-simple" if d else "ngram-mod") for t in (4, 8, 16) for d in (4, 8, None)
    }
    assert len(rows) == 9
    for _t, _d, method, outcome, per_token, per_round, sp, lo, hi, pairs, drafted, detail in rows:
        assert outcome in ("works", "degrades", "broken", "refused", "not offered") and detail
        if outcome in ("works", "degrades", "broken"):
            assert sp is not None and lo is not None and lo <= sp <= hi and pairs == 6, detail
            assert drafted is not None, detail  # the counters were read
        if method == "draft-simple" and outcome in ("works", "degrades"):
            # the draft is the target's own model: it proposes and is mostly accepted
            assert drafted > 0 and per_token is not None and per_round is not None, detail


def test_the_manifest_holds_each_files_checksum(quant_run):
    run_dir, output = quant_run
    m = read_manifest(run_dir)
    files = m.model_source["quantization"]
    assert set(files) == {"Q4_1", "Q8_0", "F16"}
    for f in files.values():
        assert re.fullmatch(r"[0-9a-f]{64}", f["sha256"]) and sha256_of(Path(f["path"])) == f["sha256"]
    assert files["Q4_1"]["made_by"] == "shipped"
    assert files["Q8_0"]["made_by"] == "llama-quantize"
    assert files["F16"]["made_by"] in ("convert_hf_to_gguf.py", "llama-quantize --allow-requantize")
    servers = m.engines["llama.cpp"]["quantization_servers"]
    assert "--spec-type" in servers["target-f16.draft-q8_0"]["speculative_server_args"]
    assert [e["probe"] for e in m.traffic["probes"]["llama.cpp"]][:1] == ["target-q4_1.draft-q4_1"]
    assert "target-q8_0.ngram-mod" in output
