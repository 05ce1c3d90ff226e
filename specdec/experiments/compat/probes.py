"""The fixed probe set of ``specdec compat``: per feature, one small request
(or a short fixed sequence of them) sent to both arms, with the check its
output must pass.

Every probe is greedy (temperature 0) unless it probes sampling itself
(``seed``), so that both arms should emit the same output; each has a *plain
twin*, the same messages and ``max_tokens`` without the feature, so the
speculative arm's acceptance with the feature can be read beside its
acceptance without it on the same prompt. The request bodies are vLLM's
OpenAI-compatible API (``structured_outputs`` is vLLM's field for regex and
choice); an engine that ignores a field it does not know shows it in the
outcome (``not offered``: no valid output in either arm). A probe whose
prompt the speculative arm proposed no draft token for, with the feature and
on its twin, says nothing about speculation: its cell is ``not tested``,
never ``works`` (``classify``).

What a probe needs from the server before it is built (the longest input,
a token id for ``logit_bias``) is in ``ProbeContext``, found by ``run``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from specdec.experiments.compat import validity
from specdec.experiments.compat.validity import Check

#: Most prompts ask to copy text they hold: prompt lookup (ngram) can then propose tokens, so "no draft
#: with the feature" is evidence about the feature and not about a prompt with nothing to look up.
CODE_PROMPT = (
    "Repeat this Python code exactly, with nothing else:\n\n"
    "def sum_of_squares(numbers):\n    total = 0\n    for n in numbers:\n        total += n * n\n    return total\n"
)
#: Enough for the checks (a stop string, a copied function's first lines, a penalty's effect) and for vLLM's
#: prompt lookup to draft in every probe it drafted in at 48; every token is paid for 2 x repeats times per
#: probe (48 before 2026-12-03: the greedy comparison covers the first 32 tokens of each output, not 48).
DEFAULT_MAX_TOKENS = 32
#: The session's turns: llama.cpp's ngram-mod drafts in its first turn only past 32 tokens (2026-12-03:
#: 103-138 draft tokens at 48, none at 32), and the session is the one feature probe where it drafts at all.
SESSION_MAX_TOKENS = 48

#: A schema whose every valid document is short (enums and a boolean), so max_tokens never cuts one.
CITY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "enum": ["Paris", "Lyon", "Nice"]},
        "country": {"type": "string", "enum": ["France", "Italy"]},
        "is_capital": {"type": "boolean"},
    },
    "required": ["city", "country", "is_capital"],
    "additionalProperties": False,
}
CITY_JSON = '{"city": "Paris", "country": "France", "is_capital": true}'
WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"],
        },
    },
}
TIME_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The current time in a timezone.",
        "parameters": {"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]},
    },
}
TOOLS = [WEATHER_TOOL, TIME_TOOL]
PHONE_REGEX = r"[0-9]{3}-[0-9]{4}(, [0-9]{3}-[0-9]{4}){2}"
COLOURS = ["red", "green", "blue"]
WEATHER_PROMPT = 'What is the weather in Paris in celsius? Call get_weather with {"city": "Paris", "unit": "celsius"}.'
#: The session's shared context: long enough (about 300 tokens) that its prefix fills whole KV-cache blocks
#: (vLLM CPU's are 128 tokens), so a later turn can hit the prefix cache at all.
SESSION_CONTEXT = """Here is our string utilities module:

```python
import re
import unicodedata


def normalize(text: str) -> str:
    \"\"\"Lower-case, strip accents and collapse whitespace.\"\"\"
    text = unicodedata.normalize("NFKD", text)
    text = "".join(c for c in text if not unicodedata.combining(c))
    return re.sub(r"\\s+", " ", text).strip().lower()


def slugify(text: str, sep: str = "-") -> str:
    \"\"\"A URL-safe slug of the text.\"\"\"
    words = re.findall(r"[a-z0-9]+", normalize(text))
    return sep.join(words)


def truncate(text: str, width: int, suffix: str = "...") -> str:
    \"\"\"Cut the text to at most width characters, the suffix included.\"\"\"
    if len(text) <= width:
        return text
    return text[: max(width - len(suffix), 0)] + suffix


def count_words(text: str) -> dict[str, int]:
    \"\"\"How often each normalized word occurs.\"\"\"
    counts: dict[str, int] = {}
    for word in normalize(text).split():
        counts[word] = counts.get(word, 0) + 1
    return counts
```

