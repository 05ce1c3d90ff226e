"""The team's prompt pool, and composing real context up to a target length.

Traces without text (Azure, Mooncake, BurstGPT) give each request only its
lengths. Acceptance of speculative decoding depends on content, so instead of
filler words each row gets a real prompt from this pool and, in front of it,
real context material (short documents, code, earlier-turn dialogues) until
the tokenized chat reaches the row's input length.

The pool is package data under ``specdec/traffic/data/prompt_pool/`` (or any folder with
the same files): ``prompts*.jsonl`` (one prompt a line: id, category, tier,
language en|zh|mixed, text) and ``context*.jsonl`` (one piece of material a
line: id, kind document|code|dialogue, language, title, text).

Composition never repeats or pads: material is split into units (lines and
sentences) that are taken in order; the last unit may be cut at a word (or, in
Chinese, character) boundary. When all material is used and the target is
still not reached, the row keeps what exists and says so (``status``
``short``). Token counting is injected (``TokenCounter``): the importers use the
served model's tokenizer and chat template, the unit tests a fake counter.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from specdec.errors import InputFileError
from specdec.schemas.strict import Label, Prompt

POOL_DIR = Path(__file__).parent / "data" / "prompt_pool"

#: Tier of each category the issue names; a pool may add categories of its own.
CATEGORY_TIERS = {
    "code": "high",
    "structured": "high",
    "template": "high",
    "summarize": "medium",
    "rewrite": "medium",
    "translate": "medium",
    "chat": "low",
    "creative": "low",
    "advice": "low",
}
#: Which kinds of material a category's prompts read first (then the others).
KIND_PREFERENCE = {
    "code": ("code", "document", "dialogue"),
    "structured": ("document", "code", "dialogue"),
    "template": ("document", "dialogue", "code"),
    "summarize": ("document", "dialogue", "code"),
    "rewrite": ("document", "dialogue", "code"),
    "translate": ("document", "dialogue", "code"),
    "chat": ("dialogue", "document", "code"),
    "creative": ("dialogue", "document", "code"),
    "advice": ("dialogue", "document", "code"),
}
#: Between the context and the prompt in the user message.
SEPARATOR = "\n\n"


#: Composition stops trying to get closer once within this many tokens.
EXACT = 2


def tolerance(target: int) -> int:
    """How far the composed chat's token count may miss a target: the larger of
    8 tokens and 1% of the target."""
    return max(8, math.ceil(0.01 * target))


def unit_hash(seed: int, *parts: object) -> float:
    """A deterministic number in [0, 1) from a seed and a key (blake2b)."""
    digest = hashlib.blake2b("\x1f".join(map(str, (seed, *parts))).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


# ------------------------------------------------------------ records
class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class PoolPrompt(_Strict):
    """One prompt of the pool."""

    id: Label = Field(description="Stable id, unique in the pool (e.g. code-en-03).")
    category: Label = Field(description="Category (see CATEGORY_TIERS).")
    tier: Literal["high", "medium", "low"] = Field(description="Predictability tier of the category.")
    language: Literal["en", "zh", "mixed"] = Field(description="Language of the prompt.")
    text: Prompt = Field(description="The prompt as a user would send it.")


class ContextPiece(_Strict):
    """One piece of context material."""

    id: Label = Field(description="Stable id, unique in the pool.")
    kind: Literal["document", "code", "dialogue"] = Field(description="What the piece is.")
    language: Literal["en", "zh", "mixed"] = Field(description="Language of the piece.")
    title: Label = Field(description="A short title, for people reading content notes.")
    text: Prompt = Field(description="The material itself.")


@dataclass(frozen=True)
class Pool:
    prompts: tuple[PoolPrompt, ...]
    pieces: tuple[ContextPiece, ...]

    def categories(self) -> list[str]:
        return sorted({p.category for p in self.prompts})

    def matching(self, key: str) -> list[PoolPrompt]:
        """Prompts of a category, or of every category of a tier."""
        return [p for p in self.prompts if key in (p.category, p.tier)]


def _read_records(path: Path, model: type[BaseModel]) -> list:
    out = []
    for i, line in enumerate(path.read_text(encoding="utf-8").split("\n"), start=1):
        if not line.strip():
            continue
        try:
            out.append(model.model_validate(json.loads(line)))
        except json.JSONDecodeError as exc:
            raise InputFileError(path, f"invalid JSON ({exc.msg} at column {exc.colno})", row=i) from None
        except ValidationError as exc:
            err = exc.errors()[0]
            raise InputFileError(path, err["msg"], row=i, field=".".join(map(str, err["loc"])) or None) from None
    return out


def load_pool(folder: str | Path = POOL_DIR) -> Pool:
    """Read and check a pool folder; InputFileError names file, row and field."""
    folder = Path(folder)
    prompts = [p for f in sorted(folder.glob("prompts*.jsonl")) for p in _read_records(f, PoolPrompt)]
    pieces = [p for f in sorted(folder.glob("context*.jsonl")) for p in _read_records(f, ContextPiece)]
    if not prompts:
        raise InputFileError(folder, "no prompts: expected prompts*.jsonl files with at least one prompt")
    if not pieces:
        raise InputFileError(folder, "no context material: expected context*.jsonl files")
    seen: set[str] = set()
    for rec in (*prompts, *pieces):
        if rec.id in seen:
            raise InputFileError(folder, f"id {rec.id!r} appears twice in the pool", field="id")
        seen.add(rec.id)
    for p in prompts:
        if CATEGORY_TIERS.get(p.category, p.tier) != p.tier:
            raise InputFileError(
                folder,
                f"prompt {p.id!r}: category {p.category!r} is tier {CATEGORY_TIERS[p.category]!r}, not {p.tier!r}",
                field="tier",
            )
    return Pool(tuple(prompts), tuple(pieces))


# ------------------------------------------------------------ token counting
class TokenCounter(Protocol):
    def text(self, text: str) -> int:
        """Tokens of a bare text (no special tokens)."""

    def chat(self, messages: list[dict]) -> int:
        """Tokens of the chat as the server would see it (template applied,
        generation prompt added)."""


class HFTokenCounter:
    """Counts with a Hugging Face tokenizer folder and its chat template (the
    prepared SmolLM2 folder by default), the way vLLM renders a chat request."""

    def __init__(self, model_dir: str | Path):
        from transformers import AutoTokenizer  # heavy: only when content is composed

        self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir))

    def text(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def chat(self, messages: list[dict]) -> int:
        rendered = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return len(self.tokenizer.encode(rendered, add_special_tokens=False))


# ------------------------------------------------------------ units
@dataclass(frozen=True)
class Unit:
    """A line or sentence of one piece, with its token count."""

    piece: str
    text: str
    tokens: int


_SPLIT = re.compile(r"(?<=\n)|(?<=[.!?] )|(?<=[。！？；])")


def split_units(piece: ContextPiece, counter: TokenCounter) -> list[Unit]:
    """Lines and sentences of a piece, in order; joined they give the piece's
    text plus a blank line (so consecutive pieces stay apart)."""
    text = piece.text.rstrip() + "\n\n"
    parts = [p for p in _SPLIT.split(text) if p]
    return [Unit(piece.id, p, counter.text(p)) for p in parts]


@dataclass
class Composed:
    """The content given to one row, and what was done to get it."""

    messages: list[dict]
    prompt_id: str
    target: int
    reached: int
    context: list[tuple[str, int]] = field(default_factory=list)  # (piece id, tokens taken)
    cut: str | None = None  # piece whose last unit was cut
    n_units: int = 0  # units taken (the last one possibly cut)
    #: ok (within tolerance) | over (the prompt alone is longer than the target) |
    #: short (all the material given was used) | missed (did not converge)
    status: str = "ok"

    def note(self, **extra) -> str:
        """The row's content_note: JSON text a person can read."""
        return json.dumps(
            {
                "pool_prompt": self.prompt_id,
                "context": [f"{p}:{t}" for p, t in self.context],
                "cut": self.cut,
                "target_tokens": self.target,
                "reached_tokens": self.reached,
                "tolerance": tolerance(self.target),
                "status": self.status,
                **extra,
            },
            ensure_ascii=False,
        )


