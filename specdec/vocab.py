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

A GGUF draft (llama.cpp) carries its tokenizer in the file's metadata, which
is read with the ``gguf`` package (no tokenizer runs): the tokenizer model and
pre-tokenizer names, the token list (size, then the first id whose text
differs), the token types of the control tokens, the special ids (BOS, EOS,
unknown, padding, ...) and a digest of the BPE merges. Equal lists, merges and
pre-tokenizer tokenize every text alike, so no sample strings are needed.

Any difference is a problem, and ``preflight`` raises ``VocabMismatch``
naming every one, so a run stops before it starts a server or sends a
request (``specdec.replay.embedded.draft_preflight``: every embedded arm with a
separate draft model, vLLM's ``draft_model`` and llama.cpp's ``draft-simple``).
"""

from __future__ import annotations

import hashlib
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


#: GGUF metadata keys (prefix ``tokenizer.ggml.``) of the special token ids
GGUF_SPECIAL_IDS: tuple[str, ...] = (
    "bos_token_id",
    "eos_token_id",
    "eot_token_id",
    "eom_token_id",
    "unknown_token_id",
    "padding_token_id",
    "seperator_token_id",
    "mask_token_id",
)
GGUF_CONTROL = 3  # llama.cpp's token type of a control token (<|im_start|>, ...)


@dataclass(frozen=True)
class GgufVocab:
    model: str
    pre: str
    tokens: tuple[str, ...]
    control: frozenset[int]
    specials: dict[str, int]
    merges_sha256: str


def _load_gguf(path: Path) -> GgufVocab:
    # heavy and optional (the `cpu` extra): only when a GGUF draft is checked
    try:
        from gguf import GGUFReader
    except ImportError as exc:  # pragma: no cover - the cpu extra installs it
        raise SpecdecError(f"the tokenizer preflight of a GGUF needs the 'gguf' package ({exc})") from None
    if not Path(path).is_file():
        raise SpecdecError(f"{path}: no such GGUF file")
    try:
        fields = GGUFReader(str(path)).fields
    except Exception as exc:  # gguf raises ValueError, struct errors, ... on a damaged file
        raise SpecdecError(f"{path}: not a readable GGUF file ({exc})") from None

    def strings(key: str) -> list[str]:
        f = fields.get(f"tokenizer.ggml.{key}")
        return [] if f is None else [bytes(f.parts[i]).decode("utf-8", "replace") for i in f.data]

    def scalar(key: str) -> Any:
        f = fields.get(f"tokenizer.ggml.{key}")
        return None if f is None else f.contents()

    tokens = strings("tokens")
    if not tokens:
        raise SpecdecError(f"{path}: the GGUF has no tokenizer.ggml.tokens (no tokenizer to compare)")
    types = fields.get("tokenizer.ggml.token_type")
    kinds = [] if types is None else [int(types.parts[i][0]) for i in types.data]
    control = frozenset(k for k, kind in enumerate(kinds) if kind == GGUF_CONTROL)
    merges = hashlib.sha256("\n".join(strings("merges")).encode()).hexdigest()
    specials = {k: int(v) for k in GGUF_SPECIAL_IDS if (v := scalar(k)) is not None}
    return GgufVocab(str(scalar("model")), str(scalar("pre")), tuple(tokens), control, specials, merges)


def compare_gguf_tokenizers(draft: Path, target: Path) -> VocabReport:
    """Every difference between the tokenizers in two GGUF files' metadata (module docstring)."""
    d, t = _load_gguf(draft), _load_gguf(target)
    report = VocabReport(str(draft), str(target), len(d.tokens), len(t.tokens))
    for what, a, b in (("tokenizer model", d.model, t.model), ("pre-tokenizer", d.pre, t.pre)):
        if a != b:
            report.problems.append(f"{what}: draft {a!r}, target {b!r}")
    if len(d.tokens) != len(t.tokens):
        report.problems.append(f"vocabulary size: draft {len(d.tokens)}, target {len(t.tokens)}")
    at = next((k for k, (x, y) in enumerate(zip(d.tokens, t.tokens)) if x != y), None)
    if at is not None:
        differ = sum(x != y for x, y in zip(d.tokens, t.tokens))
        report.problems.append(
            f"token id {at}: draft {d.tokens[at]!r}, target {t.tokens[at]!r} ({differ} ids differ in all)"
        )
    for k in sorted(d.control ^ t.control):
        report.problems.append(
            f"control token id {k}: a control token in the {'draft' if k in d.control else 'target'} only"
        )
    for key in sorted(set(d.specials) | set(t.specials)):
        if d.specials.get(key) != t.specials.get(key):
            report.problems.append(f"{key}: draft {d.specials.get(key)}, target {t.specials.get(key)}")
    if d.merges_sha256 != t.merges_sha256:
        report.problems.append("BPE merges: the lists differ")
    return report


def compare_any(draft: Path, target: Path) -> VocabReport:
    """Two GGUF files (llama.cpp) or two Hugging Face folders (vLLM); never one of each."""
    gguf = [Path(p).suffix.lower() == ".gguf" for p in (draft, target)]
    if all(gguf):
        return compare_gguf_tokenizers(draft, target)
    if any(gguf):
        raise SpecdecError(f"the tokenizer preflight compares like with like: {draft} and {target} (one GGUF)")
    return compare_tokenizers(draft, target)


def preflight(draft: Path, target: Path) -> VocabReport:
    """``compare_any``; raises ``VocabMismatch`` listing every problem when they differ."""
    report = compare_any(draft, target)
    if not report.ok:
        lines = "\n  ".join(report.problems)
        raise VocabMismatch(
            f"the draft model's tokenizer ({draft}) is not the target's ({target}); speculation would "
            f"propose tokens the target reads as others and acceptance would collapse:\n  {lines}"
        )
    return report