"""
#: The multi-turn session: user turns and the fixed assistant replies between them (the same in both arms).
SESSION = (
    (SESSION_CONTEXT + "Add a function to it that reverses a string.", "def reverse(s):\n    return s[::-1]"),
    (
        "Now make it reverse the words of a sentence instead.",
        "def reverse_words(s):\n    return ' '.join(s.split()[::-1])",
    ),
    ("Add a docstring and type hints to that function.", None),
)


@dataclass(frozen=True)
class ProbeContext:
    """What the probes need to know about the served model."""

    max_model_len: int | None = None  # None: the long-input probe is not built
    long_prompt: str | None = None  # a user message near max_model_len - max_tokens (``run.long_prompt``)
    bias_token_id: int | None = None  # the id of ``bias_token_text`` (one token), for logit_bias
    bias_token_text: str = " yes"


@dataclass(frozen=True)
class Probe:
    feature: str
    name: str
    constraint: str
    prompt: str
    extra: dict[str, Any]
    check: Check
    max_tokens: int = DEFAULT_MAX_TOKENS
    identity_expected: bool = True
    repeat: int = 1  # feature requests per arm (seed: 2, to see it reproduce)
    twin: bool = True  # a plain twin is sent too
    session: tuple[tuple[str, str | None], ...] = field(default=())  # multi-turn: (user, fixed assistant reply)
    #: sampling settings the plain twin shares with the feature request (a sampled probe's twin samples too,
    #: so the acceptance comparison isolates the feature, not greedy against sampled decoding)
    twin_extra: dict[str, Any] = field(default_factory=dict)
    #: a session's prefix caching: 'on' (one cache_salt per session), 'off' (a fresh one per turn, and
    #: llama.cpp's cache_prompt false); None for a probe that is no session
    prefix_caching: str | None = None

    def messages(self, turns: int | None = None) -> list[dict[str, str]]:
        """The chat messages of the feature request; a session's first ``turns`` turns."""
        if not self.session:
            return [{"role": "user", "content": self.prompt}]
        out: list[dict[str, str]] = []
        n = len(self.session) if turns is None else turns
        for i, (user, assistant) in enumerate(self.session[:n]):
            out.append({"role": "user", "content": user})
            if i < n - 1 and assistant is not None:
                out.append({"role": "assistant", "content": assistant})
        return out

    def bodies(self, model: str, salt: str = "probe") -> list[dict[str, Any]]:
        """The request bodies of the feature, in sending order (one per repeat or turn). ``salt``: the
        session's cache_salt (each repeat of a session sends its own, so that it starts cold)."""
        base = {"model": model, "max_tokens": self.max_tokens, "temperature": 0, **self.extra}
        if self.session:
            return [
                {**base, "messages": self.messages(t), **self._cache(salt, t)} for t in range(1, len(self.session) + 1)
            ]
        return [{**base, "messages": self.messages()} for _ in range(self.repeat)]

    def _cache(self, salt: str, turn: int) -> dict[str, Any]:
        """A session turn's cache fields: vLLM's cache_salt (a prefix is reused only under the same salt) and,
        off, llama.cpp's cache_prompt (each engine ignores the other's field)."""
        if self.prefix_caching == "on":
            return {"cache_salt": salt}
        if self.prefix_caching == "off":
            return {"cache_salt": f"{salt}.turn{turn}", "cache_prompt": False}
        return {}

    def twin_body(self, model: str) -> dict[str, Any] | None:
        """The plain twin: the same messages and max_tokens, no feature; greedy unless ``twin_extra`` says."""
        if not self.twin:
            return None
        return {
            "model": model,
            "max_tokens": self.max_tokens,
            "temperature": 0,
            **self.twin_extra,
            "messages": self.bodies(model)[-1]["messages"],
        }


def _tool_probe(choice: str, constraint: str, tool_choice: Any, named: str | None, *, required: bool) -> Probe:
    """``tool_choice_<choice>``: WEATHER_PROMPT with TOOLS declared, the calls checked by ``validity.tool_call``."""
    return Probe(
        "tools",
        f"tool_choice_{choice}",
        constraint,
        WEATHER_PROMPT,
        {"tools": TOOLS, "tool_choice": tool_choice},
        validity.tool_call(TOOLS, named, required=required),
        max_tokens=64,
    )


def _penalty_probe(penalty: str, value: float) -> Probe:
    """A greedy CODE_PROMPT under one penalty: no output constraint, judged by greedy identity."""
    return Probe(
        "sampling",
        penalty,
        "none (greedy identity)",
        CODE_PROMPT,
        {penalty: value},
        validity.no_constraint(f"{penalty} {value}"),
    )


