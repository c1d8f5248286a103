#!/usr/bin/env bash
# The watchdog on a GPU (issue 35 item 7; benchmarks/REPORT.md, "The watchdog on an NVIDIA H200"): b030961
# `target: cuda`, `cuda_arch: sm_90` serving the phantom at ctx 65536 behind the front door, the default watchdog
# with `completion_every_s: 20`. One ~30K-token prompt, then two at once: every request must complete and the
# watchdog record no incident (busy is not hung). Then the engine SIGSTOPped twice in a row, the second right
# after the first restart answered: both must be restarted (never blind after a restart). Prints the numbers.
#
# On the lent machine, from the repository root, with .whl/ carried (the ds4_converge wheel and the runtime
# libraries the machine's Python lacks; the engine tarball and the phantom's generator are in the repository):
#   setsid nohup bash benchmarks/h200_watchdog.sh > /tmp/wd/run.log 2>&1 &      (then poll /tmp/wd/res/DONE)
# A dry run on a CPU (the tool from this checkout's .venv, `make cpu`, a small ctx and short prompts, a faster
# watchdog so that the hangs are seen in seconds):
#   TARGET=cpu CTX=1024 TOKENS=40 MAX_TOKENS=2 WATCHDOG='{interval_s: 2, failures: 2, completion_every_s: 5}' W=/tmp/wd-dry \
#     bash benchmarks/h200_watchdog.sh
# Environment: TARGET (cuda), CTX (65536), TOKENS (of each long prompt, 30000: sized by words after one
# request measured the phantom's tokens per word, about five with its byte-level vocabulary), WATCHDOG (the spec's health.watchdog), FRONT (1: behind the front door,
# when HAProxy is installed), MAX_TOKENS (of each answer, 8), ONLY_HANGS (1: skip the requests), HANG_S (how long a hang may wait for its restart, 300), PORT, FPORT, MPORT (8000,
# 8080, 8405), W (the work folder).
set -u
export PYTHONUNBUFFERED=1 NO_COLOR=1
R=$PWD; W=${W:-/tmp/wd}; TARGET=${TARGET:-cuda}; CTX=${CTX:-65536}; TOKENS=${TOKENS:-30000}
WATCHDOG=${WATCHDOG:-'{completion_every_s: 20}'}; FRONT=${FRONT:-1}; HANG_S=${HANG_S:-300}
PORT=${PORT:-8000}; FPORT=${FPORT:-8080}; MPORT=${MPORT:-8405}  # the engine's slots (PORT, PORT+1), front, metrics
mkdir -p $W/res; cd $W
say() { echo "[$(date +%T)] $*"; }
step() { local name=$1; shift; local t=$(date +%s%N); "$@" > $W/res/$name.out 2> $W/res/$name.err; local rc=$?
  echo "{\"step\": \"$name\", \"rc\": $rc, \"ms\": $(( ($(date +%s%N) - t) / 1000000 ))}" >> $W/res/steps.jsonl
  say "$name rc=$rc"; return $rc; }

