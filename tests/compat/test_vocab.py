"""The tokenizer preflight on copies of the bundled model's tokenizer: the same
tokenizer passes; a swapped vocabulary entry or an added special token is named."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from specdec.replay.compat.vocab import VocabMismatch, compare_tokenizers, preflight


@pytest.fixture
def target(tmp_path, model_dir) -> Path:
    folder = tmp_path / "target"
    folder.mkdir()
    shutil.copy(Path(model_dir) / "tokenizer.json", folder / "tokenizer.json")
    return folder


def draft_from(target: Path, tmp_path: Path, plant) -> Path:
    folder = tmp_path / "draft"
    folder.mkdir()
    data = json.loads((target / "tokenizer.json").read_text())
    plant(data)
    (folder / "tokenizer.json").write_text(json.dumps(data))
    return folder


def test_the_same_tokenizer_passes(target, tmp_path):
    same = draft_from(target, tmp_path, lambda d: None)
    report = preflight(same, target)
    assert report.ok and report.draft_vocab_size == report.target_vocab_size == 49152


def test_swapped_vocabulary_entries_are_caught(target, tmp_path):
    def swap(data):
        vocab = data["model"]["vocab"]
        vocab["Ġyes"], vocab["Ġno"] = vocab["Ġno"], vocab["Ġyes"]

    draft = draft_from(target, tmp_path, swap)
    report = compare_tokenizers(draft, target)
    assert not report.ok
    assert report.draft_vocab_size == report.target_vocab_size  # same size: only the ids give it away
    assert len(report.problems) == 1 and report.problems[0].startswith(
        "ids of ' yes no maybe YES': differ from token 0"
    )
    with pytest.raises(VocabMismatch, match="acceptance would collapse"):
        preflight(draft, target)


def test_an_added_special_token_is_caught(target, tmp_path):
    def add(data):
        data["added_tokens"].append(
            {
                "id": 49152,
                "content": "<|draft_only|>",
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
        )

    report = compare_tokenizers(draft_from(target, tmp_path, add), target)
    assert "vocabulary size: draft 49153, target 49152" in report.problems
    assert "special token id 49152: draft '<|draft_only|>', target None" in report.problems
