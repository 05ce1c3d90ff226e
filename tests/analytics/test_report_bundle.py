"""The report pages' Vega bundle comes from the specdec cache after the first page
(``analytics/report/page.py``: ``vega_bundle``): assembled by vl_convert once per
machine and version, checked against its SHA-256 when read, and assembled again
when the cache is damaged or cannot be written."""

from __future__ import annotations

import pytest
import vl_convert

from specdec.analytics.report import page


@pytest.fixture
def assembled(monkeypatch, tmp_path):
    """vl_convert's assembly replaced by a counter (the real one takes about a second)."""
    calls = []

    def fake(vl_version=None):
        calls.append(vl_version)
        return f"/* bundle {len(calls)} for {vl_version} \u00e9 */"

    monkeypatch.setattr(vl_convert, "javascript_bundle", fake)
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path))
    return calls


def test_the_bundle_is_assembled_once_then_read_from_the_cache(assembled, tmp_path):
    first = page.vega_bundle()
    assert page.vega_bundle() == first == "/* bundle 1 for " + assembled[0] + " \u00e9 */"
    assert len(assembled) == 1
    (js,) = (tmp_path / "vega-bundle").glob("*.js")
    assert js.read_text(encoding="utf-8") == first
    assert "<script>" + first + "</script>" in page.page("t", {}, "")


def test_a_damaged_cache_is_assembled_again_and_repaired(assembled, tmp_path):
    page.vega_bundle()
    (js,) = (tmp_path / "vega-bundle").glob("*.js")
    js.write_text("/* truncated", encoding="utf-8")
    assert page.vega_bundle() == "/* bundle 2 for " + assembled[0] + " \u00e9 */"
    assert page.vega_bundle() == "/* bundle 2 for " + assembled[0] + " \u00e9 */"
    assert len(assembled) == 2
    js.write_bytes(b"\xff\xfe not utf-8")
    assert page.vega_bundle().startswith("/* bundle 3")


def test_a_cache_that_cannot_be_written_still_gives_the_bundle(assembled, tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(blocker))
    assert page.vega_bundle().startswith("/* bundle 1")
    assert page.vega_bundle().startswith("/* bundle 2")


def test_the_real_bundle_defines_vega_embed(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path))
    bundle = page.vega_bundle()
    assert "vegaEmbed" in bundle and len(bundle) > 100_000
    assert page.vega_bundle() == bundle
