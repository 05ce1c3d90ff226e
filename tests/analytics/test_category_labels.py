"""A category holding control characters (issue 24, case 10): ``specdec
validate`` refuses it in run files as the traffic schema does, and chart
labels are stripped of control characters before the renderer (vl-convert
aborts the whole process on ESC, NUL or BEL: exit 134, no charts).

The renderer is run in a subprocess: an abort would take pytest down with it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from click.testing import CliRunner

from specdec.analytics.report.chart_text import CONTROL_ONLY, chart_safe, strip_control
from specdec.cli.main import main
from tests.support.synthetic_run import make_requests, write_run

ESC = "\x1b[2Jcode"


def _esc_run(run_dir):
    """conftest's tiny run with the category of every "code" request set to ESC[2Jcode."""
    requests = [r.model_copy(update={"category": ESC}) if r.category == "code" else r for r in make_requests()]
    return write_run(run_dir, requests=requests)


# ------------------------------------------------------------------ validate
def test_validate_refuses_a_control_character_in_a_run_files_category(tmp_path):
    run = _esc_run(tmp_path)
    r = CliRunner().invoke(main, ["validate", str(run)])
    assert r.exit_code == 1, r.output
    failed = [line for line in r.output.splitlines() if "category_is_label" in line]
    assert failed and "FAILED" in failed[0]
    assert "requests.parquet, row " in r.output and "field 'category': category='\\x1b[2Jcode'" in r.output
    assert "\x1b" not in r.output  # shown escaped, never sent to the terminal


def test_validate_passes_plain_categories(tmp_path):
    run = write_run(tmp_path)
    r = CliRunner().invoke(main, ["validate", str(run)])
    passed = [line for line in r.output.splitlines() if "category_is_label" in line]
    assert passed and "passed" in passed[0]


# ------------------------------------------------------------------ sanitiser
def test_strip_control_removes_what_a_label_may_not_hold():
    assert strip_control(ESC) == "[2Jcode"
    assert strip_control("a\x00b\x07c\x7fd\x85e\tf\ng\u2028h\u2029i") == "abcdefghi"
    assert strip_control("\x1b\x00") == CONTROL_ONLY
    assert strip_control("") == ""
    assert strip_control("café 代码 🚀") == "café 代码 🚀"  # other Unicode is kept


def test_chart_safe_copies_every_string_value_and_keeps_keys():
    spec = {
        "data": {"values": [{"category": ESC, "speedup": 1.5, "n": None}]},
        "encoding": {"color": {"field": "category", "type": "nominal"}},
        "title": "Speedup\x07",
        "layer": [["x\x00"], ("y",)],
    }
    safe = chart_safe(spec)
    assert safe == {
        "data": {"values": [{"category": "[2Jcode", "speedup": 1.5, "n": None}]},
        "encoding": {"color": {"field": "category", "type": "nominal"}},
        "title": "Speedup",
        "layer": [["x"], ["y"]],
    }
    assert spec["data"]["values"][0]["category"] == ESC  # the input is left alone


def test_chart_safe_of_a_deep_spec_needs_no_recursion():
    deep: list = []
    node = deep
    for _ in range(50_000):
        node.append([])
        node = node[0]
    node.append("\x1b")
    out = chart_safe(deep)
    for _ in range(50_000):
        out = out[0]
    assert out == [CONTROL_ONLY]


# ------------------------------------------------------------------ renderer
_RENDER = textwrap.dedent("""
    import sys
    from pathlib import Path

    import duckdb

    import vl_convert

    from specdec.analytics.build import build
    from altair.utils._importers import vl_version_for_vl_convert

    from specdec.analytics.report.write import chart_specs, write_pngs
    from specdec.analytics.report.data import load_report

    run_dir, mode = Path(sys.argv[1]), sys.argv[2]
    con = duckdb.connect(str(build(run_dir)), read_only=True)
    data = load_report(con)
    con.close()
    specs = chart_specs(data)
    if mode == "raw":  # the renderer itself, on the unsanitised specs
        for spec in specs.values():
            vl_convert.vegalite_to_png(spec, vl_version=vl_version_for_vl_convert())
        print(len(specs))
    else:  # the report's own writer, which sanitises (labels_text.chart_safe)
        print(len(write_pngs(specs, run_dir)))
""")


def _render(run_dir, mode: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", _RENDER, str(run_dir), mode], capture_output=True, text=True, timeout=300
    )


def test_the_reports_charts_of_an_esc_category_render_once_sanitised(tmp_path):
    run = _esc_run(tmp_path)
    raw = _render(run, "raw")
    assert raw.returncode != 0 and "panic" in raw.stderr  # the renderer aborts on ESC: why the sanitiser exists
    safe = _render(run, "report")
    assert safe.returncode == 0, safe.stderr[-2000:]
    assert int(safe.stdout.strip().splitlines()[-1]) >= 1
    assert list((run / "charts").glob("*.png"))
