#!/usr/bin/env bash
# `make test`'s body (issue 40): the parts in order, each one timed, and at the end the wall
# time of each part and the tests' counts over both pytest runs, printed also when a part fails
# (the run stops at the first failing part, as make would). Called by the Makefile as
#   tools/make_test.sh MAKE PYTHON
# MAKE runs the set-up and check targets; PYTHON is the venv's interpreter.
set -uo pipefail

MAKE_CMD=${1:?usage: tools/make_test.sh MAKE PYTHON}
PY=${2:?usage: tools/make_test.sh MAKE PYTHON}

logs=$(mktemp -d "${TMPDIR:-/tmp}/specdec-make-test.XXXXXX")
trap 'rm -rf "$logs"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

names=()
seconds=()
start=$(date +%s.%N)
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }  # seconds since $1

summary() {
    local rc=$1 i passed=0 failed=0 skipped=0 errors=0 n f
    echo
    echo "make test: wall time of each part"
    for i in "${!names[@]}"; do
        printf '  %-34s %8s s\n' "${names[$i]}" "${seconds[$i]}"
    done
    printf '  %-34s %8s s\n' "total" "$(since "$start")"
    # the counts of both pytest runs, from their closing lines
    for f in "$logs"/*.log; do
        [ -e "$f" ] || continue
        n=$(tail -n 1 "$f")
        passed=$((passed + $(grep -oE '[0-9]+ passed' <<<"$n" | grep -oE '[0-9]+' || echo 0)))
        failed=$((failed + $(grep -oE '[0-9]+ failed' <<<"$n" | grep -oE '[0-9]+' || echo 0)))
        skipped=$((skipped + $(grep -oE '[0-9]+ skipped' <<<"$n" | grep -oE '[0-9]+' || echo 0)))
        errors=$((errors + $(grep -oE '[0-9]+ errors?' <<<"$n" | grep -oE '[0-9]+' || echo 0)))
    done
    [ "$rc" = 0 ] || echo "make test: stopped: a part failed (exit $rc)"
    if [ $((passed + failed + skipped + errors)) -gt 0 ]; then
        echo "tests: $passed passed, $((failed + errors)) failed, $skipped skipped"
    fi
}

part() {  # part NAME LOG|- COMMAND...: run one part, timed; LOG keeps its output for the counts
    local name=$1 log=$2 t0 rc
    shift 2
    echo "== make test: $name"
    t0=$(date +%s.%N)
    if [ "$log" = - ]; then
        "$@"
    else
        # the closing line is read for the counts; the output still streams as it comes
        "$@" 2>&1 | tee "$logs/$log.log"
    fi
    rc=$?
    names+=("$name")
    seconds+=("$(since "$t0")")
    if [ "$rc" != 0 ]; then
        summary "$rc"
        exit "$rc"
    fi
}

part "set-up (venv, model, llama-server)" - "$MAKE_CMD" --no-print-directory install model browser llama-server
part "lint, types, imports" - "$MAKE_CMD" --no-print-directory lint types imports
# The tests that start no engine run on two workers (pytest-xdist): they are CPU-bound and
# independent (temporary folders, free ports). The engine tests run after them, one at a time:
# they share one pair of vLLM servers per session and each vLLM takes both cores.
# --durations prints the slowest tests of each part (the figures of BENCHMARKS.md's test-suite table).
part "tests without engine (2 workers)" no-engine "$PY" -m pytest -m "not engine" -n 2 --durations=15
part "engine tests (one at a time)" engine "$PY" -m pytest -m engine --durations=40
summary 0
