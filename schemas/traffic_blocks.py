"""Traffic format version 3: a Parquet traffic file may store prompts as
shared text blocks, so a file of rows whose prompts share long prefixes (a
Mooncake trace: ~30 blocks of 512 tokens a row) holds each block once.

The stored form, and how a reader turns it back into ``TrafficRow.prompt``
(``specdec.traffic.raw``):

* The file's key-value metadata ``traffic_blocks`` (``BLOCKS_KEY``) holds the
  block table: JSON text, an array of ``TrafficBlock`` objects, each
  ``block_id`` once.
* A row may leave ``prompt`` null and give ``prompt_blocks`` (block ids, in
  order) and ``prompt_tail`` (its own text after them; null means none); its
  prompt is then the blocks' texts in order followed by the tail, exactly.
  ``TrafficStoredPrompt`` defines the two columns.
* Every other column is ``TrafficRow``'s. A row may still give its whole
  ``prompt`` (or ``messages``); a version-1 or -2 file is a valid version-3
  file, and a reader that knows version 3 gives the same records for both.

Only Parquet has the stored form; JSON Lines rows give their prompts whole.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from specdec.schemas.strict import StrictInt, Text

#: Key of the block table in a version-3 Parquet file's key-value metadata.
BLOCKS_KEY = "traffic_blocks"


class TrafficBlock(BaseModel):
    """One text block of a traffic file's block table."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    block_id: StrictInt = Field(ge=0)
    """The block's id, unique within the file; rows name it in prompt_blocks."""
    text: Text
    """The block's text, joined as it is (no separator) into the prompts that name it."""
    tokens: StrictInt | None = Field(default=None, ge=0)
    """The block's text alone counted by the writer's tokenizer (informational: a prompt's count is not the sum of its blocks'); None: not counted."""


class TrafficStoredPrompt(BaseModel):
    """The two columns a version-3 Parquet row may give its prompt with (instead of ``prompt``)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    prompt_blocks: list[StrictInt] | None = None
    """Ids of the block table's blocks whose texts, in this order and followed by prompt_tail, are the row's prompt; None: the row gives prompt or messages itself."""
    prompt_tail: Text | None = None
    """The row's own text after its blocks (with prompt_blocks only); None: no tail."""
