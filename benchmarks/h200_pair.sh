#!/usr/bin/env bash
# The distributed pair on one NVIDIA H200 (benchmarks/REPORT.md, "The distributed pair on an H200"): a b030961
# worker (layers 22:output) and coordinator (0:21), two roots on one host, each converged by the tool through its
# CLI (both at once, as an operator who does not wait would); a completion through the coordinator; bench through
# it; the worker killed; a change converged on both and then rolled back on both.
# Run from the repository root on the lent machine, with .gpu/ (the b030961 tarball) and .whl/ (the ds4_converge
# wheel and the runtime libraries the machine's Python lacks) carried:
#   setsid nohup bash benchmarks/h200_pair.sh > /tmp/p/run.log 2>&1 &     (then poll /tmp/p/res/DONE)
set -u
export PYTHONUNBUFFERED=1 NO_COLOR=1
R=$PWD; W=/tmp/p; mkdir -p $W/res; cd $W
say() { echo "[$(date +%T)] $*"; }
step() { local name=$1; shift; local t=$(date +%s%N); "$@" > $W/res/$name.out 2> $W/res/$name.err; local rc=$?
  echo "{\"step\": \"$name\", \"rc\": $rc, \"ms\": $(( ($(date +%s%N) - t) / 1000000 ))}" >> $W/res/steps.jsonl
  say "$name rc=$rc"; return $rc; }
chat() {  # one completion through the coordinator: status, time, body
  curl -s -m 120 -o $W/res/chat-$1.json -w "%{http_code} %{time_total}s\n" http://127.0.0.1:8000/v1/chat/completions \
    -H 'content-type: application/json' -d '{"model":"deepseek-v4-flash","max_tokens":4,"temperature":0,
    "stream":false,"thinking":{"type":"disabled"},"messages":[{"role":"user","content":"Hi"}]}'
  echo "$1: $(cat $W/res/chat-$1.out 2>/dev/null)$(head -c 400 $W/res/chat-$1.json)" >> $W/res/chats.txt; }
probe_port() {  # does the worker's data port accept? (what status judges), and who listens
  python3 - "$1" >> $W/res/dataport.txt 2>&1 <<'PY'
import socket, sys, time
for i in range(5):
    try:
        socket.create_connection(("127.0.0.1", 9001), timeout=2).close(); r = "accepts"
    except OSError as e:
        r = f"{type(e).__name__}: {e}"
    print(sys.argv[1], i, r); time.sleep(0.2)
PY
  (ss -ltnp 2>/dev/null || netstat -ltnp 2>/dev/null) | grep -E ':(8000|8001|9000|9001) ' >> $W/res/dataport.txt; }

