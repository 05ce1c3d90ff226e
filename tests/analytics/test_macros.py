"""The macros of sql/macros.sql: the acceptance formulas with hand-checkable numbers, the
models use them instead of writing the formulas out again, and the data dictionary
documents each macro once."""

from __future__ import annotations

import re

import duckdb
import pytest

from specdec.analytics.docs import render, sql_header
from specdec.analytics.sql_models import discover, macros_sql
from specdec.arms import create_roles_table

#: name(arguments) of every macro sql/macros.sql creates.
SIGNATURES = re.findall(r"^create or replace macro (\w+\([^)]*\))", macros_sql(), flags=re.MULTILINE)
ACCEPTANCE = ("mean_acceptance_length", "acceptance_rate", "tokens_per_round")


@pytest.fixture
def con():
    con = duckdb.connect()
    create_roles_table(con)  # by_role reads it
    con.execute(macros_sql())
    yield con
    con.close()


def one(con, sql: str):
    return con.execute(sql).fetchone()[0]


def test_the_acceptance_macros_are_defined():
    assert {s.split("(")[0] for s in SIGNATURES} >= set(ACCEPTANCE)


@pytest.mark.parametrize(
    "sql, expected",
    [
        # 6 accepted over 3 verify rounds: 2 per round, plus the bonus token
        ("mean_acceptance_length(6, 3)", 3.0),
        ("mean_acceptance_length(0, 4)", 1.0),  # nothing accepted: the bonus token only
        ("mean_acceptance_length(2, 3)", 1 + 2 / 3),  # as the marts computed it inline
        ("mean_acceptance_length(0, 0)", None),  # no verify round: not applicable, not 1 or inf
        ("acceptance_rate(1, 8)", 0.125),
        ("acceptance_rate(0, 8)", 0.0),  # zero is zero
        ("acceptance_rate(0, 0)", None),
        ("acceptance_rate(6 + 3, 12 + 3)", 0.6),  # AIPerf's accepted per verified: bonus counted
        ("tokens_per_round(9, 3)", 3.0),
        ("tokens_per_round(9, 0)", None),
    ],
)
def test_acceptance_macro_values(con, sql, expected):
    assert one(con, f"select {sql}") == expected


def test_macros_take_aggregates_as_arguments(con):
    """The marts pass sums over their group (filtered ones too): pooled, not averaged."""
    got = con.execute("""
        select g, mean_acceptance_length(sum(a * n), sum(n) filter (where k > 0)) as length,
               acceptance_rate(sum(a * n), sum(k * n)) as rate
        from (values ('x', 4, 4, 1), ('x', 4, 0, 2), ('x', 0, 0, 5), ('y', 0, 0, 1)) t(g, k, a, n)
        group by g order by g""").fetchall()
    # x: 4 accepted over 3 verify rounds (1 + 2, the k = 0 row is no round), 12 proposed
    assert got == [("x", 1 + 4 / 3, 4 / 12), ("y", None, None)]


def _body(sql: str) -> str:
    return re.sub(r"--[^\n]*", "", sql)


def test_models_do_not_write_the_acceptance_formulas_out_again():
    """One place per fact: a model calls the macro instead of 1 + accepted / rounds."""
    inline_length = re.compile(r"\b1\s*\+\s*(sum\()?[\w.]*accepted", re.IGNORECASE)
    inline_rate = re.compile(
        r"accepted[\w.]*( \* \w+)?\)?\s*/\s*(nullif\()?(sum\()?[\w.]*(proposed|draft)", re.IGNORECASE
    )
    for m in discover():
        body = _body(m.sql)
        assert not inline_length.search(body), m.name
        assert not inline_rate.search(body), m.name
    users = {m.name for m in discover() if any(f"{name}(" in _body(m.sql) for name in ACCEPTANCE)}
    assert users >= {
        "acceptance",
        "acceptance_by_context",
        "acceptance_by_turn",
        "acceptance_definitions",
        "acceptance_natural_end",
        "acceptance_requests",
        "capture_acceptance",
    }


def test_the_data_dictionary_documents_each_macro_once():
    text = render()
    assert text.count("## SQL macros (`sql/macros.sql`)") == 1
    header = sql_header(macros_sql())
    assert text.count(header) == 1
    for signature in SIGNATURES:
        assert signature in header, signature  # documented in the header the dictionary shows
        # and defined there only: a model's header may cite it, never open a line with it
        definitions = re.findall(rf"^ *{re.escape(signature)}", text, flags=re.MULTILINE)
        assert len(definitions) == 1, signature


def test_role_keys_are_the_columns_by_role_puts_first(con):
    """role_keys() is by_role's own first columns, and the names specdec/arms.py adds to a record's
    fields (STAGING_ADDED) after run_id and arm."""
    from specdec.arms import STAGING_ADDED

    keys = one(con, "select role_keys()")
    assert keys == ["run_id", "arm", *STAGING_ADDED]
    con.execute("create table raw_t as select 'r' as run_id, 'a' as arm, 1 as level")
    assert [d[0] for d in con.execute("select * from by_role('raw_t')").description][: len(keys)] == keys
    # a staging model over by_role takes its columns as by_role gives them (select *), or picks
    # them after columns(role_keys()): none writes the four keys out
    users = [m for m in discover() if "by_role('raw_" in m.sql]
    assert len(users) >= 7
    for m in users:
        body = _body(m.sql)
        assert "columns(role_keys())" in body or "select * " in body, m.name
        assert "arm_name," not in body, m.name


def test_paired_rows_pairs_each_baseline_row_with_its_two_treatments(con):
    """'ab': the speculative row of the same repeat and key; 'aa': the baseline's own row of
    the next repeat and key. A row with no partner, another key, another run or an arm outside
    the two roles pairs with nothing."""
    con.execute(
        """create table t as select * from (values
            ('r1', 'baseline',    0, 'p', 10.0), ('r1', 'speculative', 0, 'p', 5.0),
            ('r1', 'baseline',    1, 'p', 11.0), ('r1', 'speculative', 1, 'p', 6.0),
            ('r1', 'baseline',    2, 'q', 12.0),
            ('r1', 'speculative', 2, 'p', 7.0),
            ('r1', 'other',       0, 'p', 1.0),
            ('r2', 'speculative', 0, 'p', 2.0)
        ) t(run_id, arm, repeat, pair_key, e)"""
    )
    rows = con.execute(
        "select reference.run_id, comparison, reference.repeat, treatment.repeat, reference.e, treatment.e "
        "from paired_rows('t') order by all"
    ).fetchall()
    assert rows == [
        ("r1", "aa", 0, 1, 10.0, 11.0),
        ("r1", "ab", 0, 0, 10.0, 5.0),
        ("r1", "ab", 1, 1, 11.0, 6.0),
    ]
