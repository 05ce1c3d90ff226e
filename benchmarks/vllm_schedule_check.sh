#!/bin/bash
# Does the installed vLLM honour num_speculative_tokens_per_batch_size (the schedule that
# `specdec plan` exports)? One server, ngram k=4 with the schedule [[1,1,4],[2,32,1]]:
# a request alone must draft up to 4 tokens per draft, four requests at once exactly 1.
# Reads vLLM's own counters (vllm:spec_decode_num_drafts_total, ..._num_draft_tokens_total)
# before and after each phase. About 1-2 minutes on 2 CPU cores. Usage (repository root):
#   bash benchmarks/vllm_schedule_check.sh
set -euo pipefail
PY=${PY:-.venv/bin/python}
MODEL=$($PY -c 'from specdec.model import prepare_model; print(prepare_model().path)')
PORT=$($PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
LOG=$(mktemp /tmp/vllm-schedule-XXXX.log)
SPEC='{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":4,"prompt_lookup_min":2,"num_speculative_tokens_per_batch_size":[[1,1,4],[2,32,1]]}'
VLLM_CPU_KVCACHE_SPACE=1 $PY -m vllm.entrypoints.openai.api_server --model "$MODEL" --served-model-name t \
  --dtype float32 --max-model-len 2048 --max-num-seqs 8 --seed 0 --enforce-eager --host 127.0.0.1 --port "$PORT" \
  --speculative-config "$SPEC" > "$LOG" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do curl -sf "127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.5; done
curl -sf "127.0.0.1:$PORT/health" >/dev/null || { echo "server did not start; log: $LOG"; exit 1; }
scrape() { curl -s "127.0.0.1:$PORT/metrics" | grep -E '^vllm:spec_decode_num_(drafts|draft_tokens)_total' | awk '{print $NF}' | paste -sd' '; }
BODY='{"model":"t","max_tokens":96,"temperature":0,"messages":[{"role":"user","content":"Repeat this list exactly three times: alpha, beta, gamma, delta, epsilon, zeta, eta, theta."}]}'
send() { curl -s "127.0.0.1:$PORT/v1/chat/completions" -H 'content-type: application/json' -d "$BODY" > /dev/null; }
read -r d0 t0 <<< "$(scrape)"
send
read -r d1 t1 <<< "$(scrape)"
pids=""; for _ in 1 2 3 4; do send & pids="$pids $!"; done; wait $pids
read -r d2 t2 <<< "$(scrape)"
$PY - "$d0" "$t0" "$d1" "$t1" "$d2" "$t2" <<'PYEOF'
import sys
d0, t0, d1, t1, d2, t2 = map(float, sys.argv[1:])
alone, together = (t1 - t0) / (d1 - d0), (t2 - t1) / (d2 - d1)
print(f"alone: {d1 - d0:.0f} drafts, {t1 - t0:.0f} draft tokens, {alone:.2f} per draft (schedule: up to 4)")
print(f"4 at once: {d2 - d1:.0f} drafts, {t2 - t1:.0f} draft tokens, {together:.2f} per draft (schedule: 1)")
ok = 1 < alone <= 4 and together == 1
print("honoured" if ok else "NOT honoured")
sys.exit(0 if ok else 1)
PYEOF
