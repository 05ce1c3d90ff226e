"""What a traffic file holds (``specdec traffic inspect``): row counts,
category shares, tiers, sources, sessions, temperatures, length histograms and
the arrival-rate curve; as a dict (``profile``, the ``--json`` output) and as
text (``render``). A compact part of it (``manifest_traffic``: the shares and
the arrival-rate curve) goes into the run manifest, so the report can draw the
traffic of a run without the traffic file.

Definitions (stated once, here):

* share of a category = its rows / all rows.
* length histograms (``input_tokens`` when the file records it, ``max_tokens``
  always): power-of-two bins [0, 1), [1, 2), [2, 4), ... [2^k, 2^(k+1)),
  from the bin of the smallest value to the bin of the largest (empty bins
  between included); quantiles are nearest-rank (the ceil(q n)-th smallest).
* arrival-rate curve (rows with ``arrival_ms``): the time from the bin of the
  first arrival to the last, cut into bins of ``bin_s`` seconds, the smallest
  of ``NICE_BINS_S`` that needs at most ``MAX_BINS`` bins; per bin, requests
  whose arrival falls in [start, start + bin_s) / bin_s [requests/s]. The last
  bin may be only partly covered by the recording, so its rate can read low.
  The mean rate is (arrivals - 1) / (last - first arrival) [requests/s].
"""

from __future__ import annotations

import math
from collections import Counter

from specdec.traffic.io import Traffic

MAX_BINS = 60
NICE_BINS_S = (0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400)
_BAR = 40


def _shares(counts: dict[str, int]) -> dict[str, float]:
    total = sum(counts.values())
    return {k: v / total for k, v in counts.items()} if total else {}


def _quantile(sorted_values: list, q: float):
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


def length_histogram(values: list[int | None]) -> dict | None:
    """Summary and power-of-two histogram of the known values; None if none is known."""
    known = sorted(v for v in values if v is not None)
    if not known:
        return None

    def bin_of(v: int) -> int:  # -1 for 0, else floor(log2 v)
        return -1 if v == 0 else v.bit_length() - 1

    counts = Counter(bin_of(v) for v in known)
    bins = [
        {"low": 0 if k < 0 else 2**k, "high": 1 if k < 0 else 2 ** (k + 1), "rows": counts.get(k, 0)}
        for k in range(bin_of(known[0]), bin_of(known[-1]) + 1)
    ]
    return {
        "known": len(known),
        "of": len(values),
        "min": known[0],
        "p50": _quantile(known, 0.5),
        "p90": _quantile(known, 0.9),
        "p99": _quantile(known, 0.99),
        "max": known[-1],
        "bins": bins,
    }


def arrival_curve(arrivals_ms: list[float | None], max_bins: int = MAX_BINS) -> dict | None:
    """The arrival-rate curve of the known arrival times; None if none is known."""
    known = sorted(a for a in arrivals_ms if a is not None)
    if not known:
        return None
    first, last = known[0], known[-1]

    def bins_needed(bin_ms: float) -> int:
        return math.floor(last / bin_ms) - math.floor(first / bin_ms) + 1

    bin_s = next((b for b in NICE_BINS_S if bins_needed(b * 1000) <= max_bins), None)
    if bin_s is None:
        bin_s = 86400 * math.ceil(((last - first) / 86_400_000 + 1) / max_bins)
    bin_ms = bin_s * 1000
    start = math.floor(first / bin_ms)
    counts = Counter(math.floor(a / bin_ms) - start for a in known)
    rates = [counts.get(i, 0) / bin_s for i in range(bins_needed(bin_ms))]
    span_s = (last - first) / 1000
    return {
        "known": len(known),
        "of": len(arrivals_ms),
        "first_s": first / 1000,
        "last_s": last / 1000,
        "span_s": span_s,
        "mean_rate_per_s": (len(known) - 1) / span_s if span_s > 0 else None,
        "bin_s": bin_s,
        "start_s": start * bin_s,
        "requests_per_s": rates,
        "peak_rate_per_s": max(rates),
    }


def sessions(traffic: Traffic) -> dict:
    turns = Counter(r.session_id for r in traffic.rows if r.session_id is not None)
    lengths = sorted(turns.values())
    return {
        "sessions": len(turns),
        "rows_in_sessions": sum(lengths),
        "standalone_rows": len(traffic.rows) - sum(lengths),
        "turns_min": lengths[0] if lengths else None,
        "turns_p50": _quantile(lengths, 0.5) if lengths else None,
        "turns_max": lengths[-1] if lengths else None,
    }