say start; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > $W/res/gpu.txt 2>&1
if ! command -v ds4-converge >/dev/null; then
  if [ -x $R/.venv/bin/ds4-converge ]; then export PATH=$R/.venv/bin:$PATH
  else python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir $R/.whl/*.whl > $W/res/pip.log 2>&1 \
    || { say pip failed; cat $W/res/pip.log; exit 1; }; fi
fi
PY=$(head -1 "$(command -v ds4-converge)" | sed 's/^#!//'); [ -x "$PY" ] || PY=python3
if [ ! -d $W/ds4 ]; then
  mkdir -p $W/src && tar xzf $R/engine/upstream/antirez-ds4-b030961.tar.gz -C $W/src
  git init -q -b main $W/ds4 && git -C $W/ds4 config user.email x@invalid && git -C $W/ds4 config user.name x \
    && cp -a $W/src/ds4-b030961/. $W/ds4/ && git -C $W/ds4 add -A && git -C $W/ds4 commit -qm b030961 \
    && git -C $W/ds4 tag b030961
fi
[ -f $W/phantom/phantom-ds4flash.gguf ] || step phantom $PY $R/engine/models/make_phantom_gguf.py $W/phantom
ARCH=""; [ "$TARGET" = cuda ] && ARCH=", cuda_arch: sm_90"
FRONT_SPEC=""; BASE=http://127.0.0.1:$PORT; AUTH=""
if [ "$FRONT" = 1 ] && command -v haproxy >/dev/null; then
  printf '# watchdog benchmark\nwd-bench-key\n' > $W/keys; chmod 600 $W/keys
  FRONT_SPEC="front: {host: 127.0.0.1, port: $FPORT, keys: $W/keys, hold_s: 120, metrics: {host: 127.0.0.1, port: $MPORT}}"
  BASE=http://127.0.0.1:$FPORT; AUTH="Bearer wd-bench-key"
else FRONT=0; fi
cat > $W/spec.yaml <<YAML
engine: {repo: $W/ds4, ref: b030961, target: $TARGET$ARCH, jobs: $(nproc)}
model: {main: $W/phantom/phantom-ds4flash.gguf, memory_budget: warn}
server: {host: 127.0.0.1, port: $PORT, ctx: $CTX, stop_wait_s: 60}
health: {deadline_s: 580, soak_s: 3, interval_s: 0.2, smoke: {prompt: "Hi", expect: "phantom", max_tokens: 4},
         watchdog: $WATCHDOG}
paths: {root: $W/root}
$FRONT_SPEC
YAML
step install ds4-converge $W/spec.yaml --json || { say install failed; ds4-converge logs $W/spec.yaml > $W/res/logs.txt 2>&1; touch $W/res/DONE; exit 1; }
cp $W/root/run/watch.json $W/res/ 2>/dev/null

# The client and the hangs, in Python: requests through the front door, the engine's PID from `status --json`.
$PY - "$W" "$BASE" "$AUTH" "$TOKENS" "$HANG_S" > $W/res/scenario.json 2> $W/res/scenario.err <<'PY'
import json, os, signal, subprocess, sys, threading, time, urllib.request
W, BASE, AUTH, TOKENS, HANG_S = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
SPEC = f"{W}/spec.yaml"
def log(*a): print(time.strftime("[%H:%M:%S]"), *a, file=sys.stderr, flush=True)
def incidents():
    path = f"{W}/root/logs/incidents.jsonl"
    return [json.loads(l) for l in open(path)] if os.path.exists(path) else []
def status():
    out = subprocess.run(["ds4-converge", "status", SPEC, "--json"], capture_output=True, text=True).stdout
    return json.loads(out or "{}")
def ask(tag, words, timeout=3600, max_tokens=int(os.environ.get("MAX_TOKENS", "8"))):
    prompt = f"Request {tag}. " + " ".join(f"w{tag}{i % 251}" for i in range(words)) + " Say hi."
    body = json.dumps({"model": "deepseek-v4-flash", "max_tokens": max_tokens, "temperature": 0, "stream": False,
                       "thinking": {"type": "disabled"}, "messages": [{"role": "user", "content": prompt}]}).encode()
    headers = {"Content-Type": "application/json", **({"Authorization": AUTH} if AUTH else {})}
    t = time.monotonic()
    try:
        with urllib.request.urlopen(urllib.request.Request(f"{BASE}/v1/chat/completions", body, headers),
                                    timeout=timeout) as r:
            doc = json.loads(r.read())
            got = {"code": r.status, "prompt_tokens": doc.get("usage", {}).get("prompt_tokens"),
                   "answer": doc["choices"][0]["message"].get("content")}
    except Exception as exc:  # the numbers say what failed
        got = {"code": getattr(exc, "code", None), "error": f"{type(exc).__name__}: {exc}"}
    got.update(tag=tag, s=round(time.monotonic() - t, 1))
    log("request", got)
    return got
def answers():
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/v1/models" % port(), timeout=2) as r:
            return r.status == 200
    except Exception:
        return False
def port():
    return int(status().get("endpoint", "http://127.0.0.1:8000").rsplit(":", 1)[1])
result = {"engine_pid": status().get("pid"), "incidents_before": len(incidents())}
if os.environ.get("ONLY_HANGS") == "1":  # a rerun of the hangs alone (the requests measured before)
    result.update(long={}, pair=[], pair_s=None, incidents_after_requests=0, same_engine=True)
else:
    calibration = ask("calib", 10, max_tokens=1)  # the phantom's tokens per word (the prompt's frame included)
    WORDS = max(int(TOKENS / max((calibration.get("prompt_tokens") or 80) / 10, 1.0)), 5)
    result["words"] = WORDS
    result["long"] = ask("long", WORDS)
    pair = [None, None]
    threads = [threading.Thread(target=lambda i=i: pair.__setitem__(i, ask(f"pair{i}", WORDS))) for i in (0, 1)]
    t = time.monotonic(); [th.start() for th in threads]; [th.join() for th in threads]
    result["pair"], result["pair_s"] = pair, round(time.monotonic() - t, 1)
    result["incidents_after_requests"] = len(incidents()) - result["incidents_before"]
    result["same_engine"] = status().get("pid") == result["engine_pid"]
result["hangs"] = []
for n in (1, 2):
    pid = status().get("pid")
    os.kill(pid, signal.SIGSTOP)
    t, new = time.monotonic(), None
    log("SIGSTOP", n, pid)
    while time.monotonic() - t < HANG_S:
        now = status().get("pid")
        if now and now != pid and answers():
            new = now
            break
        time.sleep(1)
    took = round(time.monotonic() - t, 1)
    if new is None:
        os.kill(pid, signal.SIGCONT)
    last = (incidents() or [{}])[-1]
    result["hangs"].append({"pid": pid, "new_pid": new, "restarted_answering_s": took if new else None,
                            "cause": last.get("cause"), "check": last.get("check")})
    log("hang", result["hangs"][-1])
result["incidents"] = incidents()[result["incidents_before"]:]
print(json.dumps(result, indent=1))
PY
say "scenario rc=$?"
step status ds4-converge status $W/spec.yaml --json
cp $W/root/logs/watchdog.log $W/root/logs/incidents.jsonl $W/res/ 2>/dev/null
step stop ds4-converge stop $W/spec.yaml

# The numbers.
$PY - "$W/res/scenario.json" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except ValueError:
    print("FAIL: the scenario stopped early:", open(sys.argv[1].replace(".json", ".err")).read()[-2000:])
    sys.exit(1)
line = lambda q: f"{q.get('code')} in {q.get('s')}s, {q.get('prompt_tokens')} prompt tokens" + (f", {q['error']}" if q.get("error") else "")
if r["long"]:
    print("long prompt:", line(r["long"]))
for q in r["pair"]:
    print("two at once:", line(q))
if r["pair_s"] is not None:
    print(f"both at once took {r['pair_s']}s; incidents during the requests: {r['incidents_after_requests']}; "
          f"same engine after them: {r['same_engine']}")
for n, h in enumerate(r["hangs"], 1):
    print(f"SIGSTOP {n}: pid {h['pid']} -> {h['new_pid']}, a new engine answering after {h['restarted_answering_s']}s; "
          f"cause: {h['cause']}")
ok = all(q.get("code") == 200 for q in [r["long"], *r["pair"]] if q) and r["incidents_after_requests"] == 0 \
    and all(h["new_pid"] for h in r["hangs"])
print("PASS" if ok else "FAIL")
PY
say done; touch $W/res/DONE
