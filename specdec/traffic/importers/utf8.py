"""Texts held as their UTF-8 pieces, and Arrow string columns built from them.

A Mooncake row's prompt is its prefix blocks' texts in order, a tail and the
pool prompt: about 27k characters that differ from row to row, most of them
Chinese or mixed (so not ASCII). Built as a Python ``str`` per row and handed
to ``pa.array``, that text was joined once in Python (2-4 bytes a character)
and encoded again by Arrow: 78-118 us of CPU per row on this host, about as
much as the rest of the row's work. Held instead as the tuple of its pieces'
UTF-8 bytes (each block's bytes encoded once, when the block is first made),
a batch's column is one ``bytes.join`` and an offsets array (18-41 us a row,
the same Arrow array: ``tests/traffic/importers/test_utf8.py``).
"""

from __future__ import annotations

from array import array
from itertools import accumulate

import pyarrow as pa
import pyarrow.compute as pc


class Utf8Parts:
    """A text as the concatenation of UTF-8 pieces; ``str()`` joins and decodes it.
    ``len()`` is its length in bytes (what a batch of the writer counts)."""

    __slots__ = ("nbytes", "parts")

    def __init__(self, parts: tuple[bytes, ...]):
        self.parts = parts
        self.nbytes = sum(map(len, parts))

    def __str__(self) -> str:
        return b"".join(self.parts).decode("utf-8")

    def __len__(self) -> int:
        return self.nbytes

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Utf8Parts):
            return b"".join(self.parts) == b"".join(other.parts)
        return isinstance(other, str) and str(self) == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Utf8Parts({len(self.parts)} parts, {self.nbytes} bytes)"


class Utf8Blocks(Utf8Parts):
    """A prompt made of shared text blocks (``blocks.Block``: ``start`` its id,
    ``data`` its UTF-8 bytes) and a tail of its own: what a traffic file of
    format version 3 stores as ``prompt_blocks`` + ``prompt_tail`` (``writer``),
    and otherwise the whole text, as any ``Utf8Parts``."""

    __slots__ = ("blocks", "tail")

    def __init__(self, blocks: tuple, tail: bytes):
        self.blocks, self.tail = blocks, tail  # ``parts`` and ``nbytes`` when first asked (a v3 file never asks)

    def __getattr__(self, name: str):
        if name not in ("parts", "nbytes"):
            raise AttributeError(name)
        self.parts = (*(b.data for b in self.blocks), self.tail)
        self.nbytes = sum(map(len, self.parts))
        return getattr(self, name)


def plain(value):
    """``value`` with a ``Utf8Parts`` turned into its ``str`` (anything else unchanged)."""
    return str(value) if isinstance(value, Utf8Parts) else value


def string_array(values: list) -> pa.Array | list:
    """An Arrow string array of ``values`` (str, ``Utf8Parts`` or None),
    built from the pieces' bytes when any value is ``Utf8Parts``; otherwise
    ``values`` itself (Arrow converts a list of str as before)."""
    if not any(isinstance(v, Utf8Parts) for v in values):
        return values
    pieces: list[bytes] = []
    sizes: list[int] = []
    nulls = False
    for v in values:
        if v is None:
            nulls = True
            sizes.append(0)
        elif isinstance(v, Utf8Parts):
            pieces.extend(v.parts)
            sizes.append(v.nbytes)
        else:
            b = v.encode("utf-8")
            pieces.append(b)
            sizes.append(len(b))
    return _from_pieces(values, pieces, sizes, nulls)


def bytes_string_array(values: list[bytes | None]) -> pa.Array:
    """An Arrow string array of UTF-8 ``values`` (or None) given as bytes."""
    sizes = [0 if v is None else len(v) for v in values]
    return _from_pieces(values, [v for v in values if v is not None], sizes, None in values)


def _from_pieces(values: list, pieces: list[bytes], sizes: list[int], nulls: bool) -> pa.Array:
    offsets = array("i", [0])
    offsets.extend(accumulate(sizes))  # OverflowError past 2**31 - 1 bytes: the writer's batches stay far below
    out = pa.StringArray.from_buffers(len(values), pa.py_buffer(offsets), pa.py_buffer(b"".join(pieces)))
    if nulls:
        out = pc.if_else(pa.array([v is None for v in values]), pa.nulls(len(values), pa.string()), out)
    return out
