"""Redaction of a recorded request (``specdec-capture proxy --content hash``).

Hash mode keeps a request's structure (roles, number of messages, content
parts, tool calls, JSON shape of tools and response_format) and replaces every
text value with ``sha256:<hex>:<tokens>``: the SHA-256 of the text's UTF-8
bytes and its length in tokens. Only the values of keys named ``role`` and
``type`` stay as they are (they are structure, not content); dict keys are
kept. Numbers, booleans and nulls are kept.

Token lengths: with a tokenizer file (``--tokenizer tokenizer.json``, a
Hugging Face ``tokenizers`` file, e.g. the served model's) the exact count of
that tokenizer, special tokens excluded; without one the stated approximation
``approx-v1``: one token per CJK/kana/hangul character, per run of letters or
digits (a word), and per other non-space character. On English prose it comes
within about 25% of a BPE tokenizer's count; it is a length for choosing pool
content, not a billing figure.

A plain SHA-256 of a short or guessable text can be reversed by trying
candidates; the hash identifies repeated content (a shared system prompt, an
earlier turn) without storing it, it does not hide guessable text.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from typing import Any

APPROX_NAME = "approx-v1"
_APPROX = re.compile(
    r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]|[^\W_]+|[^\w\s]|_", re.UNICODE
)
#: Keys whose string values are structure and are kept in hash mode.
KEPT_KEYS = frozenset({"role", "type"})


def approx_tokens(text: str) -> int:
    """The ``approx-v1`` token count (see the module docstring)."""
    return len(_APPROX.findall(text))


class Redactor:
    """Replace text by ``sha256:<hex>:<tokens>``; ``count`` gives the tokens."""

    def __init__(self, count: Callable[[str], int] = approx_tokens, tokenizer_name: str = APPROX_NAME):
        self.count, self.tokenizer_name = count, tokenizer_name

    @classmethod
    def from_tokenizer_file(cls, path) -> Redactor:
        from tokenizers import Tokenizer  # optional: installed with the engine extra

        tok = Tokenizer.from_file(str(path))
        return cls(lambda text: len(tok.encode(text, add_special_tokens=False).ids), f"tokenizer:{path}")

    def text(self, value: str) -> str:
        digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()
        return f"sha256:{digest}:{self.count(value)}"

    def value(self, value: Any, key: str | None = None) -> Any:
        """A JSON value with every string replaced, except under ``KEPT_KEYS``."""
        if isinstance(value, str):
            return value if key in KEPT_KEYS else self.text(value)
        if isinstance(value, list):
            return [self.value(v, key) for v in value]
        if isinstance(value, dict):
            return {k: self.value(v, k) for k, v in value.items()}
        return value

    def note(self) -> str:
        return (
            f"redacted (--content hash): every text replaced by sha256:<hex of its UTF-8>:<tokens>, "
            f"tokens by {self.tokenizer_name}; roles, message count and JSON structure kept; "
            f"replay needs content from the prompt pool"
        )


def message_text(messages: list) -> str:
    """Every text of a chat message list, joined by newlines (what content
    rules match against): string contents and the ``text`` of content parts."""
    out: list[str] = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            out.extend(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return "\n".join(out)
