"""The build's progress: ``build(progress=...)`` is called once per step (each
materialized model, each computed table), counting up to the total it announces,
and ``specdec analytics build`` draws it as a bar only on a terminal."""

from __future__ import annotations

import io

from click.testing import CliRunner

from specdec.analytics.build import COMPUTED, build, build_steps
from specdec.analytics.sql_models import discover
from specdec.cli.common import build_bar
from specdec.cli.main import main
from tests.support.synthetic_run import write_run


def test_every_step_is_reported_once_and_counts_to_the_total(tmp_path):
    calls = []
    build(write_run(tmp_path), progress=lambda done, total, name: calls.append((done, total, name)))
    models = discover()
    want = {m.name for m in models if m.materialized} | {c.TABLE for c in COMPUTED}
    assert len(calls) == build_steps(models) == len(want)
    assert [c[0] for c in calls] == list(range(1, len(want) + 1))
    assert {c[1] for c in calls} == {len(want)}
    assert sorted(c[2] for c in calls) == sorted(want)  # each once


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_bar_is_drawn_on_a_terminal_only(tmp_path):
    with build_bar(True, io.StringIO()) as progress:
        assert progress is None  # not a terminal: no bar, nothing written
    with build_bar(False, _Terminal()) as progress:
        assert progress is None  # --no-progress
    term = _Terminal()
    with build_bar(True, term) as progress:
        progress(1, 2, "acceptance")
        progress(2, 2, "speedup")
    assert "building" in term.getvalue() and "2/2" in term.getvalue()
    out = CliRunner().invoke(main, ["analytics", "build", str(write_run(tmp_path))])
    assert out.exit_code == 0, out.output
    assert out.output.startswith(f"built {tmp_path / 'specdec.duckdb'} in ") and "building" not in out.output
