"""The tokenizer preflight in a replay run (issue 22): an embedded arm whose
separate draft model does not tokenize as the target stops the run before any
folder is created or server started, with the arm and every difference named;
a draft that agrees passes and the manifest notes say it was checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specdec.arms import ArmSpec, parse_arm
from specdec.replay import experiment
from specdec.replay.config import ReplayConfig
from specdec.replay.embedded import draft_preflight
from specdec.traffic.io import BUNDLED
from specdec.vocab import VocabMismatch
from tests.support.gguf_files import TOKENS, write_gguf


def _folder(tmp_path: Path, name: str, model_dir: str, plant=None) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    data = json.loads((Path(model_dir) / "tokenizer.json").read_text())
    if plant:
        plant(data)
    (folder / "tokenizer.json").write_text(json.dumps(data))
    return folder


def _swap(data):
    vocab = data["model"]["vocab"]
    vocab["Ġyes"], vocab["Ġno"] = vocab["Ġno"], vocab["Ġyes"]


def _never(*_args, **_kwargs):
    raise AssertionError("an engine was prepared after a failed preflight")


def _vllm_cfg(tmp_path: Path, target: Path, draft: Path) -> ReplayConfig:
    arm = ArmSpec("draft", "vllm", {"method": "draft_model", "model": str(draft), "num_speculative_tokens": 4})
    return ReplayConfig(
        traffic=BUNDLED,
        runs_dir=tmp_path / "runs",
        model=str(target),
        named_arms=[parse_arm("base=vllm:none"), ArmSpec("draft", "vllm", arm.speculation, "base")],
    )


def test_a_vllm_draft_with_another_vocabulary_stops_the_run_before_anything_starts(tmp_path, model_dir, monkeypatch):
    target = _folder(tmp_path, "target", model_dir)
    draft = _folder(tmp_path, "draft", model_dir, _swap)
    monkeypatch.setattr(experiment, "embedded_engines", _never)
    with pytest.raises(VocabMismatch, match="arm 'draft': the draft model's tokenizer") as exc:
        experiment.run_replay(_vllm_cfg(tmp_path, target, draft))
    assert "ids of ' yes no maybe YES'" in str(exc.value)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_a_llama_cpp_draft_gguf_with_another_vocabulary_is_caught(tmp_path, monkeypatch):
    target = write_gguf(tmp_path / "target.gguf", TOKENS)
    draft = write_gguf(tmp_path / "draft.gguf", [*TOKENS, "extra"])
    spec = {"type": "draft-simple", "draft_model": str(draft), "n_max": 4}
    cfg = ReplayConfig(
        traffic=BUNDLED,
        runs_dir=tmp_path / "runs",
        model=str(target),
        named_arms=[parse_arm("plain=llama.cpp:none"), ArmSpec("drafted", "llama.cpp", spec, "plain")],
    )
    monkeypatch.setattr(experiment, "embedded_engines", _never)
    with pytest.raises(VocabMismatch, match="(?s)arm 'drafted'.*vocabulary size: draft 8, target 7"):
        experiment.run_replay(cfg)


def test_an_agreeing_draft_passes_with_a_note_and_other_methods_are_not_checked(tmp_path, model_dir):
    target = _folder(tmp_path, "target", model_dir)
    draft = _folder(tmp_path, "draft", model_dir)
    notes = draft_preflight(_vllm_cfg(tmp_path, target, draft))
    assert len(notes) == 1 and "arm draft" in notes[0] and "49152 tokens" in notes[0]
    # ngram has no draft model; an EAGLE head is not a standalone model (its vocabulary may be mapped)
    eagle = ArmSpec("eagle", "vllm", {"method": "eagle", "model": str(tmp_path / "none")}, "base")
    cfg = ReplayConfig(
        traffic=BUNDLED,
        model=str(target),
        named_arms=[parse_arm("base=vllm:none"), parse_arm("ng=vllm:ngram@base"), eagle],
    )
    assert draft_preflight(cfg) == []
