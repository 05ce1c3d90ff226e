"""Arms as named configurations, and the comparisons they make: one place.

A run has any number of **arms**, each a named server configuration: an
engine (``vllm`` or ``llama.cpp``) and its speculation settings (None: no
speculation). Each arm with speculation is measured against a **reference**
arm of the same run:

- the one it names (``reference``), else
- the first arm without speculation on the same engine, else
- the run's **baseline**: its first arm without speculation.

So ``vllm-none, vllm-ngram, llama-none, llama-ngram`` makes two
comparisons: vllm-ngram against vllm-none and llama-ngram against llama-none.
The classic run is the pair ``baseline`` / ``speculative``, one comparison.

**How the analytics see a comparison.** Every model compares two *roles*,
``baseline`` (the reference) and ``speculative`` (the treatment), within one
``run_id``. A classic run keeps its run id and its arm names (they are the
roles). A run of named arms is analysed as one *analysis run* per comparison,
``<run_id>/<treatment arm>``, with its reference arm's rows as ``baseline``
and the treatment's as ``speculative`` (a reference shared by two comparisons
is in both; nothing pools across them, as nothing pools across runs). An arm
in no comparison (a reference nobody is measured against) is an analysis run
of its own, ``<run_id>/<arm>``, baseline only. ``ROLES_TABLE`` holds the map
(``role_rows``); the staging models read it, and a run it does not name (a
classic run, or a run only the lake holds) keeps its ids. The arm's own name
stays in every staging model as ``arm_name``, the run folder's id as
``source_run_id``.

Arm names are plain (``ARM_NAME``: lower-case letters, digits, ``-`` and
``_``): they are part of request ids (``sd.<run>.<arm>.c<level>...``) and of
file names in the run folder.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specdec.engines import ENGINE_NAMES, ENGINES
from specdec.schemas.strict import ARM_NAME, check_arm_name

__all__ = [
    "ARM_NAME",
    "BASELINE",
    "ENGINE_NAMES",
    "NGRAM",
    "ROLES",
    "ROLES_TABLE",
    "SPECULATIVE",
    "ArmSpec",
    "Comparison",
    "analysis_run_id",
    "check_arm_name",
    "check_arms",
    "classic",
    "comparison_manifest",
    "comparisons",
    "parse_arm",
    "STAGING_ADDED",
    "by_role_columns",
    "create_roles_table",
    "reference_of",
    "role_rows",
    "specs_of",
]

#: The two roles every model compares, and the classic run's arm names.
BASELINE = "baseline"
SPECULATIVE = "speculative"
ROLES = (BASELINE, SPECULATIVE)

#: The columns by_role (sql/macros.sql) adds to a staging model after run_id and arm.
STAGING_ADDED = ("arm_name", "source_run_id")

#: The build's table of analysis runs (``role_rows``).
ROLES_TABLE = "raw_arm_roles"
#: A row of ``ROLES_TABLE`` (``ROLES_COLUMNS``); the treatment arm is None for an arm that is only a reference.
RoleRow = tuple[str, str, str, str, str, str | None, str]
ROLES_COLUMNS = (
    "run_id varchar, arm varchar, analysis_run_id varchar, role varchar, "
    "reference_arm varchar, treatment_arm varchar, engine varchar"
)

#: The speculation each engine runs when an arm asks for "ngram" (prompt lookup): vLLM's ngram
#: proposer, llama.cpp's ngram-mod, as each adapter states it (``Engine.ngram``, ``specdec/engines``).
NGRAM: dict[str, dict[str, Any]] = {name: dict(e.ngram) for name, e in ENGINES.items()}


@dataclass(frozen=True)
class ArmSpec:
    """One arm: its name, its engine, its speculation (None: none) and, optionally,
    the arm it is measured against."""

    name: str
    engine: str = "vllm"
    speculation: Mapping[str, Any] | None = None
    reference: str | None = None


@dataclass(frozen=True)
class Comparison:
    treatment: str
    reference: str

    def analysis_run_id(self, run_id: str) -> str:
        return analysis_run_id(run_id, self.treatment)


def analysis_run_id(run_id: str, arm: str) -> str:
    return f"{run_id}/{arm}"


def parse_arm(text: str) -> ArmSpec:
    """``NAME=ENGINE[:SPEC]`` (the ``--arm`` option): SPEC is ``none`` (the default),
    ``ngram`` (prompt lookup: vLLM's ngram, llama.cpp's ngram-mod) or a JSON object
    of the engine's own speculation settings. ``NAME=ENGINE:SPEC@REFERENCE`` names
    the arm it is measured against."""
    name, eq, rest = text.partition("=")
    if not eq:
        raise ValueError(f"{text!r}: expected NAME=ENGINE[:SPEC] (e.g. vllm-ngram=vllm:ngram)")
    name = check_arm_name(name.strip())
    reference = None
    if "@" in rest and not rest.rstrip().endswith("}"):
        rest, _, reference = rest.rpartition("@")
        reference = check_arm_name(reference.strip())
    engine, _, spec = rest.partition(":")
    engine = engine.strip()
    if engine not in ENGINE_NAMES:
        raise ValueError(f"arm {name}: unknown engine {engine!r} (one of {', '.join(ENGINE_NAMES)})")
    spec = spec.strip()
    if spec in ("", "none", "null"):
        speculation = None
    elif spec == "ngram":
        speculation = dict(NGRAM[engine])
    else:
        try:
            speculation = json.loads(spec)
        except json.JSONDecodeError as exc:
            raise ValueError(f"arm {name}: speculation {spec!r} is not none, ngram or a JSON object ({exc})") from None
        if not isinstance(speculation, dict):
            raise ValueError(f"arm {name}: speculation must be a JSON object, none or ngram")
    return ArmSpec(name, engine, speculation, reference)


def reference_of(arm: ArmSpec, arms: Sequence[ArmSpec]) -> str | None:
    """The arm ``arm`` is measured against (module docstring), or None (no speculation, or
    no arm to measure against)."""
    if arm.reference is not None:
        return arm.reference
    if arm.speculation is None:
        return None
    plain = [a for a in arms if a.speculation is None and a.name != arm.name]
    same = [a for a in plain if a.engine == arm.engine]
    candidates = same or plain
    return candidates[0].name if candidates else None


def check_arms(arms: Sequence[ArmSpec]) -> list[ArmSpec]:
    """The arms, if they make sense together: at least one, unique names, references that
    exist and are not the arm itself; a ValueError naming the arm otherwise."""
    if not arms:
        raise ValueError("no arms: give at least one")
    names = [a.name for a in arms]
    for a in arms:
        check_arm_name(a.name)
        if names.count(a.name) > 1:
            raise ValueError(f"arm {a.name} is given twice")
        if a.reference is not None:
            if a.reference == a.name:
                raise ValueError(f"arm {a.name} cannot be measured against itself")
            if a.reference not in names:
                raise ValueError(
                    f"arm {a.name}: its reference {a.reference} is not one of the arms ({', '.join(names)})"
                )
    return list(arms)


def comparisons(arms: Sequence[ArmSpec]) -> list[Comparison]:
    """Each arm with a reference, against it, in the arms' order."""
    out = []
    for a in arms:
        ref = reference_of(a, arms)
        if ref is not None:
            out.append(Comparison(a.name, ref))
    return out


