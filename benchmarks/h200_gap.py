"""The H200 run (benchmarks/h200_run.sh): a client that logs when the endpoint answered, and the engine's load alone."""
import configparser, json, os, shlex, subprocess, sys, time, urllib.request

URL = "http://127.0.0.1:8000"
BODY = json.dumps({"model": "deepseek-v4-flash", "messages": [{"role": "user", "content": "Hi"}],
                   "max_tokens": 1, "temperature": 0, "stream": False, "thinking": {"type": "disabled"}}).encode()


def ask(timeout=10.0):
    req = urllib.request.Request(URL + "/v1/chat/completions", BODY, {"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)["choices"][0]["message"]["content"]


def models(timeout=2.0):
    with urllib.request.urlopen(URL + "/v1/models", timeout=timeout) as r:
        return r.status == 200


def client(out, stop_file, limit_s=900):
    """Ask one 1-token completion after another until stop_file exists; one JSON line per attempt."""
    end = time.time() + limit_s
    with open(out, "w") as f:
        while time.time() < end and not os.path.exists(stop_file):
            t0 = time.time()
            try:
                text, ok = ask(), True
            except Exception as e:  # refused while nothing listens, reset at the switch
                text, ok = type(e).__name__, False
            f.write(json.dumps({"t0": t0, "t1": time.time(), "ok": ok, "text": text}) + "\n"); f.flush()
            if not ok:
                time.sleep(0.02)


def gap(path):
    rows = [json.loads(l) for l in open(path)]
    oks = [r for r in rows if r["ok"]]
    worst = max(((b["t1"] - a["t1"], a, b) for a, b in zip(oks, oks[1:])), key=lambda x: x[0], default=None)
    return {"attempts": len(rows), "answers": len(oks), "failed": len(rows) - len(oks),
            "gap_s": round(worst[0], 3) if worst else None,
            "typical_answer_s": round(sorted(r["t1"] - r["t0"] for r in oks)[len(oks) // 2], 3) if oks else None}


def load_alone(program_conf, limit_s=600):
    """Start the release's ds4-server exactly as supervisord would, time /v1/models and the first answer."""
    cp = configparser.RawConfigParser(); cp.read(program_conf)
    (sec,) = [s for s in cp.sections() if s.startswith("program:")]
    argv = shlex.split(cp.get(sec, "command"))
    env = dict(os.environ)
    if cp.has_option(sec, "environment"):
        from supervisor.datatypes import dict_of_key_value_pairs
        env.update(dict_of_key_value_pairs(cp.get(sec, "environment")))
    cwd = cp.get(sec, "directory") if cp.has_option(sec, "directory") else None
    t0 = time.time()
    p = subprocess.Popen(argv, env=env, cwd=cwd, stdout=open("/tmp/w/load_alone.log", "w"), stderr=subprocess.STDOUT)
    res = {"argv": argv}
    try:
        while time.time() - t0 < limit_s and p.poll() is None:
            try:
                if "models_s" not in res and models():
                    res["models_s"] = round(time.time() - t0, 3)
                if "models_s" in res:
                    res["text"] = ask(timeout=60); res["first_answer_s"] = round(time.time() - t0, 3); break
            except Exception:
                time.sleep(0.05)
        res["exit"] = p.poll()
    finally:
        p.terminate(); p.wait(60)
    return res


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "client":
        client(sys.argv[2], sys.argv[3])
    elif cmd == "gap":
        print(json.dumps(gap(sys.argv[2])))
    elif cmd == "load":
        print(json.dumps(load_alone(sys.argv[2])))
