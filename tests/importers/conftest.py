"""Shared helpers for the importer tests: a fake token counter (so the tests
do not need the model's tokenizer) and the trace fixtures."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

TRACES = Path(__file__).parent.parent / "fixtures" / "traces"

_TOKEN = re.compile(r"[\u4e00-\u9fff]|[A-Za-z0-9_]+|[^\sA-Za-z0-9_\u4e00-\u9fff]")


class FakeCounter:
    """One token per word, per number, per punctuation mark and per Chinese
    character; a chat adds 4 tokens per message and 2 for the generation
    prompt. Hand-checkable: "Hello, world" is 3 tokens, as a chat 3 + 4 + 2 = 9."""

    def text(self, text: str) -> int:
        return len(_TOKEN.findall(text))

    def chat(self, messages: list[dict]) -> int:
        return sum(self.text(m["content"]) + 4 for m in messages) + 2


@pytest.fixture
def counter() -> FakeCounter:
    return FakeCounter()


@pytest.fixture(scope="session")
def traces() -> Path:
    return TRACES
