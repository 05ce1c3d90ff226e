"""A fake token counter for the importer tests, so they do not need the model's tokenizer."""

from __future__ import annotations

import re

_TOKEN = re.compile(r"[\u4e00-\u9fff]|[A-Za-z0-9_]+|[^\sA-Za-z0-9_\u4e00-\u9fff]")


class FakeCounter:
    """One token per word, per number, per punctuation mark and per Chinese
    character; a chat adds 4 tokens per message and 2 for the generation
    prompt. Hand-checkable: "Hello, world" is 3 tokens, as a chat 3 + 4 + 2 = 9."""

    def text(self, text: str) -> int:
        return len(_TOKEN.findall(text))

    def chat(self, messages: list[dict]) -> int:
        return sum(self.text(m["content"]) + 4 for m in messages) + 2
