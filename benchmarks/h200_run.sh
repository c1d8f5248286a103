#!/usr/bin/env bash
# The real engine on an H200 (benchmarks/REPORT.md, "The real engine on an NVIDIA H200"): install the tool from
# wheels, build 8d57664 and b030961 `target: cuda`, `cuda_arch: sm_90` through it, serve a phantom model from GPU
# memory, bench, and time an upgrade's and a restart's serving gap against the new engine's load measured alone.
# Run from the repository root on the lent machine with .gpu/ (this script, h200_gap.py, both engine tarballs,
# the ds4_converge wheel, copies of engine/models and engine/knowledge) and .whl/ (pydantic, pydantic-core,
# annotated-types, typing-inspection, supervisor, tenacity, ruamel.yaml, gguf, typing-extensions) carried:
#   setsid nohup env FIRST=8d57664 bash .gpu/h200_run.sh $PWD/.gpu > /tmp/w/run.log 2>&1 &   (then poll /tmp/w/res/DONE)
set -u
export PYTHONUNBUFFERED=1
G=$1; W=/tmp/w; mkdir -p $W/res
say() { echo "[$(date +%T)] $*"; }
step() { local name=$1; shift; local t=$(date +%s%N); "$@" > $W/res/$name.out 2> $W/res/$name.err; local rc=$?
  echo "{\"step\": \"$name\", \"rc\": $rc, \"ms\": $(( ($(date +%s%N) - t) / 1000000 ))}" >> $W/res/steps.jsonl; say "$name rc=$rc"; return $rc; }
say start; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > $W/res/gpu.txt
command -v ds4-converge >/dev/null || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir $G/../.whl/*.whl $G/ds4_converge-*.whl > $W/res/pip.log 2>&1 || { say pip failed; exit 1; }
if [ ! -d $W/ds4 ]; then mkdir -p $W/src; for v in 8d57664 b030961; do tar xzf $G/antirez-ds4-$v.tar.gz -C $W/src; done
git init -q -b main $W/ds4 && cd $W/ds4 && git config user.email x@invalid && git config user.name x
cp -a $W/src/ds4-8d57664/. . && git add -A && git commit -qm 8d57664 && git tag 8d57664
git rm -rqf . && cp -a $W/src/ds4-b030961/. . && git add -A && git commit -qm b030961 && git tag b030961; fi; cd $W
[ -f $W/phantom/phantom-ds4flash.gguf ] || step phantom python3 $G/models/make_phantom_gguf.py $W/phantom; ls -ls $W/phantom >> $W/res/phantom.out
cat > $W/spec.yaml <<YAML
engine: {repo: $W/ds4, ref: "$FIRST", target: cuda, cuda_arch: sm_90, jobs: 16}
model: {main: $W/phantom/phantom-ds4flash.gguf, memory_budget: warn}
server: {host: 127.0.0.1, port: 8000, ctx: 8192, stop_wait_s: 60, drain_s: 60, kv_disk_dir: $W/kv}
health: {deadline_s: 580, soak_s: 3, interval_s: 0.2, smoke: {prompt: "Hi", expect: "phantom", max_tokens: 4}}
paths: {root: $W/root}
YAML
step facts ds4-converge facts $W/spec.yaml --json
step install ds4-converge $W/spec.yaml --json || { say install failed; ds4-converge logs $W/spec.yaml > $W/res/logs.txt 2>&1; }
step bench_first ds4-converge bench $W/spec.yaml --json --reps 3 --gen-tokens 64 --prompt-tokens 512,5500
if [ "$FIRST" != b030961 ]; then
  rm -f $W/stop; (python3 $G/h200_gap.py client $W/res/gap_upgrade.jsonl $W/stop &) ; sleep 3
  step upgrade ds4-converge $W/spec.yaml --json --set engine.ref=b030961 || ds4-converge logs $W/spec.yaml > $W/res/logs2.txt 2>&1
  sleep 3; touch $W/stop; sleep 2; python3 $G/h200_gap.py gap $W/res/gap_upgrade.jsonl > $W/res/gap_upgrade.json
  step bench_b030961 ds4-converge bench $W/spec.yaml --set engine.ref=b030961 --json --reps 3 --gen-tokens 64 --prompt-tokens 512,5500
  SET="--set engine.ref=b030961"
fi
rm -f $W/stop; (python3 $G/h200_gap.py client $W/res/gap_restart.jsonl $W/stop &); sleep 3
step restart ds4-converge $W/spec.yaml --json ${SET:-} --set server.ctx=16384
sleep 3; touch $W/stop; sleep 2; python3 $G/h200_gap.py gap $W/res/gap_restart.jsonl > $W/res/gap_restart.json
step status ds4-converge status $W/spec.yaml --json ${SET:-} --set server.ctx=16384
cp $W/root/supervisor/programs/*.conf $W/res/ 2>/dev/null
step stop ds4-converge stop $W/spec.yaml ${SET:-} --set server.ctx=16384
step load_alone python3 $G/h200_gap.py load $(ls $W/root/supervisor/programs/*.conf | head -1)
say done; touch $W/res/DONE
