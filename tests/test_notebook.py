"""The analyst notebook (notebooks/specdec_analysis.ipynb) executed headless, as
`jupyter nbconvert --execute` would, against runs made here.

The run with speculation: 2 repeats at levels 1 and 2, prompts code-0, code-1,
chat-0, chat-1, and per speculative request these verify rounds (k, a), the
same in every block:
    code-0: (4,4)                -> mean of (a + 1) over its rounds = 5
    code-1: (4,0) (4,0) (4,1)    -> (1 + 1 + 2) / 3 = 4/3
    chat-0: (4,1) (4,0)          -> (2 + 1) / 2 = 1.5
    chat-1: (4,2)                -> 3
so the pooled acceptance length 1 + sum(a) / rounds and the per-request one differ:
    code: pooled 1 + 5/4 = 2.25   per request (5 + 4/3) / 2 = 3.1667
    chat: pooled 1 + 3/3 = 2.0    per request (1.5 + 3) / 2 = 2.25
The runs without speculation have the same requests, with rounds that
proposed nothing (k = 0), or with no captured rounds at all.

The kernel is this interpreter (sys.executable), named in a kernelspec written
to a temporary JUPYTER_PATH, and the notebook is checked to have run in it.
Without nbformat / nbclient / ipykernel the tests are skipped, except under
CI=true, where they fail: CI installs the test extras."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import duckdb
import pytest

from specdec.analytics.build import build
from specdec.schemas.records import RoundTrace
from tests.support.synthetic_run import RUN, T0, repeated_counters, repeated_requests, write_run

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "specdec_analysis.ipynb"
KERNEL = "specdec-notebook-test"
DECODE = {"code-0": [(4, 4)], "code-1": [(4, 0), (4, 0), (4, 1)], "chat-0": [(4, 1), (4, 0)], "chat-1": [(4, 2)]}
NO_DRAFT = [(0, 0), (0, 0)]


def e2e(arm: str, prompt_id: str, level: int, repeat: int) -> float:
    if arm == "baseline":
        return 2000.0 + 100 * repeat
    return (1000.0 if prompt_id.startswith("code") else 1900.0) * level**0.5 + 50 * repeat


def rounds_for(requests, speculate: bool) -> list[RoundTrace]:
    """One prefill row, then the decode rows of DECODE (speculative arm) or NO_DRAFT."""
    rows, step = [], 0
    for q in requests:
        decode = DECODE[q.prompt_id] if speculate and q.arm == "speculative" else NO_DRAFT
        pid = 1 if q.arm == "baseline" else 2
        for rnd, (k, a) in enumerate([(0, 0), *decode]):
            step += 1
            rows.append(
                RoundTrace(
                    run_id=RUN,
                    engine_request_id=f"chatcmpl-{q.request_id}-0123abcd",
                    pid=pid,
                    process_token=f"{pid}-cafe0001",
                    step_index=step,
                    round_index=rnd,
                    phase="prefill" if rnd == 0 else "decode",
                    tokens_proposed=k,
                    tokens_accepted=a,
                    tokens_emitted=a + 1,
                    batch_size=1,
                    num_scheduled_tokens=10 if rnd == 0 else 1 + k,
                    context_len=10 + rnd,
                    draft_ms=1.0 if k else None,
                    verify_ms=10.0,
                    wall_time_ns=T0 + step,
                )
            )
    return rows


def make_db(run_dir: Path, rounds: str) -> Path:
    """rounds: 'speculative' (DECODE), 'no drafts' (k = 0 only) or 'none' (nothing captured)."""
    run_dir.mkdir()
    requests = repeated_requests(e2e)
    rows = [] if rounds == "none" else rounds_for(requests, speculate=rounds == "speculative")
    drafts = (
        (lambda arm, level, r: 7.0 if arm == "speculative" else None)
        if rounds == "speculative"
        else (lambda arm, level, r: None)
    )
    write_run(run_dir, repeated_counters(drafts=drafts), requests=requests, rounds=rows)
    return build(run_dir)


def text(cell) -> str:
    """What a cell printed and displayed as text."""
    parts = []
    for out in cell.get("outputs", []):
        if out["output_type"] == "stream":
            parts.append(out["text"])
        elif out["output_type"] in ("display_data", "execute_result"):
            parts.append(out["data"].get("text/plain", ""))
    return "\n".join(parts)


def svgs(cell) -> list[str]:
    return [
        out["data"]["image/svg+xml"]
        for out in cell.get("outputs", [])
        if out["output_type"] in ("display_data", "execute_result") and "image/svg+xml" in out["data"]
    ]


@pytest.fixture
def run_notebook(tmp_path: Path, monkeypatch):
    """run_notebook(db) -> {cell id: executed cell}, every cell run in this interpreter."""
    missing = [m for m in ("nbformat", "nbclient", "ipykernel") if importlib.util.find_spec(m) is None]
    if missing:
        why = f"{', '.join(missing)} not installed (the test extras: pip install -e '.[test]')"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{why}; CI installs the test extras, so the notebook test must run", pytrace=False)
        pytest.skip(why)
    import nbformat
    from nbclient import NotebookClient

    spec_dir = tmp_path / "jupyter" / "kernels" / KERNEL
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "specdec tests (this interpreter)",
                "language": "python",
            }
        )
    )
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))

    def run(db: Path) -> dict:
        monkeypatch.setenv("SPECDEC_DB", str(db))
        nb = nbformat.read(NOTEBOOK, as_version=4)
        nb.cells.append(nbformat.v4.new_code_cell("import sys\nprint(sys.executable)", id="which-python"))
        NotebookClient(nb, timeout=60, kernel_name=KERNEL, resources={"metadata": {"path": str(tmp_path)}}).execute()
        cells = {cell.id: cell for cell in nb.cells}
        assert text(cells["which-python"]).strip() == sys.executable
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert cell.execution_count is not None, f"cell {cell.id} did not run"
                assert not [o for o in cell.outputs if o["output_type"] == "error"], f"cell {cell.id} raised"
        return cells

    return run


def test_committed_notebook_has_no_outputs():
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code and all(c["outputs"] == [] and c["execution_count"] is None for c in code)


def test_notebook_answers_from_the_marts(tmp_path, run_notebook):
    db = make_db(tmp_path / "run", "speculative")
    with duckdb.connect(str(db), read_only=True) as con:
        categories = {r[0] for r in con.sql("select distinct category from speedup").fetchall()}
        definitions = con.sql("""
            select category, vllm_mean_acceptance_length, aiperf_acceptance_length_per_request
            from acceptance_definitions where arm = 'speculative' and category in ('code', 'chat')""").fetchall()
    assert categories == {"(system)", "code", "chat"}
    assert {c: (round(p, 4), round(q, 4)) for c, p, q in definitions} == {"code": (2.25, 3.1667), "chat": (2.0, 2.25)}

    cells = run_notebook(db)

    everything = "\n".join(text(c) for c in cells.values())
    assert "cannot be read" not in everything and "not in this database" not in everything
    shown = text(cells["speedup-table"])
    for category in categories:
        assert category in shown
    said = text(cells["definitions-table"])
    for category, pooled, per_request in definitions:
        assert (
            f"speculative / {category}: acceptance length pooled {pooled:.4f} vs per request {per_request:.4f}"
        ) in said
    (speedup_chart,) = svgs(cells["speedup-chart"])
    assert ">code<" in speedup_chart and ">chat<" in speedup_chart  # the legend's categories
    for chart_cell in ("definitions-chart", "positions", "step-timing"):
        assert len(svgs(cells[chart_cell])) == 1, chart_cell


@pytest.mark.parametrize("rounds", ["no drafts", "none"])
def test_notebook_runs_to_the_end_without_speculative_rounds(tmp_path, run_notebook, rounds):
    cells = run_notebook(make_db(tmp_path / "run", rounds))

    assert "no speculative verify round (k > 0) in this run" in text(cells["definitions-table"])
    assert "no speculative verify round in this run" in text(cells["positions"])
    assert not svgs(cells["definitions-chart"]) and not svgs(cells["positions"])
    assert "code" in text(cells["speedup-table"]) and len(svgs(cells["speedup-chart"])) == 1
