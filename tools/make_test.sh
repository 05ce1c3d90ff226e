#!/usr/bin/env bash
# `make test`'s body (issue 40): every part timed, and at the end the wall time of each part and
# the tests' counts over both pytest runs, printed also when a part fails.
#
# The set-up goes first (nothing runs without it). Then two lines of work at once:
# - in the foreground, the engine tests, one at a time (the vLLM ones share one pair of vLLM servers
#   per session); a vLLM CPU worker computes on one core while its API server, the test's client and
#   the analytics take turns on the other, which is idle much of the time; llama-server computes on
#   one thread in the tests (tests/conftest.py says why);
# - beside them, at nice 10 (they take the idle time and give way when the engine tests need
#   the CPU): lint, types and the import contract at once, then the tests that start no engine on
#   three xdist workers (independent: temporary folders, free ports). Three, not two:
#   they wait on fake servers, subprocesses and timeouts part of the time, so two workers leave a
#   core idle (2026-12-07, alone on this 2-core host: 512 s on 2 workers at 1.54 cores busy, 421 s
#   on 3 at 1.88). Each file's tests go to one worker (--dist loadfile): a module's fixtures are
#   set up once and a heavy import (vLLM's scheduler and runner: 11-13 CPU s a process) happens in
#   fewer workers (2026-12-07, alone: 601 CPU s and 334 s wall, against 645 and 349 s with the
#   tests dealt one by one).
#   The checks are one process. Their output is kept and printed when the engine tests end, not
#   interleaved with theirs.
# --durations prints the slowest tests of each run (the figures of BENCHMARKS.md's test-suite table).
#
# Called by the Makefile as `tools/make_test.sh MAKE PYTHON` (MAKE runs the set-up and check
# targets; PYTHON is the venv's interpreter).
set -uo pipefail

MAKE_CMD=${1:?usage: tools/make_test.sh MAKE PYTHON}
PY=${2:?usage: tools/make_test.sh MAKE PYTHON}

logs=$(mktemp -d "${TMPDIR:-/tmp}/specdec-make-test.XXXXXX")
bg=
fg=

# pytest with SIGINT and SIGTERM raising KeyboardInterrupt, so that it runs its teardown (the
# engine tests' servers stop) when the run ends early: a job started with & ignores SIGINT otherwise.
# Called only as a process of its own (a job, or `bash -c`): it replaces that process.
pytest_() {
    exec "$PY" -c 'import signal, sys, pytest
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.signal(signal.SIGTERM, signal.default_int_handler)
sys.exit(pytest.main(sys.argv[1:]))' "$@"
}

span() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }  # seconds from $1 to $2

# One part of the background line: NAME's output to $logs/NAME.log, its wall seconds and exit
# status beside it.
bg_part() {
    local name=$1 t0
    shift
    t0=$(date +%s.%N)
    ("$@") >"$logs/$name.log" 2>&1
    echo $? >"$logs/$name.rc"
    span "$t0" "$(date +%s.%N)" >"$logs/$name.s"
}
export -f pytest_ bg_part span
#: xdist workers of the tests without engine (the header says why three)
WORKERS=3
export PY MAKE_CMD logs WORKERS

# Both lines are stopped with this script (a failure, Ctrl-C, SIGTERM): each gets SIGINT and up
# to 60 s for its teardown, then SIGTERM (the background line: its whole process group).
stop_tests() {
    local i
    [ -n "$fg" ] && kill -INT "$fg" 2>/dev/null
    [ -n "$bg" ] && kill -INT -- "-$bg" 2>/dev/null
    for i in $(seq 60); do
        { [ -n "$fg" ] && kill -0 "$fg" 2>/dev/null; } || { [ -n "$bg" ] && kill -0 "$bg" 2>/dev/null; } || break
        sleep 1
    done
    [ -n "$fg" ] && kill -TERM "$fg" 2>/dev/null
    [ -n "$bg" ] && kill -TERM -- "-$bg" 2>/dev/null
    wait 2>/dev/null
}
trap 'stop_tests; rm -rf "$logs"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

start=$(date +%s.%N)
names=()
seconds=()
record() { names+=("$1"); seconds+=("$2"); }  # a part's title and its wall seconds, for the summary
# the count of WORD ("passed", "failed", ...) in a pytest closing line; 0 when it names none
count() { grep -oE "[0-9]+ $1" <<<"$2" | grep -oE '[0-9]+' || echo 0; }

summary() {
    local rc=$1 i passed=0 failed=0 skipped=0 errors=0 n f
    echo
    echo "make test: wall time of each part"
    for i in "${!names[@]}"; do
        printf '  %-46s %8s s\n' "${names[$i]}" "${seconds[$i]}"
    done
    printf '  %-46s %8s s\n' "total" "$(span "$start" "$(date +%s.%N)")"
    # the counts of both pytest runs, from their closing lines
    for f in "$logs/no-engine.log" "$logs/engine.log"; do
        [ -e "$f" ] || continue
        n=$(tail -n 1 "$f")
        passed=$((passed + $(count passed "$n")))
        failed=$((failed + $(count failed "$n")))
        skipped=$((skipped + $(count skipped "$n")))
        errors=$((errors + $(count 'errors?' "$n")))
    done
    [ "$rc" = 0 ] || echo "make test: failed (exit $rc): see the part above"
    if [ $((passed + failed + skipped + errors)) -gt 0 ]; then
        echo "tests: $passed passed, $((failed + errors)) failed, $skipped skipped"
    fi
}

# 1. set-up, in the foreground: the run stops here if it fails
echo "== make test: set-up (venv, model, browser, llama-server)"
t0=$(date +%s.%N)
"$MAKE_CMD" --no-print-directory install model browser llama-server
rc=$?
record "set-up (venv, model, browser, llama-server)" "$(span "$t0" "$(date +%s.%N)")"
if [ "$rc" != 0 ]; then
    summary "$rc"
    exit "$rc"
fi

# 2. the engine tests in the foreground, started as a job and waited for, so that a SIGTERM to
# this script is handled at once (bash runs a trap only between commands; `wait` is interruptible)
echo "== make test: engine tests (one at a time)"
t0=$(date +%s.%N)
pytest_ -m engine --durations=40 > >(tee "$logs/engine.log") 2>&1 &
fg=$!

# 3. the background line (its own process group, so that it can be stopped whole)
echo "== make test: beside the engine tests, at nice 10: lint, types, imports, then the tests without engine (output when the engine tests end)"
setsid nice -n 10 bash -c '
bg_part checks "$MAKE_CMD" --no-print-directory lint types imports
bg_part no-engine bash -c "pytest_ -m \"not engine\" -n $WORKERS --dist loadfile --durations=15"' &
bg=$!
wait "$fg"
engine_rc=$?
fg=
engine_s=$(span "$t0" "$(date +%s.%N)")

sleep 1  # the engine output's tee (a process substitution) finishes its last write
wait "$bg"
bg=
rc=0
for part in "checks:lint, types, imports (beside)" "no-engine:tests without engine, $WORKERS workers (beside)"; do
    name=${part%%:*} title=${part#*:}
    echo "== make test: $title: its output"
    cat "$logs/$name.log" 2>/dev/null
    record "$title" "$(cat "$logs/$name.s" 2>/dev/null || echo -)"
    part_rc=$(cat "$logs/$name.rc" 2>/dev/null || echo 1)
    [ "$part_rc" = 0 ] || rc=$part_rc
done
record "engine tests, one at a time" "$engine_s"
[ "$engine_rc" = 0 ] || rc=$engine_rc
summary "$rc"
exit "$rc"
