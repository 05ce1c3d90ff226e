"""Words with one meaning (issue 44, item 5; docs/glossary.md): a name retired from the code
stays out of it. Each entry: the retired spelling, where it may still stand (the glossary and
dated history say what it was), and why it went."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CODE = ("specdec", "replay", "analytics", "capture", "schemas", "sql", "tests", "benchmarks", "tools")
#: retired name -> why (the word it collided with)
RETIRED = {
    # "recording" is the proxy's rows; the run folder being written is replay/writing.py
    r"specdec\.replay\.recording\b|replay/recording\.py|\bfrom specdec\.replay import recording\b": "replay/writing.py",
    r"\bdef recording\(|\bwith recording\(": "writing_run",
    # "model" is the engine's weights (docs/glossary.md): the SQL models and the planner's predictions
    r"specdec\.analytics\.models\b|analytics/models\.py|\bfrom specdec\.analytics import models\b": "analytics/sql_models.py",
    r"specdec\.analytics\.plan\.model\b|analytics/plan/model\.py": "analytics/plan/predict.py",
    # "level" is one level; how levels are sent is the load mode
    r"specdec\.replay\.load\.levels\b|replay/load/levels\.py": "replay/load/modes.py",
    # "check": an input file is validated (analytics build --validate); compat's replies have validity
    r"specdec\.analytics\.checks\b|analytics/checks\.py|from specdec\.analytics import checks\b": "analytics/input_validation.py",
    r"compat\.checks\b|compat/checks\.py": "specdec/experiments/compat/validity.py",
    # the capture plugin's counts are reconciled with vLLM's, not "checked"
    r"plugin\.selfcheck\b|plugin/selfcheck\.py|\brun_selfcheck\b": "capture/plugin/reconcile.py",
    # one package per engine (issue 44): its build, quantized files and server are in it
    r"specdec\.engines\.(llama_build|llama_cpp_quant)\b|\bllama_build\.py|\bllama_cpp_quant\.py|\bLocalServer\b": "specdec/engines/<engine>/",
    # the rooms of issue 44: traffic and experiments moved out of replay/
    r"specdec\.replay\.(traffic|importers|compat|stability)\b|specdec\.trafficfile\b": "specdec.traffic / specdec.experiments",
    # a level's key is `level`: in open loop it is a rank, not requests in flight (schema version 3)
    r"\b(max|peak|gain_lost|below_one|other|lowest)_concurrency\b|\bconcurrency_levels\b": "level (max_level, levels, ...)",
}


def _code_files():
    for top in CODE:
        base = ROOT / top
        if base.is_symlink():  # specdec/<part> links to the top-level folders, read once there
            continue
        for path in base.rglob("*"):
            if path.suffix in (".py", ".sql") and path.is_file() and path != Path(__file__).resolve():
                yield path


def test_no_retired_name_stands_in_the_code():
    found = []
    for path in _code_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for pattern, instead in RETIRED.items():
            for line_no, line in enumerate(text.splitlines(), 1):
                if re.search(pattern, line) and "until 2026-" not in line:
                    found.append(f"{path.relative_to(ROOT)}:{line_no}: {line.strip()} (now {instead})")
    assert found == []


def test_the_check_finds_what_it_looks_for(tmp_path):
    line = "from specdec.replay.recording import consolidate"
    assert any(re.search(p, line) for p in RETIRED)
    assert not any(re.search(p, "from specdec.replay.writing import consolidate") for p in RETIRED)


def _sql_code(text: str) -> str:
    """A SQL file without its comments (a comment may speak of concurrency, the closed loop's)."""
    return "\n".join(line.split("--", 1)[0] for line in text.splitlines())


def test_the_level_key_is_called_level():
    """The column of a level's key is ``level`` in every record and SQL model: the word
    ``concurrency`` stays for the closed loop's requests in flight, in prose and options."""
    from specdec.schemas import records

    fields = [
        f"{name}.concurrency"
        for name, cls in vars(records).items()
        if isinstance(cls, type) and issubclass(cls, records.BaseModel) and "concurrency" in cls.model_fields
    ]
    sql = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "sql").rglob("*.sql")
        if re.search(r"\bconcurrency\b", _sql_code(path.read_text(encoding="utf-8")))
    ]
    assert (fields, sql) == ([], [])
    assert re.search(r"\bconcurrency\b", _sql_code("select concurrency from t -- concurrency"))