def _cut(unit: Unit, budget: int, counter: TokenCounter) -> Unit | None:
    """The longest prefix of a unit within ``budget`` tokens, ending at a word
    boundary where the text has spaces; None when nothing fits."""
    lo, hi = 0, len(unit.text)
    while lo < hi:  # largest k with tokens(text[:k]) <= budget
        mid = (lo + hi + 1) // 2
        if counter.text(unit.text[:mid]) <= budget:
            lo = mid
        else:
            hi = mid - 1
    text = unit.text[:lo]
    if 0 < lo < len(unit.text) and _mid_word(unit.text[lo - 1], unit.text[lo]):
        back = lo
        while back > 0 and _mid_word(unit.text[back - 1], "a"):
            back -= 1
        text = unit.text[:back]
    if not text.strip():
        return None
    return Unit(unit.piece, text, counter.text(text))


def _mid_word(before: str, after: str) -> bool:
    """Whether a cut between these characters would split a Latin word or
    number (a cut between Chinese characters is fine)."""
    return before.isascii() and before.isalnum() and after.isascii() and after.isalnum()


class Units(Protocol):
    """What ``compose`` reads of its units: each in order, and how many there are (a list,
    or ``importers.content``'s lazy walk over a row's blocks)."""

    def __iter__(self) -> Iterator[Unit]: ...

    def __len__(self) -> int: ...


