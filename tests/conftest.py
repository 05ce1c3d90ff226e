"""Shared fixtures. Tests never read ../shared: fixtures live in tests/fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="session")
def fixtures() -> Path:
    return FIXTURES


@pytest.fixture(scope="session")
def model_dir() -> str:
    """The converted SmolLM2 folder (converted once per machine, then cached)."""
    from specdec.model import prepare_model

    return str(prepare_model().path)