def profile(traffic: Traffic) -> dict:
    """Everything ``specdec traffic inspect`` shows, as plain JSON-able data."""
    rows = traffic.rows
    summary = traffic.summary()
    return {
        **summary,
        "category_shares": _shares(summary["categories"]),
        "tiers": dict(sorted(Counter(r.tier or "(none)" for r in rows).items())),
        "sources": dict(sorted(Counter(r.source or "(none)" for r in rows).items())),
        "sessions": sessions(traffic),
        "temperature": {
            "greedy": sum(r.temperature == 0 for r in rows),
            "sampled": sum(r.temperature > 0 for r in rows),
        },
        "input_tokens": length_histogram([r.input_tokens for r in rows]),
        "max_tokens": length_histogram([r.max_tokens for r in rows]),
        "arrival": arrival_curve([r.arrival_ms for r in rows]),
    }


def manifest_traffic(traffic: Traffic) -> dict:
    """The manifest's ``traffic`` entry: ``Traffic.summary()`` plus the category
    shares (the weights of the ``speedup_weighted`` mart when no ``--mix`` is
    given), the session count and, when the rows have arrival times, the
    arrival-rate curve (bin_s, start_s, requests_per_s) the report draws."""
    prof = profile(traffic)
    out = {**traffic.summary(), "category_shares": prof["category_shares"], "sessions": prof["sessions"]["sessions"]}
    if prof["arrival"] is not None:
        a = prof["arrival"]
        out["arrival_rate"] = {k: a[k] for k in ("known", "of", "bin_s", "start_s", "requests_per_s")}
    return out


# ------------------------------------------------------------------ text
def _bar(value: float, top: float) -> str:
    return "#" * max(1 if value else 0, round(_BAR * value / top)) if top else ""


def _hist_lines(name: str, h: dict | None) -> list[str]:
    if h is None:
        return [f"{name}: not recorded"]
    lines = [
        f"{name} (known for {h['known']} of {h['of']} rows): min {h['min']}, p50 {h['p50']}, "
        f"p90 {h['p90']}, p99 {h['p99']}, max {h['max']}"
    ]
    top = max(b["rows"] for b in h["bins"])
    width = len(str(h["bins"][-1]["high"]))
    for b in h["bins"]:
        lines.append(f"  [{b['low']:>{width}}, {b['high']:>{width}})  {b['rows']:>6}  {_bar(b['rows'], top)}")
    return lines


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items())


def render(prof: dict) -> str:
    """The profile as text for a terminal."""
    lines = [
        f"{prof['path']}  ({prof['rows']} rows, sha256 {prof['sha256'][:12]}...)",
        "",
        f"  {'category':<24} {'rows':>7} {'share':>7}",
    ]
    for cat, n in sorted(prof["categories"].items(), key=lambda kv: (-kv[1], kv[0])):
        lines.append(f"  {cat:<24} {n:>7} {prof['category_shares'][cat]:>7.1%}")
    s = prof["sessions"]
    lines += [
        "",
        f"tiers: {_counts(prof['tiers'])}",
        f"sources: {_counts(prof['sources'])}",
        f"temperature: {prof['temperature']['greedy']} greedy (0), {prof['temperature']['sampled']} sampled (> 0)",
        (
            f"sessions: {s['sessions']} ({s['rows_in_sessions']} rows, {s['turns_min']} to {s['turns_max']} "
            f"turns, median {s['turns_p50']}), {s['standalone_rows']} standalone rows"
            if s["sessions"]
            else f"sessions: none ({s['standalone_rows']} standalone rows)"
        ),
        "",
    ]
    lines += _hist_lines("input_tokens", prof["input_tokens"]) + [""]
    lines += _hist_lines("max_tokens", prof["max_tokens"]) + [""]
    a = prof["arrival"]
    if a is None:
        lines.append("arrival: not recorded (no arrival_ms): the file replays closed-loop only")
    else:
        mean = f"{a['mean_rate_per_s']:.3g} requests/s" if a["mean_rate_per_s"] is not None else "n/a (one instant)"
        lines.append(
            f"arrival (known for {a['known']} of {a['of']} rows): "
            f"{a['first_s']:.3f} s to {a['last_s']:.3f} s, "
            f"mean {mean}, peak {a['peak_rate_per_s']:.3g} requests/s in {a['bin_s']:g} s bins"
        )
        for i, rate in enumerate(a["requests_per_s"]):
            start = a["start_s"] + i * a["bin_s"]
            lines.append(f"  {start:>10.1f} s  {rate:>9.3g}/s  {_bar(rate, a['peak_rate_per_s'])}")
    return "\n".join(lines)
