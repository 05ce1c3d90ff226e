"""Shared helpers for the importer tests: a fake token counter (so the tests
do not need the model's tokenizer) and the trace fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.fake_counter import FakeCounter

TRACES = Path(__file__).parents[2] / "fixtures" / "traces"


@pytest.fixture
def counter() -> FakeCounter:
    return FakeCounter()


@pytest.fixture(scope="session")
def traces() -> Path:
    return TRACES
