"""The tokenizer preflight on copies of the bundled model's tokenizer: the same
tokenizer passes; a swapped vocabulary entry or an added special token is named."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from specdec.vocab import VocabMismatch, compare_tokenizers, preflight
from tests.support.gguf_files import TOKENS, write_gguf


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


# GGUF drafts (llama.cpp): the tokenizer is read from the file's metadata


def test_the_same_gguf_tokenizer_passes(tmp_path):
    target = write_gguf(tmp_path / "target.gguf", TOKENS)
    draft = write_gguf(tmp_path / "draft.gguf", TOKENS)
    report = preflight(draft, target)
    assert report.ok and report.draft_vocab_size == report.target_vocab_size == len(TOKENS)


def test_every_gguf_difference_is_named(tmp_path):
    target = write_gguf(tmp_path / "target.gguf", TOKENS)
    swapped = [*TOKENS[:5], "Ġno", "Ġyes"]  # same size: only the ids give it away
    draft = write_gguf(tmp_path / "draft.gguf", [*swapped, "extra"], control=3, eos=2, merges=("a b", "ab c"))
    with pytest.raises(VocabMismatch) as exc:
        preflight(draft, target)
    text = str(exc.value)
    for expected in (
        "vocabulary size: draft 8, target 7",
        "token id 5: draft 'Ġno', target 'Ġyes' (2 ids differ in all)",
        "control token id 2: a control token in the draft only",
        "eos_token_id: draft 2, target 1",
        "BPE merges: the lists differ",
    ):
        assert expected in text, text


def test_the_bundled_gguf_agrees_with_itself_and_a_damaged_file_is_named(tmp_path):
    from specdec.errors import SpecdecError
    from specdec.model import find_gguf

    assert preflight(find_gguf(), find_gguf()).target_vocab_size == 49152
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00garbage")
    with pytest.raises(SpecdecError, match="bad.gguf: not a readable GGUF file"):
        preflight(bad, find_gguf())
    with pytest.raises(SpecdecError, match="like with like"):
        preflight(bad, tmp_path)
