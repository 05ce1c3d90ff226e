"""The quantization cells on the real llama.cpp (issue 22): ``specdec compat --engine
llama.cpp --probe CELL`` makes (or reuses from the cache) the Q8_0 and F16 files with
the llama.cpp source's tools, starts its own servers (one per target and
configuration: the cells differ in server flags, so no shared pair) and fills the
cells named.

The smallest design that exercises each path (issue 40): two of the nine cells,
one draft width (Q8_0, a file made by llama-quantize) against two targets, the
shipped Q4_1 (the reference cell, measured first) and the made Q8_0 (a target
that is not the shipped file, classified against that reference). The other
seven cells differ only in which cached file a server loads; all nine are
``specdec compat --engine llama.cpp --probe quantization``, and their planning and
classification are unit-tested (tests/experiments/compat/test_quant_run.py, test_quant.py). One repeat
(``--repeats 1``): each cell's three prompts once per arm, three pairs for its speedup.
About 1 minute on 2 cores once the files are cached; making them adds the
llama-quantize build once per machine (minutes) and about 15 s."""

from __future__ import annotations

import os
import re
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from specdec.cli.main import main
from specdec.engines.llama_cpp.quant import sha256_of
from specdec.runfolder import read_manifest
from specdec.schemas.compat import OUTCOMES

pytestmark = [pytest.mark.engine, pytest.mark.llama_cpp]

#: (target bits, draft bits) of the cells run here (module docstring)
CELLS = ((4, 8), (8, 8))
NAMES = {4: "q4_1", 8: "q8_0", 16: "f16"}


@pytest.fixture(scope="module")
def quant_run(tmp_path_factory):
    from specdec.engines.llama_cpp.build import build_llama_quantize
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
        [
            "compat",
            "--engine",
            "llama.cpp",
            *(a for t, d in CELLS for a in ("--probe", f"target-{NAMES[t]}.draft-{NAMES[d]}")),
            "-o",
            str(run_dir),
            "--request-timeout",
            "150",
            "--repeats",
            "1",  # each cell's 3 prompts once per arm: 3 pairs (2 repeats, 6 pairs, before: issue 40)
        ],
    )
    print(result.output)
    assert result.exit_code == 0, result.output
    return run_dir, result.output


def test_the_quantization_cells_named_with_acceptance_and_speedup(quant_run):
    run_dir, _ = quant_run
    con = duckdb.connect(str(run_dir / "specdec.duckdb"), read_only=True)
    rows = con.sql(
        "select target_bits, draft_bits, spec_method, outcome, acceptance_rate, mean_acceptance_length, "
        "speedup, speedup_ci_low, speedup_ci_high, speedup_pairs, draft_tokens, detail "
        "from compatibility where feature = 'quantization'"
    ).fetchall()
    assert {(r[0], r[1], r[2]) for r in rows} == {(t, d, "draft-simple") for t, d in CELLS}
    assert len(rows) == len(CELLS)
    for _t, _d, method, outcome, per_token, per_round, sp, lo, hi, pairs, drafted, detail in rows:
        assert outcome in OUTCOMES and detail
        if outcome == "works":  # issue 43: the speculative arm drafted in a works cell
            assert drafted, detail
        if outcome in ("works", "degrades", "broken", "not tested"):
            assert sp is not None and lo is not None and lo <= sp <= hi and pairs == 3, detail  # 3 prompts x 1 repeat
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
    assert "--spec-type" in servers["target-q8_0.draft-q8_0"]["speculative_server_args"]
    # the shipped target's cell first (the reference of the others), then the made target's
    assert [e["probe"] for e in m.traffic["probes"]["llama.cpp"]] == [
        "target-q4_1.draft-q8_0",
        "target-q8_0.draft-q8_0",
    ]
    assert set(servers) == {"target-q4_1.draft-q8_0", "target-q8_0.draft-q8_0"}
    assert "target-q8_0.draft-q8_0" in output


def test_the_made_targets_cell_is_read_against_the_shipped_targets(quant_run):
    run_dir, _ = quant_run
    con = duckdb.connect(str(run_dir / "specdec.duckdb"), read_only=True)
    cells = {
        r[0]: r[1:]
        for r in con.sql(
            "select probe, draft_tokens, acceptance_rate, mean_acceptance_length, plain_acceptance_rate, "
            "plain_mean_acceptance_length from compatibility where feature = 'quantization'"
        ).fetchall()
    }
    shipped, made = cells["target-q4_1.draft-q8_0"], cells["target-q8_0.draft-q8_0"]
    assert shipped[0] is not None and shipped[0] > 0 and shipped[1] is not None, shipped  # the reference drafted
    # the reference's acceptance, carried into the made target's cell as its plain figures (run_quant's refs)
    assert (made[3], made[4]) == (shipped[1], shipped[2]), (made, shipped)
    assert shipped[3] is None  # the shipped target's cell is the reference: nothing to read it against
