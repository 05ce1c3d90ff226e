"""Category of a recorded request: the ``X-Specdec-Category`` header, else
the first matching rule of ``--rules FILE``, else ``unknown``.

A rules file is JSON::

    {"rules": [
        {"category": "code", "content": "(?i)\\bdef |```python"},
        {"category": "chat", "model": "chat-.*", "route": "/v1/chat/completions"}
    ]}

Each rule gives a ``category`` and at least one condition; all its
conditions must hold, and the first rule that matches wins:

* ``route``: regular expression matched against the whole request path;
* ``model``: regular expression matched against the whole model name as sent;
* ``content``: regular expression searched for anywhere in the text of the
  request's messages (or its prompt), before any redaction.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from specdec.errors import InputFileError
from specdec.schemas.strict import MAX_LABEL_LEN, Label

CATEGORY_HEADER = "X-Specdec-Category"
SESSION_HEADER = "X-Specdec-Session"
UNKNOWN = "unknown"


class CategoryRule(BaseModel):
    """One rule of a rules file."""

    model_config = ConfigDict(extra="forbid")

    category: Label = Field(max_length=MAX_LABEL_LEN, description="Category given to a request the rule matches.")
    route: str | None = Field(default=None, description="Regular expression, full match on the request path.")
    model: str | None = Field(default=None, description="Regular expression, full match on the model name as sent.")
    content: str | None = Field(default=None, description="Regular expression, searched in the messages' text.")

    @field_validator("route", "model", "content")
    @classmethod
    def _regex(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a valid regular expression ({exc})") from None
        return value

    @model_validator(mode="after")
    def _some_condition(self) -> CategoryRule:
        if self.route is None and self.model is None and self.content is None:
            raise ValueError("a rule needs at least one of route, model and content")
        return self


def _compiled(pattern: str | None) -> re.Pattern[str] | None:
    return None if pattern is None else re.compile(pattern)


class CategoryRules:
    """Compiled rules; ``category(...)`` is what the recorder calls."""

    def __init__(self, rules: Sequence[CategoryRule] = ()):
        self.rules = [(r.category, _compiled(r.route), _compiled(r.model), _compiled(r.content)) for r in rules]

    def category(self, route: str, model: str | None, text: str) -> str:
        for category, route_re, model_re, content_re in self.rules:
            if route_re is not None and not route_re.fullmatch(route):
                continue
            if model_re is not None and (model is None or not model_re.fullmatch(model)):
                continue
            if content_re is not None and not content_re.search(text):
                continue
            return category
        return UNKNOWN


def load_rules(path: Path) -> CategoryRules:
    """Read and check a rules file; every problem names the file, rule and field."""
    path = Path(path)
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise InputFileError(path, f"cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise InputFileError(path, f"not UTF-8 ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise InputFileError(path, f"invalid JSON ({exc.msg}, line {exc.lineno})") from None
    if not isinstance(data, dict) or set(data) != {"rules"} or not isinstance(data["rules"], list):
        raise InputFileError(path, 'expected a JSON object {"rules": [ ... ]} and nothing else')
    rules = []
    for i, item in enumerate(data["rules"], start=1):
        try:
            rules.append(CategoryRule.model_validate(item))
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(p) for p in err["loc"]) or None
            raise InputFileError(path, f"rule {i}: {err['msg']}", field=field) from None
    return CategoryRules(rules)
