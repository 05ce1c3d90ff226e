"""Output validity under a feature's constraint: one small function per kind
of constraint, each answering ``(valid, detail)`` for one arm's replies.

``valid`` is True or False when the output could be judged (a reply cut at
``max_tokens`` before the constraint was met is invalid: each probe leaves
room for a complete valid output), None when it could not (the probe has no
output constraint and is judged by greedy identity alone, or the plain twin
shows the probe did not exercise the feature). JSON
Schema validation uses ``jsonschema`` (installed with great-expectations, a
specdec dependency).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jsonschema

from specdec.experiments.compat.replies import MAX_JSON_DEPTH, MAX_REPLY_BYTES, Reply
from specdec.json_limits import scan

Verdict = tuple[bool | None, str]


@dataclass(frozen=True)
class ArmReplies:
    """One arm's replies for a cell: the feature request(s) (two for a probe sent
    twice, one per turn for a session) and the plain twin (None without one)."""

    feature: Sequence[Reply]
    twin: Reply | None

    @property
    def first(self) -> Reply:
        return self.feature[0]


Check = Callable[[ArmReplies], Verdict]


def _cut(reply: Reply, why: str) -> Verdict:
    """Invalid; a reply cut at max_tokens says so (an incomplete document is no valid one: every probe's
    max_tokens leaves room for a complete valid output, so the cut is the engine's doing)."""
    if reply.truncated:
        return False, f"cut at max_tokens, incomplete ({why})"
    return False, why


def no_constraint(what: str) -> Check:
    """A probe whose output has no constraint of its own (judged by greedy identity)."""

    def check(r: ArmReplies) -> Verdict:
        return None, f"no output constraint ({what}); judged by greedy identity"

    return check


def _loads(text: str) -> Any:
    """``text`` as JSON; a ValueError when it is not, or is nested deeper than ``MAX_JSON_DEPTH``
    (checked first: Python's parser would recurse once per level, into a RecursionError)."""
    scan(text, max_depth=MAX_JSON_DEPTH, max_string=MAX_REPLY_BYTES)
    return json.loads(text)


def _text(r: ArmReplies) -> str:
    """The first feature reply's first choice's text ("" without a choice)."""
    return r.first.choices[0].text if r.first.choices else ""


def _parsed(judge: Callable[[Any], Verdict]) -> Check:
    """A check of the first reply's text as JSON: invalid when it does not parse, else ``judge(value)``."""

    def check(r: ArmReplies) -> Verdict:
        try:
            value = _loads(_text(r))
        except ValueError as exc:
            return _cut(r.first, f"not JSON: {exc}")
        return judge(value)

    return check


def _an_object(value: Any) -> Verdict:
    return (True, "a JSON object") if isinstance(value, dict) else (False, f"JSON but a {type(value).__name__}")


def json_object() -> Check:
    return _parsed(_an_object)


def json_schema(schema: dict[str, Any]) -> Check:
    return _parsed(lambda value: _validate(value, schema, "the schema"))


def _validate(value: Any, schema: dict[str, Any], what: str) -> Verdict:
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(part) for part in exc.absolute_path) or "(root)"
        return False, f"violates {what} at {where}: {exc.message}"
    return True, f"validates against {what}"


def regex(pattern: str) -> Check:
    def check(r: ArmReplies) -> Verdict:
        text = _text(r)
        if re.fullmatch(pattern, text):
            return True, f"matches {pattern}"
        return _cut(r.first, f"{text[:40]!r} does not match {pattern}")

    return check


def choice(options: Sequence[str]) -> Check:
    def check(r: ArmReplies) -> Verdict:
        text = _text(r)
        return (
            (True, f"{text!r} is a choice")
            if text in options
            else (False, f"{text[:40]!r} is not one of {list(options)}")
        )

    return check


