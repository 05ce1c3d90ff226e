"""The verdict in words: a few sentences at the top of the report and the
terminal summary, computed only from mart rows.

Per category (and ``(system)``): where speculation pays (speedup, its
family-wise interval, up to which concurrency), where it is equivalent to off
within the run's margin, where the run cannot tell, where it costs, and from
which level the gain falls below a fraction of its peak (``knee``, cited only
after a peak labelled ``faster``); then the calibration check (whether one
variance per category fits every level: quiet unless a level's block figures
spread more than the model allows, then which level, how much, and what it
means for its labels; and the family-wise error rate of the labels); then the
lossless result in one sentence, with its precision (dtype) and sample sizes,
when the ``lossless`` mart exists. Labels are the ``speedup`` mart's
(``analytics/labels.py``: faster / slower / equivalent / inconclusive);
nothing is judged again here, and every figure is printed with the interval
its label reads.

Everything takes plain rows (dicts with the marts' column names), so tests
can change the data and watch the sentence change. A sentence is a tuple of
parts; a part may carry the anchor of the mart row it comes from
(``row_anchor``), which the HTML report turns into a link and gives the row.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from specdec.analytics.labels import bounds_text
from specdec.levels import name_of

Names = Mapping[int, str] | None  # level key -> name (open loop); None: c<key>

__all__ = [
    "Part",
    "Sentence",
    "calibration_sentence",
    "category_sentence",
    "lossless_sentence",
    "row_anchor",
    "verdict",
]

SYSTEM = "(system)"


@dataclass(frozen=True)
class Part:
    text: str
    anchor: str | None = None  # id of the report element (mart row or table) it comes from


@dataclass(frozen=True)
class Sentence:
    parts: tuple[Part, ...]

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.parts)


def row_anchor(table: str, *key: object) -> str:
    """A stable HTML id for one mart row (or a whole table with no key): the
    table name, a readable slug of the key and a short hash, so hostile or
    colliding category names still give distinct, inert ids."""
    if not key:
        return f"{table}-table"  # not the bare name: a chart's element may use it
    raw = "\x1f".join(str(k) for k in key)
    slug = re.sub(r"[^A-Za-z0-9]+", "-", raw).strip("-")[:40]
    digest = hashlib.sha1(raw.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{table}-{slug}-{digest}" if slug else f"{table}-{digest}"


def _up_to(key: int, names: Names) -> str:
    return f"concurrency {key}" if key not in (names or {}) else name_of(key, names)


def _x(v: float) -> str:
    return f"{v:.2f}x"


def _pct(v: float) -> str:
    """0.05 -> '5%', 0.125 -> '12.5%'."""
    return f"{100 * v:.3g}%"


def _ci(r: dict) -> str:
    level = r.get("ci_level") or 0.95
    return f"{100 * level:.3g}% CI {bounds_text(r['ci_low'], r['ci_high'])}"


def _figures(rows: Sequence[dict], with_ci: bool = True, names: Names = None, equivalence: bool = False) -> list[Part]:
    """'2.40x (95% CI 2.20-2.60) at c1, ...', each figure linked to its row; ``equivalence``:
    the interval the label ``equivalent`` was read from (two one-sided tests) leads, where the
    row has it: '1.00x (TOST 0.97-1.02; 99% CI 0.95-1.05) at c1'."""
    out: list[Part] = []
    for i, r in enumerate(rows):
        ci = f" ({_ci(r)})" if with_ci and r.get("ci_low") is not None else ""
        if ci and equivalence and r.get("equivalence_low") is not None and r.get("equivalence_high") is not None:
            ci = f" (TOST {bounds_text(r['equivalence_low'], r['equivalence_high'])}; {_ci(r)})"
        out.append(
            Part(
                f"{_x(r['speedup'])}{ci} at {name_of(r['level'], names)}",
                row_anchor("speedup", r["category"], r["level"]),
            )
        )
        if i < len(rows) - 1:
            out.append(Part(", "))
    return out


def _count(rows: Sequence[dict], col: str, noun: str) -> str:
    """'24 pairs', '1 pair', '20-24 pairs' over the rows."""
    values = sorted({r[col] for r in rows})
    n = f"{values[0]}" if len(values) == 1 else f"{values[0]}-{values[-1]}"
    return f"{n} {noun}" + ("" if n == "1" else "s")


def _sample(cat: str, rows: Sequence[dict]) -> str:
    """The sample size behind the figures: pairs (prompts x repeats) per level."""
    if cat == SYSTEM:
        return f"n = {_count(rows, 'repeats', 'repeat')} per level, whole-level throughput"
    return (
        f"n = {_count(rows, 'pairs', 'pair')} per level: {_count(rows, 'prompts', 'prompt')} x "
        f"{_count(rows, 'repeats', 'repeat')}"
    )


def category_sentence(cat: str, rows: Iterable[dict], knee: dict | None = None, names: Names = None) -> Sentence:
    """One category's verdict from its speedup rows (any order) and its knee row;
    ``names``: level key -> name for open-loop levels (``specdec.levels``)."""
    rows = sorted(rows, key=lambda r: r["level"])
    computed = [r for r in rows if r.get("speedup") is not None]
    excluded = [r for r in rows if r.get("speedup") is None]
    parts: list[Part] = [Part(f"{cat}: ")]
    if not computed:
        reason = excluded[0]["excluded_reason"] if excluded else "no level measured"
        parts.append(
            Part(
                f"no speedup figure at any level ({reason})",
                row_anchor("speedup", cat, excluded[0]["level"]) if excluded else None,
            )
        )
        return Sentence(tuple(parts))
    by_label = {
        lab: [r for r in computed if r.get("label") == lab]
        for lab in ("faster", "equivalent", "inconclusive", "slower", None)
    }
    clauses: list[list[Part]] = []
    faster = by_label["faster"]
    if faster:
        head = (
            "faster at every level"
            if faster == computed
            else f"faster up to {_up_to(faster[-1]['level'], names)}"
            if len(faster) > 1 and faster == computed[: len(faster)]
            else "faster"
        )
        clauses.append([Part(head + ": ")] + _figures(faster, names=names) + _margin_note(faster, "gain"))
    equivalent = by_label["equivalent"]
    if equivalent:
        margin = _pct(equivalent[0].get("margin") or 0.05)
        head = "equivalent to off" + (" at every level" if equivalent == computed else "")
        clauses.append([Part(f"{head} (within +-{margin}): ")] + _figures(equivalent, names=names, equivalence=True))
    unsure = by_label["inconclusive"]
    if unsure:
        head = "inconclusive at every level" if unsure == computed else "inconclusive"
        clauses.append([Part(head + ": ")] + _figures(unsure, names=names) + [Part(_resolution(unsure))])
    slower = by_label["slower"]
    if slower:
        head = "slower at every level" if slower == computed else "slower"
        clauses.append([Part(head + ": ")] + _figures(slower, names=names) + _margin_note(slower, "loss"))
    unlabelled = by_label[None]
    if unlabelled:
        basis = unlabelled[0].get("label_basis") or "no interval"
        clauses.append(_figures(unlabelled, with_ci=False, names=names) + [Part(f" ({basis})")])
    for reason in dict.fromkeys(r["excluded_reason"] for r in excluded):  # one clause per reason
        clause = [Part("no figure at ")]
        for i, r in enumerate(r for r in excluded if r["excluded_reason"] == reason):
            anchor = row_anchor("speedup", cat, r["level"])
            clause += [Part(", " if i else ""), Part(name_of(r["level"], names), anchor)]
        clauses.append(clause + [Part(f" ({reason})")])
    if knee and knee.get("gain_lost_level") is not None and knee.get("peak_label") == "faster":
        frac = knee.get("peak_fraction") or 0.5
        clauses.append(
            [
                Part(
                    f"gain below {frac:.0%} of its peak ({_x(knee['peak_speedup'])} at "
                    f"{name_of(knee['peak_level'], names)}) from "
                    f"{name_of(knee['gain_lost_level'], names)}",
                    row_anchor("knee", cat),
                )
            ]
        )
    for i, clause in enumerate(clauses):
        parts += clause
        parts.append(Part("; " if i < len(clauses) - 1 else ""))
    parts.append(Part(f" [{_sample(cat, computed)}]."))
    return Sentence(tuple(p for p in parts if p.text))


def _margin_note(rows: Sequence[dict], what: str) -> list[Part]:
    """Whether the faster (slower) figures also clear the margin."""
    margin = _pct(rows[0].get("margin") or 0.05)
    clears = [r.get("clears_margin") for r in rows]
    if all(c is True for c in clears):
        return [Part(f", each {what} beyond the {margin} margin")]
    if all(c is False for c in clears):
        return [Part(f" (the {what} may be under the {margin} margin)")]
    short = [name_of(r["level"], None) for r in rows if r.get("clears_margin") is False]
    return [Part(f" (at {', '.join(short)} the {what} may be under the {margin} margin)")]


def _percent(share: float) -> str:
    """A share as a whole percent from 10% up (210, not 2.1e+02), two figures below."""
    return f"{100 * share:.0f}" if share >= 0.1 else f"{100 * share:.2g}"


def _resolution(rows: Sequence[dict]) -> str:
    """'; this run cannot tell effects smaller than about 12% from none; --repeats 9 would resolve +-5%'."""
    detect = max((r.get("detectable_effect") or 0.0) for r in rows)
    needed = max((r.get("repeats_needed") or 0) for r in rows)
    margin = _pct(rows[0].get("margin") or 0.05)
    text = f"; this run cannot tell effects smaller than about {_percent(detect)}% from none"
    if needed > 100:
        return text + f" (more than 100 repeats would be needed to resolve +-{margin})"
    if needed:
        return text + f"; --repeats {needed} would resolve +-{margin}"
    return text


def _noise_clause(rows: Sequence[dict], names: Names) -> list[Part]:
    """The calibration check (``analytics/fit.py``) in words: quiet unless a level is noisier."""
    tested = sorted({r["level"] for r in rows})
    noisier = sorted({r["level"] for r in rows if r["noise_check"] == "noisier"})
    if not noisier:
        return [
            Part(
                f"one variance per category fits every level (no level's block figures spread more than the "
                f"others' at a 5% family-wise error rate; {len(tested)} levels tested)"
            )
        ]
    parts: list[Part] = []
    for i, lv in enumerate(noisier):
        here = sorted(
            (r for r in rows if r["level"] == lv and r["noise_check"] == "noisier"),
            key=lambda r: -(r.get("noise_ratio") or 0.0),
        )
        where = name_of(lv, names)
        p = here[0].get("noise_p_value")
        ratios = ", ".join(
            f"{r['noise_ratio']:.1f}x ({r['category']})"
            if math.isfinite(r["noise_ratio"])
            else f"without bound ({r['category']}: its other levels do not vary at all)"
            for r in here
        )
        parts.append(
            Part(
                ("; " if i else "")
                + f"{where} is noisier than the intervals assume: its block figures vary {ratios} as much as "
                f"at the other levels"
                + (f" (p = {p:.2g}, Holm over {len(tested)} levels, 5% family-wise)" if p is not None else ""),
                row_anchor("speedup", here[0]["category"], lv),
            )
        )
        parts.append(
            Part(
                f", so the intervals at {where} are too narrow and its labels less certain than their level says "
                f"(the other levels' intervals somewhat too wide)"
            )
        )
    return parts


def calibration_sentence(rows: Sequence[dict], names: Names = None) -> Sentence | None:
    """The calibration check beside the verdict: whether one variance per
    category fits every level (``noise_check``, ``analytics/fit.py``; said only
    when a level is noisier, with how much and what it means for its labels),
    and the family-wise error rate and margin the labels were read with."""
    labelled = [r for r in rows if r.get("label") is not None]
    checked = [r for r in rows if r.get("noise_check") is not None]
    if not labelled and not checked:
        return None
    parts: list[Part] = [Part("calibration: ")]
    if checked:
        parts += _noise_clause(checked, names)
    if labelled:
        sizes = sorted({r["family_size"] for r in labelled if r.get("family_size")})
        margin = _pct(labelled[0].get("margin") or 0.05)
        parts.append(
            Part(
                ("; " if checked else "") + f"labels hold a 5% family-wise error rate over "
                f"{sizes[-1] if sizes else len(labelled)} labels with a {margin} margin "
                "declared before the run"
            )
        )
    parts.append(Part("."))
    return Sentence(tuple(parts))


def _levels_text(levels: Sequence[int], names: Names) -> str:
    levels = sorted(set(levels))
    return (
        name_of(levels[0], names)
        if len(levels) == 1
        else f"{name_of(levels[0], names)} to {name_of(levels[-1], names)}"
        if names
        else f"c{levels[0]}-c{levels[-1]}"
    )


def lossless_sentence(rows: Sequence[dict], dtype: str | None, names: Names = None) -> Sentence:
    """The lossless result in one sentence, from the lossless mart's rows. A
    level whose lossless pass ran without speculation (``pass_valid``
    false: the speculative arm's draft counters did not move) is not counted,
    and the sentence says so."""
    dtypes = sorted({r["dtype"] for r in rows if r.get("dtype")})
    dtype = ", ".join(dtypes) if dtypes else dtype  # the mart's own record first, else the manifest's
    invalid = sorted({r["level"] for r in rows if r.get("pass_valid") is False})
    rows = [r for r in rows if r.get("pairs") is not None and r.get("pass_valid") is not False]
    total = lambda col: sum(r.get(col) or 0 for r in rows)  # noqa: E731
    pairs, suspect = total("pairs"), total("suspect")
    if not pairs and invalid:
        return Sentence(
            (
                Part("lossless: not shown", row_anchor("lossless")),
                Part(
                    f" (speculation did not run during the lossless pass at "
                    f"{_levels_text(invalid, names)}: the speculative arm's draft counters did not move)."
                ),
            )
        )
    if not pairs:
        return Sentence(
            (
                Part("lossless: not verified", row_anchor("lossless")),
                Part(" (no greedy pair in the lossless pass)."),
            )
        )
    identical, near = total("identical"), total("near_tie")
    aa_pairs, aa_identical = total("aa_pairs"), total("aa_identical")
    thresholds = sorted({r["near_tie_threshold"] for r in rows if r.get("near_tie_threshold") is not None})
    where = _levels_text([r["level"] for r in rows], names)
    margin = ""
    if len(thresholds) == 1:
        source = {r.get("near_tie_threshold_source") for r in rows} - {None}
        flips = max((r.get("near_tie_threshold_divergences") or 0) for r in rows)
        basis = (
            f": the largest of {flips} A/A flip{'s' if flips != 1 else ''}"
            if source == {"aa_divergences"}
            else f": the {dtype} default, no A/A flip to calibrate from"
            if source == {"dtype_default"}
            else f": the {dtype} default, which the run's {flips} A/A flip{'s' if flips != 1 else ''} stayed within"
            if source == {"dtype_floor"}
            else ""
        )
        margin = f" (the baseline's runner-up, margin at most {thresholds[0]:g} nats{basis})"
    aa = f"; A/A floor {aa_identical}/{aa_pairs} identical" if aa_pairs else "; no A/A floor"
    head = f"lossless: {suspect} suspect divergence{'s' if suspect != 1 else ''} in {pairs} greedy pairs"
    anchor = row_anchor("lossless_divergences") if suspect else row_anchor("lossless")
    tail = ""
    if invalid:
        tail += (
            f"; {', '.join(name_of(c, names) for c in invalid)} not counted: speculation did not run during "
            "its lossless pass (draft counters unchanged)"
        )
    if any(r.get("pass_valid") is None for r in rows) and any("pass_valid" in r for r in rows):
        tail += "; speculation during the pass not confirmed (no counter reads)"
    detail = (
        f" ({dtype or 'dtype not recorded'}, {where}; {identical}/{pairs} identical, "
        f"{near} near-tie{'s' if near != 1 else ''}{margin}{aa}{tail})."
    )
    return Sentence((Part(head, anchor), Part(detail)))


def verdict(
    speedup: Iterable[dict],
    knee: Iterable[dict] = (),
    lossless: Sequence[dict] | None = None,
    dtype: str | None = None,
    names: Names = None,
) -> tuple[Sentence, ...]:
    """Every sentence: categories in name order, '(system)' last, then lossless.
    ``names``: level key -> name for open-loop runs (``specdec.levels``)."""
    by_cat: dict[str, list[dict]] = {}
    for r in speedup:
        by_cat.setdefault(r["category"], []).append(r)
    knees = {k["category"]: k for k in knee}
    order = sorted(c for c in by_cat if c != SYSTEM) + ([SYSTEM] if SYSTEM in by_cat else [])
    out = [category_sentence(c, by_cat[c], knees.get(c), names) for c in order]
    calibration = calibration_sentence([r for c in order for r in by_cat[c]], names)
    if calibration is not None:
        out.append(calibration)
    if lossless is not None:
        out.append(lossless_sentence(lossless, dtype, names))
    return tuple(out)
