"""The bundled prompt pool: categories and tiers as the issue names them,
Chinese, English and mixed prompts, and real context material."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from specdec.errors import InputFileError
from specdec.traffic.prompt_pool import CATEGORY_TIERS, load_pool


def test_bundled_pool_covers_every_tier_and_language():
    pool = load_pool()
    assert set(pool.categories()) == set(CATEGORY_TIERS)
    per_tier = Counter(p.tier for p in pool.prompts)
    assert min(per_tier[t] for t in ("high", "medium", "low")) >= 8
    for tier in ("high", "medium", "low"):
        assert {p.language for p in pool.prompts if p.tier == tier} == {"en", "zh", "mixed"}
    kinds = Counter(p.kind for p in pool.pieces)
    assert min(kinds[k] for k in ("document", "code", "dialogue")) >= 5
    assert {p.language for p in pool.pieces} == {"en", "zh", "mixed"}


def test_bundled_material_has_no_repeated_padding():
    pool = load_pool()
    for piece in pool.pieces:  # code may repeat a line (a column definition); prose and dialogue do not
        lines = [ln.strip() for ln in piece.text.split("\n") if len(ln.strip()) > 30]
        most = max(Counter(lines).values(), default=0)
        assert most <= (3 if piece.kind == "code" else 1), piece.id
    texts = [p.text for p in pool.pieces]
    assert len(texts) == len(set(texts))


def test_pool_errors_name_the_file_row_and_field(tmp_path):
    (tmp_path / "prompts.jsonl").write_text(
        json.dumps({"id": "a", "category": "code", "tier": "high", "language": "en", "text": "x"})
        + "\n"
        + json.dumps({"id": "b", "category": "code", "tier": "high", "language": "fr", "text": "y"})
        + "\n"
    )
    (tmp_path / "context.jsonl").write_text(
        json.dumps({"id": "d", "kind": "document", "language": "en", "title": "t", "text": "z"}) + "\n"
    )
    with pytest.raises(InputFileError) as info:
        load_pool(tmp_path)
    assert (info.value.row, info.value.field) == (2, "language")


def test_a_category_in_the_wrong_tier_is_refused(tmp_path):
    (tmp_path / "prompts.jsonl").write_text(
        json.dumps({"id": "a", "category": "chat", "tier": "high", "language": "en", "text": "x"}) + "\n"
    )
    (tmp_path / "context.jsonl").write_text(
        json.dumps({"id": "d", "kind": "document", "language": "en", "title": "t", "text": "z"}) + "\n"
    )
    with pytest.raises(InputFileError, match="'chat' is tier 'low'"):
        load_pool(tmp_path)
