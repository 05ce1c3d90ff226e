"""The capture plugin inside a real vLLM CPU engine (SmolLM2), in-process mode:
`specdec-capture reconcile` in a subprocess (fresh plugin state: vLLM loads
plugins once per process), with the model as its own draft.

One check (issue 40): the in-process path is the same for every proposer, and
the draft-model proposer is the one no other engine test serves on vLLM. An
ngram reconcile run (25 s) was dropped: ngram rounds are reconciled exactly with
vLLM's counters in server mode, on the shared pair, by test_compat_engine
(cell by cell, both arms) and test_replay_e2e (every arm and level).
"""

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.engine


def _reconcile(tmp_path, model_dir, spec_config: dict, max_tokens: int = 40) -> dict:
    # its own engine, in a process of its own: vLLM loads the capture plugin once per process
    out = tmp_path / "result.json"
    cmd = [
        sys.executable,
        "-m",
        "specdec.cli.capture",
        "reconcile",
        "--dir",
        str(tmp_path / "cap"),
        "--model",
        model_dir,
        "--spec-config",
        json.dumps(spec_config),
        "--max-tokens",
        str(max_tokens),
        "--json-out",
        str(out),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text())


def test_model_as_its_own_draft_accepts_everything(tmp_path, model_dir):
    # A draft identical to the target must have (almost) every token accepted:
    # an exact, independent check that accepted/proposed are not swapped or shifted.
    r = _reconcile(tmp_path, model_dir, {"model": model_dir, "num_speculative_tokens": 4}, max_tokens=24)
    assert r["hook_errors"] == 0
    assert r["captured"] == r["engine"] and r["engine"]["rounds"] > 0, r
    assert r["captured"]["proposed"] == 4 * r["captured"]["rounds"]
    assert r["captured"]["accepted"] >= 0.9 * r["captured"]["proposed"], r
    # every verify round carries both timings (worker -> scheduler hand-over works in-process)
    assert r["rounds_with_timings"] == r["captured"]["rounds"]
    # prefill steps are recorded too
    assert r["rows"] > r["captured"]["rounds"]