def tool_call(tools: Sequence[dict[str, Any]], named: str | None, required: bool) -> Check:
    """Every tool call names a declared function (``named``: that one) with arguments valid under its
    parameters; ``required``: at least one call."""
    params = {t["function"]["name"]: t["function"]["parameters"] for t in tools}

    def check(r: ArmReplies) -> Verdict:
        calls = [c for ch in r.first.choices for c in ch.tool_calls]
        if not calls:
            if required:
                return _cut(r.first, "no tool call")
            return True, "answered without a tool call (allowed under auto)"
        for call in calls:
            if call["name"] not in params or (named and call["name"] != named):
                return False, f"calls {call['name']!r}, not {named or sorted(params)}"
            try:
                args = _loads(call["arguments"])
            except ValueError as exc:
                return _cut(r.first, f"arguments not JSON: {exc}")
            verdict = _validate(args, params[call["name"]], f"{call['name']}'s parameters")
            if not verdict[0]:
                return verdict
        return True, f"{len(calls)} tool call(s), arguments valid"

    return check


def stream_matches_twin() -> Check:
    """Streamed output equals the same arm's non-streamed twin (greedy)."""

    def check(r: ArmReplies) -> Verdict:
        if r.twin is None or not r.twin.accepted:
            return None, "no non-streamed twin to compare with"
        same = r.first.normalized() == r.twin.normalized()
        return (True, "streamed = non-streamed") if same else (False, "streamed output differs from non-streamed")

    return check


def logprobs(top: int) -> Check:
    def check(r: ArmReplies) -> Verdict:
        for ch in r.first.choices:
            if not ch.logprobs:
                return False, "no logprobs in the reply"
            if r.first.completion_tokens is not None and len(ch.logprobs) != r.first.completion_tokens:
                return False, f"{len(ch.logprobs)} logprob entries for {r.first.completion_tokens} tokens"
            short = [e for e in ch.logprobs if len(e.get("top_logprobs") or []) < top]
            if short:
                return False, f"{len(short)} position(s) with fewer than {top} top_logprobs"
        return True, f"one entry per token, {top} alternatives each"

    return check


def n_choices(n: int) -> Check:
    def check(r: ArmReplies) -> Verdict:
        k = len(r.first.choices)
        return (True, f"{n} choices") if k == n else (False, f"{k} choice(s) for n={n}")

    return check


def stop_string(stop: str) -> Check:
    def check(r: ArmReplies) -> Verdict:
        if any(stop in ch.text for ch in r.first.choices):
            return False, f"output contains the stop string {stop!r}"
        if r.twin is not None and r.twin.accepted and not any(stop in ch.text for ch in r.twin.choices):
            return None, f"not exercised: the plain twin never wrote {stop!r}"
        return True, f"stopped before {stop!r}"

    return check


def same_twice() -> Check:
    """A seeded, sampled request sent twice gives the same output both times."""

    def check(r: ArmReplies) -> Verdict:
        if len(r.feature) < 2 or not all(x.accepted for x in r.feature):
            return None, "needs two accepted replies"
        same = r.feature[0].normalized() == r.feature[1].normalized()
        return (True, "same seed, same output twice") if same else (False, "same seed, different outputs")

    return check


def dominated_by(token_text: str) -> Check:
    """A +100 logit bias on one token: it makes up at least half of the output."""

    def check(r: ArmReplies) -> Verdict:
        text = _text(r)
        share = text.count(token_text) * len(token_text) / max(len(text), 1)
        if share >= 0.5:
            return True, f"{token_text!r} is {share:.0%} of the output"
        return False, f"{token_text!r} is only {share:.0%} of the output"

    return check


def at_least_tokens(m: int) -> Check:
    def check(r: ArmReplies) -> Verdict:
        got = r.first.completion_tokens
        if got is None:
            return None, "usage.completion_tokens missing"
        if r.twin is not None and r.twin.completion_tokens is not None and r.twin.completion_tokens >= m:
            return None, f"not exercised: the plain twin already wrote {r.twin.completion_tokens} >= {m} tokens"
        return (True, f"{got} >= {m} tokens") if got >= m else (False, f"{got} < min_tokens {m}")

    return check