say start; nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader > $W/res/gpu.txt
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir $R/.whl/*.whl > $W/res/pip.log 2>&1 \
  || { say pip failed; cat $W/res/pip.log; exit 1; }
mkdir -p $W/src && tar xzf $R/.gpu/antirez-ds4-b030961.tar.gz -C $W/src
git init -q -b main $W/ds4 && cd $W/ds4 && git config user.email x@invalid && git config user.name x \
  && cp -a $W/src/ds4-b030961/. . && git add -A && git commit -qm b030961 && git tag b030961; cd $W
COMMIT=$(git -C $W/ds4 rev-parse HEAD)
step phantom python3 $R/engine/models/make_phantom_gguf.py $W/phantom
for part in worker coordinator; do
  if [ $part = worker ]; then port=8001; d='{role: worker, layers: "22:output", listen: {host: 127.0.0.1, port: 9001}, coordinator: {host: 127.0.0.1, port: 9000}, stop_grace_s: 10}'; smoke=""
  else port=8000; d='{role: coordinator, layers: "0:21", listen: {host: 127.0.0.1, port: 9000}}'; smoke=', smoke: {prompt: "Hi", expect: "phantom", max_tokens: 4}'; fi
  cat > $W/$part.yaml <<YAML
engine: {repo: $W/ds4, ref: b030961, commit: $COMMIT, target: cuda, cuda_arch: sm_90, jobs: 8}
model: {main: $W/phantom/phantom-ds4flash.gguf, memory_budget: warn}
server: {name: ds4-$part, host: 127.0.0.1, port: $port, ctx: 8192, stop_wait_s: 60, drain_s: 30}
health: {deadline_s: 560, soak_s: 3, interval_s: 0.5$smoke}
distributed: $d
paths: {root: $W/root-$part}
YAML
done
# both at once: the worker's build and the coordinator's build run side by side; the coordinator's probe must
# wait for the worker (its route) instead of failing
step converge_worker ds4-converge $W/worker.yaml --json & wpid=$!
step converge_coordinator ds4-converge $W/coordinator.yaml --json & cpid=$!
( for i in $(seq 1 120); do sleep 5; c=$(curl -s -m 3 -o /dev/null -w '%{http_code}' http://127.0.0.1:8000/v1/chat/completions -H 'content-type: application/json' -d '{"model":"deepseek-v4-flash","max_tokens":1,"stream":false,"thinking":{"type":"disabled"},"messages":[{"role":"user","content":"Hi"}]}'); echo "$(date +%T) $c" >> $W/res/early.txt; [ "$c" = 200 ] && break; done ) & epid=$!
wait $wpid; wait $cpid; kill $epid 2>/dev/null
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader > $W/res/gpu-serving.txt 2>&1
chat first; chat second; chat third
probe_port connected
step status_worker ds4-converge status $W/worker.yaml --json
step status_coordinator ds4-converge status $W/coordinator.yaml --json
[ -n "${SKIP_BENCH:-}" ] || step bench ds4-converge bench $W/coordinator.yaml --json --reps 1 --gen-tokens 16 --prompt-tokens 64,512
# the worker killed (SIGKILL, as the OOM killer would): what the coordinator answers and what the tool says
WPID=$(python3 -c "import json;print(json.load(open('$W/res/status_worker.out'))['pid'])")
kill -9 $WPID; sleep 1; chat after-kill
step status_worker_killed ds4-converge status $W/worker.yaml --json
step status_coordinator_killed ds4-converge status $W/coordinator.yaml --json
for i in $(seq 1 60); do sleep 1; ds4-converge status $W/worker.yaml --json > $W/res/status_worker_back.out 2>&1 \
  && grep -q '"connected": true' $W/res/status_worker_back.out && break; done; echo "worker back after ~${i}s" >> $W/res/chats.txt
chat after-restart; probe_port after-restart
# a late worker: the coordinator restarts (a ctx change) while its worker is stopped; the worker comes 20 s later
# with the same change. The coordinator's probe must wait for its route, not fail on the engine's HTTP 500.
step stop_worker_before_late ds4-converge stop $W/worker.yaml
step late_coordinator ds4-converge $W/coordinator.yaml --json --set server.ctx=16384 & lpid=$!
sleep 20; chat while-worker-late
step late_worker ds4-converge $W/worker.yaml --json --set server.ctx=16384
wait $lpid; chat after-late
# back together: the coordinator first (its ctx falls back below the worker's, which the coordinator accepts),
# then the worker
step rollback_coordinator ds4-converge rollback $W/coordinator.yaml --json
step rollback_worker ds4-converge rollback $W/worker.yaml --json
chat after-rollback
step status_end_worker ds4-converge status $W/worker.yaml --json
step status_end_coordinator ds4-converge status $W/coordinator.yaml --json
for part in worker coordinator; do ds4-converge logs $W/$part.yaml -n 300 > $W/res/log-$part.txt 2>&1; done
ls $W/root-coordinator/logs > $W/res/logs-ls.txt 2>&1
step stop_coordinator ds4-converge stop $W/coordinator.yaml
step stop_worker ds4-converge stop $W/worker.yaml
say done; touch $W/res/DONE