def classic(arms: Sequence[ArmSpec]) -> bool:
    """True for arms named by their roles (baseline, and speculative measured against it):
    the run's ids need no analysis runs."""
    names = [a.name for a in arms]
    if not set(names) <= set(ROLES):
        return False
    return all(c == Comparison(SPECULATIVE, BASELINE) for c in comparisons(arms))


def role_rows(run_id: str, arms: Sequence[ArmSpec]) -> list[RoleRow]:
    """The rows of ``ROLES_TABLE`` for one run: (run_id, arm, analysis_run_id, role,
    reference_arm, treatment_arm, engine); none for a classic run (its ids are kept)."""
    if classic(arms):
        return []
    engines = {a.name: a.engine for a in arms}
    rows: list[RoleRow] = []
    used: set[str] = set()
    for c in comparisons(arms):
        aid = c.analysis_run_id(run_id)
        rows.append((run_id, c.reference, aid, BASELINE, c.reference, c.treatment, engines[c.reference]))
        rows.append((run_id, c.treatment, aid, SPECULATIVE, c.reference, c.treatment, engines[c.treatment]))
        used |= {c.reference, c.treatment}
    for a in arms:
        if a.name not in used:
            rows.append((run_id, a.name, analysis_run_id(run_id, a.name), BASELINE, a.name, None, a.engine))
    return rows


def specs_of(manifest_arms: Iterable[Any], default_engine: str = "vllm") -> list[ArmSpec]:
    """The ArmSpecs of a manifest's ArmConfigs (an arm written before arms had an engine
    runs the manifest's engine)."""
    return [
        ArmSpec(
            a.name, getattr(a, "engine", None) or default_engine, a.speculative_config, getattr(a, "reference", None)
        )
        for a in manifest_arms
    ]


def comparison_manifest(manifest: Any, arm_names: Iterable[str | None]) -> Any:
    """A run's manifest as one comparison of it sees it. In a run of two engines
    (``manifest.engines``), when the named arms all run one engine: that engine's facts
    (``manifest.engine[<engine>]``), model, model_source and dtype in place of both
    engines'; the arms, their differences, ``engines`` and the rest unchanged. The
    manifest itself otherwise (one engine, a comparison across engines, an older
    manifest)."""
    per_engine = dict(manifest.engines or {})
    names = {n for n in arm_names if n}
    used = {a.engine for a in manifest.arms if a.name in names}
    if not per_engine or len(used) != 1:
        return manifest
    (engine,) = used
    own = per_engine.get(engine)
    if not isinstance(own, Mapping) or not {"model", "dtype"} <= set(own):
        return manifest
    update = {"model": own["model"], "dtype": own["dtype"], "model_source": dict(own.get("model_source") or {})}
    facts = (manifest.engine or {}).get(engine)
    if isinstance(facts, Mapping):
        update["engine"] = dict(facts)
    return manifest.model_copy(update=update)


def by_role_columns(fields: Sequence[str]) -> list[str]:
    """The columns of a staging model over a record with run_id and arm (by_role): the
    record's fields, with ``STAGING_ADDED`` after arm."""
    i = list(fields).index("arm") + 1
    return [*fields[:i], *STAGING_ADDED, *fields[i:]]


def create_roles_table(con: Any, rows: Sequence[RoleRow] = ()) -> None:  # con: a DuckDB connection
    """``ROLES_TABLE`` in a DuckDB connection, with ``rows`` (``role_rows``)."""
    con.execute(f"create table {ROLES_TABLE} ({ROLES_COLUMNS})")
    if rows:
        con.executemany(f"insert into {ROLES_TABLE} values (?, ?, ?, ?, ?, ?, ?)", list(rows))