def probe_set(ctx: ProbeContext) -> list[Probe]:
    """Every probe, in the order sent (``name`` unique)."""
    p = [
        Probe(
            "structured_output",
            "json_object",
            "the reply parses as a JSON object",
            f"Copy this JSON object exactly: {CITY_JSON}",
            {"response_format": {"type": "json_object"}},
            validity.json_object(),
            max_tokens=64,
        ),
        Probe(
            "structured_output",
            "json_schema",
            "the reply validates against CITY_SCHEMA",
            f"Copy this JSON exactly: {CITY_JSON}",
            {"response_format": {"type": "json_schema", "json_schema": {"name": "city", "schema": CITY_SCHEMA}}},
            validity.json_schema(CITY_SCHEMA),
            max_tokens=64,
        ),
        Probe(
            "structured_output",
            "json_schema_stream",
            "the streamed reply validates against CITY_SCHEMA (gaps between chunks: the stall rule)",
            f"Copy this JSON exactly: {CITY_JSON}",
            {
                "response_format": {"type": "json_schema", "json_schema": {"name": "city", "schema": CITY_SCHEMA}},
                "stream": True,
            },
            validity.json_schema(CITY_SCHEMA),
            max_tokens=64,
        ),
        Probe(
            "structured_output",
            "regex",
            f"the reply matches {PHONE_REGEX} exactly",
            "Copy these phone numbers exactly: 555-1234, 555-1234, 555-1234",
            {"structured_outputs": {"regex": PHONE_REGEX}},
            validity.regex(PHONE_REGEX),
            max_tokens=40,
        ),
        Probe(
            "structured_output",
            "choice",
            f"the reply is one of {COLOURS}",
            "What colour is the sky? One word.",
            {"structured_outputs": {"choice": COLOURS}},
            validity.choice(COLOURS),
            max_tokens=8,
        ),
        _tool_probe("auto", "any tool call names a declared tool with valid arguments", "auto", None, required=False),
        _tool_probe("required", "at least one tool call, arguments valid", "required", None, required=True),
        _tool_probe(
            "named",
            "a call of get_weather with valid arguments",
            {"type": "function", "function": {"name": "get_weather"}},
            "get_weather",
            required=True,
        ),
        Probe(
            "tools",
            "tool_choice_named_stream",
            "a streamed call of get_weather with valid arguments (gaps between chunks: the stall rule)",
            WEATHER_PROMPT,
            {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "get_weather"}}, "stream": True},
            validity.tool_call(TOOLS, "get_weather", required=True),
            max_tokens=64,
        ),
        Probe(
            "streaming",
            "stream",
            "streamed output equals the same arm's non-streamed twin",
            CODE_PROMPT,
            {"stream": True, "stream_options": {"include_usage": True}},
            validity.stream_matches_twin(),
        ),
        Probe(
            "logprobs",
            "top_logprobs",
            "one logprobs entry per token with 2 alternatives",
            CODE_PROMPT,
            {"logprobs": True, "top_logprobs": 2},
            validity.logprobs(2),
            max_tokens=16,  # the check is per token; vLLM CPU's logprobs are its slowest probe per token
        ),
        # sampled: vLLM refuses n > 1 under greedy sampling ("n must be 1 when using greedy sampling")
        Probe(
            "sampling",
            "n2",
            "two choices",
            CODE_PROMPT,
            {"n": 2, "temperature": 0.8, "seed": 7},
            validity.n_choices(2),
            identity_expected=False,
            twin_extra={"temperature": 0.8, "seed": 7},
        ),
        Probe(
            "sampling",
            "stop",
            "no output contains the stop string ' for '",
            CODE_PROMPT,
            # the model rewrites the code rather than copying it, but every version of it loops: ' for ' comes
            # after a line or two, which leaves room to draft before it
            {"stop": [" for "]},
            validity.stop_string(" for "),
        ),
        Probe(
            "sampling",
            "seed",
            "the same seeded sampled request twice gives the same output in an arm",
            "Write a short poem about the sea.",
            {"temperature": 0.9, "seed": 1234},
            validity.same_twice(),
            identity_expected=False,
            repeat=2,
            twin_extra={"temperature": 0.9},
        ),
        _penalty_probe("repetition_penalty", 1.3),
        _penalty_probe("presence_penalty", 0.8),
        _penalty_probe("frequency_penalty", 0.8),
        Probe(
            "sampling",
            "min_tokens",
            "at least 24 completion tokens",
            "What is the capital of France? Answer with one word.",
            {"min_tokens": 24},
            validity.at_least_tokens(24),
            max_tokens=32,
        ),
        *(
            Probe(
                "multi_turn",
                f"session_prefix_cache_{mode}",
                "none (greedy identity per turn)",
                SESSION[0][0],
                {},
                validity.no_constraint(f"a 3-turn session, prefix caching {mode}"),
                max_tokens=SESSION_MAX_TOKENS,
                session=SESSION,
                twin=False,  # by turn: each turn is its own cell, 'on' and 'off' side by side
                prefix_caching=mode,
            )
            for mode in ("on", "off")
        ),
    ]
    if ctx.bias_token_id is not None:
        p.append(
            Probe(
                "sampling",
                "logit_bias",
                f"{ctx.bias_token_text!r} makes up at least half the output",
                CODE_PROMPT,
                {"logit_bias": {str(ctx.bias_token_id): 100}},
                validity.dominated_by(ctx.bias_token_text.strip()),
                max_tokens=16,
            )
        )
    if ctx.long_prompt is not None:
        p.append(
            Probe(
                "long_input",
                "near_max_length",
                f"none (greedy identity); input near max_model_len {ctx.max_model_len}",
                ctx.long_prompt,
                {},
                validity.no_constraint("a long input"),
                max_tokens=16,
            )
        )
    return p
