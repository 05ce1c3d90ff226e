"""The quantization cells' orchestration (specdec/experiments/compat/quant_run.py) on a
fake llama-server (tests/support/fake_quant_llama.py): one cell per target and
configuration, a draft that does not load is a ``refused`` cell with the server's
words, and ``--probe`` picks cells."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from specdec.engines.llama_cpp.quant import QuantFile, sha256_of
from specdec.experiments.compat import lossless_cells, quant_run
from specdec.http.urls import ClientSettings

FAKE = Path(__file__).parents[2] / "support" / "fake_quant_llama.py"
SETTINGS = ClientSettings(connect_timeout_s=5, request_timeout_s=10)


@pytest.fixture
def fake_files(tmp_path, monkeypatch):
    files = {}
    for bits, kind in ((4, "Q4_1"), (8, "Q8_0"), (16, "F16")):
        path = tmp_path / f"model.{kind}.gguf"
        path.write_bytes(kind.encode())
        files[bits] = QuantFile(bits, kind, str(path), sha256_of(path), "test", "", [], 0.0, False)
    monkeypatch.setattr(quant_run, "quantized_ggufs", lambda: files)
    binary = tmp_path / "llama-server"
    binary.write_text(f'#!/bin/sh\nexec {sys.executable} {FAKE} "$@"\n')
    binary.chmod(0o755)
    return files, binary


def test_every_target_and_configuration_gets_a_cell(tmp_path, fake_files, monkeypatch):
    files, binary = fake_files
    monkeypatch.setenv("FAKE_QUANT_BAD_DRAFT", "Q8_0")  # the 8-bit draft does not load
    q = quant_run.run_quant(tmp_path / "run", "r1", SETTINGS, "v", 30.0, echo=lambda _: None, binary=binary)
    cells = {c.probe: c for c in q.cells}
    assert len(cells) == 9 and [e["probe"] for e in q.sent] == [c.probe for c in q.cells]
    for target in ("q4_1", "q8_0", "f16"):
        refused = cells[f"target-{target}.draft-q8_0"]
        assert refused.outcome == "refused" and "failed to load draft model" in (refused.speculative_error or "")
        for arm in ("draft-q4_1", "ngram-mod"):
            c = cells[f"target-{target}.{arm}"]
            assert c.outcome == "works", c.detail
            assert c.speedup_pairs == 6 and c.speedup is not None and (c.draft_tokens, c.accepted_tokens) == (48, 36)
            # the lossless check on the cell's own pair, after its timed requests (their counters untouched)
            assert (c.lossless_identical, c.lossless_suspect) == (len(lossless_cells.PROMPTS), 0), c.detail
    # the reference of the 8- and 16-bit targets' cells is the shipped target's cell of the same configuration
    assert cells["target-f16.draft-q4_1"].plain_draft_tokens == 48
    assert cells["target-q4_1.draft-q4_1"].plain_draft_tokens is None
    assert {k: v["sha256"] for k, v in q.files.items()} == {f.gguf_type: f.sha256 for f in files.values()}
    args = q.servers["target-f16.draft-q4_1"]["speculative_server_args"]
    assert args[args.index("-md") + 1] == files[4].path and args[args.index("-m") + 1] == files[16].path


def test_a_draft_that_changes_a_greedy_token_breaks_its_cell(tmp_path, fake_files, monkeypatch):
    """Issue 43, item 3: a quantized target with a draft gets the lossless statement of the feature
    pairs; a divergence nothing explains (not the runner-up) makes the cell broken, and names it."""
    _, binary = fake_files
    monkeypatch.setenv("FAKE_QUANT_FLIP", "Q4_1")  # the 4-bit draft's server emits another token
    only = frozenset({"target-q8_0.draft-q4_1", "target-q8_0.ngram-mod"})
    q = quant_run.run_quant(tmp_path / "run", "r1", SETTINGS, "v", 30.0, echo=lambda _: None, only=only, binary=binary)
    cells = {c.probe: c for c in q.cells}
    flipped = cells["target-q8_0.draft-q4_1"]
    assert flipped.outcome == "broken" and "speculation changed a greedy output" in flipped.detail, flipped.detail
    assert flipped.lossless_suspect == len(lossless_cells.PROMPTS) and "at token 2" in flipped.detail
    assert cells["target-q8_0.ngram-mod"].outcome == "works" and cells["target-q8_0.ngram-mod"].lossless_suspect == 0


def test_probe_names_pick_the_cells(tmp_path, fake_files):
    _, binary = fake_files
    only = frozenset({"target-f16.ngram-mod"})
    q = quant_run.run_quant(tmp_path / "run", "r1", SETTINGS, "v", 30.0, echo=lambda _: None, only=only, binary=binary)
    assert [c.probe for c in q.cells] == ["target-f16.ngram-mod"]
    assert sorted(p.name for p in (tmp_path / "run").glob("server-*.log")) == [
        "server-quant-f16-baseline.log",
        "server-quant-f16-ngram-mod.log",
    ]


def test_the_cells_send_their_prompts_repeats_times(tmp_path, fake_files):
    # --repeats reaches the quantization cells as every probe: 3 prompts once each, 3 pairs
    _, binary = fake_files
    only = frozenset({"target-f16.ngram-mod"})
    q = quant_run.run_quant(
        tmp_path / "run", "r1", SETTINGS, "v", 30.0, echo=lambda _: None, only=only, binary=binary, repeats=1
    )
    (cell,) = q.cells
    assert cell.speedup_pairs == 3 and cell.speedup is not None
