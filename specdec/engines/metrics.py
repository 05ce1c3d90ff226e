"""What specdec reads from an engine's Prometheus page (``/metrics``): the
cumulative counters around each block, and two gauges sampled during it
(``replay/resources.py``). Parsing only: the page is fetched by
``specdec/http/metrics.py``.

Counters are summed over label sets (engine, model_name); a metric the server
does not export (no speculation in the baseline) is None, not 0. Gauges: the
KV-cache usage is the largest over engines, the running requests their sum.
"""

from __future__ import annotations

from collections.abc import Callable

from specdec.schemas.counters import COUNTER_FIELDS, ENGINE_COUNTERS

#: specdec's key -> vLLM's counter, from the one table of the counter columns (``schemas.counters``)
COUNTERS: dict[str, str] = {k: COUNTER_FIELDS[k][0] for k in ENGINE_COUNTERS}
#: how the values of a gauge's label sets combine (the KV-cache usage: the largest over engines;
#: the running requests: their sum)
_COMBINE: dict[str, Callable[[list[float]], float]] = {"kv_cache_usage": max, "requests_running": sum}
#: specdec's key -> (vLLM's gauge, how the values of its label sets combine)
GAUGES: dict[str, tuple[str, Callable[[list[float]], float]]] = {
    k: (COUNTER_FIELDS[k][0], how) for k, how in _COMBINE.items()
}


def parse_counters(text: str, counters: dict[str, str] | None = None) -> dict[str, float | None]:
    """Sum the wanted counters in a Prometheus text exposition; ``counters`` (specdec key ->
    metric name) defaults to vLLM's, another engine's adapter passes its own
    (``specdec/engines``)."""
    counters = COUNTERS if counters is None else counters
    values = _samples(text, {v: k for k, v in counters.items()})
    return {k: (sum(values[k]) if values[k] else None) for k in counters}


def parse_metrics(text: str) -> dict[str, float | None]:
    """Every counter of ``COUNTERS`` and gauge of ``GAUGES`` in one page."""
    return {**parse_counters(text), **parse_gauges(text)}


def parse_gauges(text: str) -> dict[str, float | None]:
    """The gauges of ``GAUGES``, each combined over label sets as stated there."""
    values = _samples(text, {name: k for k, (name, _how) in GAUGES.items()})
    return {k: (how(values[k]) if values[k] else None) for k, (_name, how) in GAUGES.items()}


def _samples(text: str, wanted: dict[str, str]) -> dict[str, list[float]]:
    """Metric name -> key in ``wanted``; every sample value per key. A sample
    line is ``name[{labels}] value [timestamp]``; unparsable values are skipped."""
    out: dict[str, list[float]] = {k: [] for k in wanted.values()}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        brace = line.find("{")
        space = line.find(" ")
        if brace >= 0 and (space < 0 or brace < space):
            name, rest = line[:brace], line[line.find("}", brace) + 1 :]
        elif space >= 0:
            name, rest = line[:space], line[space:]
        else:
            continue
        key = wanted.get(name)
        if key is None:
            continue
        fields = rest.split()
        try:
            out[key].append(float(fields[0]))
        except (IndexError, ValueError):
            continue
    return out
