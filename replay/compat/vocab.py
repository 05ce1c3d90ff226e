"""Tokenizer preflight: before any run that uses a draft model, check that the
draft's tokenizer is the target's.

A draft whose vocabulary differs from the target's raises no error in an
engine: its proposals are token ids the target reads as other tokens, and
acceptance silently collapses. The preflight compares, from each model
folder's ``tokenizer.json`` (Hugging Face ``tokenizers``):

- the vocabulary size (added tokens included);
- the special tokens (id -> text);
- the ids of a fixed sample of strings (code, prose, JSON, digits, non-ASCII,
  chat markup).

Any difference is a problem, and ``preflight`` raises ``VocabMismatch``
naming every one, so a run stops before it starts a server or sends a
request. A GGUF draft (llama.cpp) is not read here: its tokenizer is inside
the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specdec.errors import SpecdecError

TOKENIZER_FILE = "tokenizer.json"

#: Strings whose token ids must be equal in draft and target.
SAMPLE_STRINGS: tuple[str, ...] = (
    "def reverse(s):\n    return s[::-1]\n",
    "The quick brown fox jumps over the lazy dog.",
    '{"city": "Paris", "population": 2100000}',
    "0123456789 3.14159 -42 1e-9",
    "Grüße, naïve café: 東京 🚀",
    "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
    " yes no maybe YES",
)


class VocabMismatch(SpecdecError):
    """The draft's tokenizer is not the target's: its message lists every difference found."""


@dataclass
class VocabReport:
    draft: str
    target: str
    draft_vocab_size: int
    target_vocab_size: int
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _load(folder: Path) -> Any:
    # heavy and optional (the `cpu` extra, with transformers): only when a draft model is checked
    try:
        from tokenizers import Tokenizer
    except ImportError as exc:  # pragma: no cover - the cpu extra installs it
        raise SpecdecError(f"the tokenizer preflight needs the 'tokenizers' package ({exc})") from None
    path = Path(folder) / TOKENIZER_FILE
    if not path.is_file():
        raise SpecdecError(
            f"{path}: missing; the tokenizer preflight reads a Hugging Face model folder's {TOKENIZER_FILE}"
        )
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises its own Exception type for a malformed file
        raise SpecdecError(f"{path}: not a readable tokenizer ({exc})") from None


def _specials(tok: Any) -> dict[int, str]:
    return {i: t.content for i, t in tok.get_added_tokens_decoder().items() if t.special}


def compare_tokenizers(draft: Path, target: Path, samples: tuple[str, ...] = SAMPLE_STRINGS) -> VocabReport:
    """Every difference between the two folders' tokenizers (module docstring)."""
    d, t = _load(draft), _load(target)
    report = VocabReport(str(draft), str(target), d.get_vocab_size(), t.get_vocab_size())
    if report.draft_vocab_size != report.target_vocab_size:
        report.problems.append(f"vocabulary size: draft {report.draft_vocab_size}, target {report.target_vocab_size}")
    ds, ts = _specials(d), _specials(t)
    for i in sorted(set(ds) | set(ts)):
        if ds.get(i) != ts.get(i):
            report.problems.append(f"special token id {i}: draft {ds.get(i)!r}, target {ts.get(i)!r}")
    for text in samples:
        a, b = d.encode(text, add_special_tokens=False).ids, t.encode(text, add_special_tokens=False).ids
        if a != b:
            at = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            report.problems.append(
                f"ids of {text!r}: differ from token {at} (draft {a[at : at + 3]}, target {b[at : at + 3]}; "
                f"{len(a)} vs {len(b)} tokens)"
            )
    return report


def preflight(draft: Path, target: Path) -> VocabReport:
    """``compare_tokenizers``; raises ``VocabMismatch`` listing every problem when they differ."""
    report = compare_tokenizers(draft, target)
    if not report.ok:
        lines = "\n  ".join(report.problems)
        raise VocabMismatch(
            f"the draft model's tokenizer ({draft}) is not the target's ({target}); speculation would "
            f"propose tokens the target reads as others and acceptance would collapse:\n  {lines}"
        )
    return report
