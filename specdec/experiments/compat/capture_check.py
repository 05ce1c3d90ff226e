"""Does the capture still reconcile with the engine's counters, cell by cell?

Where the capture plugin runs in the servers (the embedded vLLM pair: its
``compat-capture/`` folder; the engine tests' shared pair: theirs), each
captured row names the request it belongs to (vLLM's engine request id holds
the probe's ``X-Request-Id``, ``compat.<run>.<engine>.<probe>.<arm>.<seq>``).
For each cell and arm, the rows of the cell's own requests (plain twins
included) are summed and set beside the counters' differences around those
same requests (``probing`` reads them after every request):

- speculative arm: verify rounds (rows with ``tokens_proposed > 0``), draft
  tokens proposed and accepted = ``spec_decode_num_drafts``,
  ``_num_draft_tokens``, ``_num_accepted_tokens`` (as the replay's
  ``reconciliation`` mart compares them);
- baseline arm: no draft token proposed, and the tokens emitted = the
  ``generation_tokens`` counter's difference (without speculation every
  step emits exactly one token per request, none is trimmed after it is
  counted).

An arm with no captured row at all in the run is *not captured* (None, never
a pass); so is an arm whose server exports no such counter.
``classify.with_capture`` writes the flags into the cell.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdec.experiments.compat import classify
from specdec.runfolder import ROUND_PART_GLOB
from specdec.schemas.compat import CompatCell

#: A probe request's id inside an engine request id (vLLM adds 'chatcmpl-' before it and '-<8 hex>' after it).
#: Not an id that goes on after it ('<id>.rescore': a sampling cell's re-scoring of that sample, on the
#: baseline, is not the sample's own request).
REQUEST_ID = re.compile(r"(compat\..+?\.(?:baseline|speculative)\.\d+)(?![\d.])")
ARMS = ("baseline", "speculative")


@dataclass(frozen=True)
class Captured:
    """One request's captured rows, summed."""

    rows: int = 0
    rounds: int = 0  # rows with tokens_proposed > 0
    proposed: int = 0
    accepted: int = 0
    emitted: int = 0

    def __add__(self, o: Captured) -> Captured:
        return Captured(
            self.rows + o.rows,
            self.rounds + o.rounds,
            self.proposed + o.proposed,
            self.accepted + o.accepted,
            self.emitted + o.emitted,
        )


def read_capture(folder: Path, run_id: str, wait_s: float = 5.0, stable_s: float = 1.0) -> dict[str, Captured]:
    """Per probe request id of run ``run_id``, its captured rows summed. Polls ``folder`` until the
    count has not changed for ``stable_s`` (the plugin flushes every second and when its engine
    idles) or ``wait_s`` has passed."""
    deadline = time.monotonic() + wait_s
    found = _read(folder, run_id)
    since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(min(stable_s / 2, max(deadline - time.monotonic(), 0)))
        again = _read(folder, run_id)
        if sum(c.rows for c in again.values()) != sum(c.rows for c in found.values()):
            found, since = again, time.monotonic()
        elif time.monotonic() - since >= stable_s:
            break
    return found


def _read(folder: Path, run_id: str) -> dict[str, Captured]:
    import pyarrow.parquet as pq  # heavy: pyarrow, only when a capture is read

    out: dict[str, Captured] = {}
    marker = f"compat.{run_id}."
    for f in sorted(folder.glob(ROUND_PART_GLOB)):
        try:
            cols = pq.read_table(
                f, columns=["engine_request_id", "tokens_proposed", "tokens_accepted", "tokens_emitted"]
            ).to_pydict()
        except Exception:  # a part being written, or a foreign file: the next poll sees it whole
            continue
        for eid, k, a, e in zip(
            cols["engine_request_id"], cols["tokens_proposed"], cols["tokens_accepted"], cols["tokens_emitted"]
        ):
            m = REQUEST_ID.search(eid) if marker in eid else None
            if m is None:
                continue
            row = Captured(1, int(k > 0), k, a, e)
            out[m.group(1)] = out.get(m.group(1), Captured()) + row
    return out


def reconcile_arm(
    arm: str, ids: Iterable[str], counters: Mapping[str, Any] | None, captured: Mapping[str, Captured], armed: bool
) -> tuple[bool | None, str]:
    """(reconciles, what was compared) for one arm of one cell; ``armed``: the arm has captured rows
    somewhere in the run (else: not captured)."""
    if not armed:
        return None, f"{arm}: not captured"
    got = sum((captured.get(i, Captured()) for i in ids), Captured())

    def n(key: str) -> int | None:
        return classify.counter(counters, key)

    if arm == "speculative":
        engine = (n("spec_num_drafts"), n("spec_num_draft_tokens"), n("spec_num_accepted_tokens"))
        if None in engine:
            return None, f"{arm}: {got.rows} rows captured, no speculation counters to compare"
        mine = (got.rounds, got.proposed, got.accepted)
        return (
            mine == engine,
            f"{arm}: captured rounds/proposed/accepted {mine_text(mine)} vs counters {mine_text(engine)}",
        )
    gen = n("generation_tokens")
    if gen is None:
        return None, f"{arm}: {got.rows} rows captured, no generation-token counter to compare"
    ok = got.proposed == 0 and got.emitted == gen
    return ok, f"{arm}: captured emitted {got.emitted} (proposed {got.proposed}) vs generation tokens {gen}"


def mine_text(t: tuple[int | None, ...]) -> str:
    return "/".join("-" if x is None else str(x) for x in t)


def reconcile(
    cells: list[CompatCell], sent: list[dict[str, Any]], captured: Mapping[str, Captured] | None
) -> list[CompatCell]:
    """Every cell with its capture flags (``classify.with_capture``); ``captured`` None: no capture
    was active (every cell 'not captured')."""
    evidence = {name: ev for entry in sent for name, ev in (entry.get("cells") or {}).items()}
    armed = {arm: captured is not None and any(f".{arm}." in rid for rid in captured) for arm in ARMS}
    out = []
    for cell in cells:
        ev = evidence.get(cell.probe)
        if ev is None or captured is None:
            out.append(classify.with_capture(cell, None, None, "not captured" if ev is not None else None))
            continue
        flags = {
            arm: reconcile_arm(arm, ev[arm]["request_ids"], ev[arm]["counters"], captured, armed[arm]) for arm in ARMS
        }
        out.append(
            classify.with_capture(
                cell, flags["baseline"][0], flags["speculative"][0], "; ".join(f[1] for f in flags.values())
            )
        )
    return out