def compose(
    prompt: PoolPrompt,
    target: int,
    units: Units,
    counter: TokenCounter,
    history: list[dict] | None = None,
) -> Composed:
    """Messages (``history`` + one user message: context units in order, then
    the prompt) whose token count reaches ``target`` within ``tolerance``.

    Units are taken as a prefix of ``units`` (so rows given the same leading
    units share their leading text); the last one taken may be cut.
    """
    history = list(history or [])

    def build(ctx: str) -> list[dict]:
        content = ctx.rstrip() + SEPARATOR + prompt.text if ctx.strip() else prompt.text
        return history + [{"role": "user", "content": content}]

    base = counter.chat(build(""))
    result = Composed(build(""), prompt.id, target, base)
    tol = tolerance(target)
    if base > target + tol:
        result.status = "over"
        return result
    if base >= target - tol:
        return result
    need = target - base - counter.text(SEPARATOR)
    best: Composed | None = None
    for _ in range(4):  # the sum of unit counts is close to, not exactly, the joined text's count
        taken, used, cut = [], 0, None
        for u in units:
            if used + u.tokens <= need:
                taken.append(u)
                used += u.tokens
                continue
            part = _cut(u, need - used, counter)
            if part is not None:
                taken.append(part)
                cut = u.piece
            break
        exhausted = cut is None and len(taken) == len(units)
        messages = build("".join(u.text for u in taken))
        reached = counter.chat(messages)
        result = Composed(messages, prompt.id, target, reached, _by_piece(taken), cut, len(taken))
        if best is None or abs(reached - target) < abs(best.reached - target):
            best = result
        if abs(reached - target) <= EXACT or (exhausted and reached < target):
            break
        need -= reached - target
    assert best is not None  # the loop above ran at least once
    result = best
    if result.reached < target - tol:
        used_all = result.cut is None and result.n_units == len(units)
        result.status = "short" if used_all else "missed"  # short: all the material given was used
    elif result.reached > target + tol:
        result.status = "missed"
    return result


def _by_piece(units: list[Unit]) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    for u in units:
        if out and out[-1][0] == u.piece:
            out[-1] = (u.piece, out[-1][1] + u.tokens)
        else:
            out.append((u.piece, u.tokens))
    return out
