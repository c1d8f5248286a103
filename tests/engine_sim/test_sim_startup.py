"""ds4-server command line and start-up checks: real processes, exit codes, messages."""

import fcntl
import os
import re
import socket

import pytest

import make_tiny_gguf as tiny_gguf
from ds4_converge.engine.release import parse_help_flags, parse_help_options
from ds4_converge.engine_knowledge import BASE, FORK, for_version
from engine_sim_support import MODELS, clean_env, free_port, run, serve

# the simulator plays upstream 8d57664 and the fork
KNOWLEDGE = {"upstream": for_version(BASE), "fork": for_version(FORK)}


def help_flags(text):
    """-> {flag: metavar or None} from the option lines of --help (two spaces in, then a dash; the
    description follows on the next line; grouped spellings are joined by " | ")."""
    flags = {}
    for line in text.splitlines():
        if not re.match(r"^  -", line):
            continue
        for spelling in re.split(r" \| ", line.strip()):
            m = re.match(r"^(-[^\s,]+(?:, -[^\s,]+)*)(?: ([A-Z]+))?$", spelling)
            assert m, line
            for f in m.group(1).split(","):
                flags[f.strip()] = m.group(2)
    return flags


VALUES = {"--backend": "cpu", "--reasoning-effort": "low", "--preset": "spark"}


@pytest.mark.parametrize("which", ["upstream", "fork"])
def test_help_exits_0_and_lists_every_flag(which, request, tmp_path):
    binary = request.getfixturevalue(which)
    r = run([binary, "--help"], env=clean_env(DS4_LOCK_FILE=tmp_path / "l"))
    assert r.returncode == 0
    assert r.stderr == ""
    flags = help_flags(r.stdout)
    assert set(flags) == parse_help_flags(r.stdout), "ds4-converge reads the same flags"
    assert "--kv-cache-min-tokens" in flags and flags["--port"] == "N" and flags["--cors"] is None
    assert flags["--backend"] == "NAME" and flags["--metal"] is None
    assert set(flags) == set(KNOWLEDGE[which]["flags"]["listed"])
    options = parse_help_options(r.stdout)
    assert {f for f, n in options.items() if n == 0} == set(KNOWLEDGE[which]["flags"]["switches"])
    # every listed flag is accepted by the parser: all of them, then --help
    argv = [binary]
    for f, meta in flags.items():
        if f in ("-h", "--help", "--version"):
            continue
        argv += [f] + ([VALUES.get(f, "1")] if meta else [])
    r2 = run(argv + ["--help"], env=clean_env(DS4_LOCK_FILE=tmp_path / "l"))
    assert r2.returncode == 0, r2.stderr


def test_short_help_and_usage_format(fork):
    r = run([fork, "-h"])
    assert r.returncode == 0
    assert r.stdout.startswith("Usage: ds4-server [options]\n\nModel and runtime:\n")
    assert "\n  -m, --model FILE\n      GGUF model path. Default: ds4flash.gguf\n" in r.stdout


@pytest.mark.parametrize("args,needle", [
    (["--bogus"], "ds4-server: unknown option: --bogus"),
    (["--port", "0"], "--port"),
    (["--port"], "--port"),
    (["--ctx", "abc"], "--ctx"),
    (["-c", "-5"], "-c"),
    (["--backend", "vulkan"], "vulkan"),
])
def test_bad_command_line_exits_2(upstream, tmp_path, args, needle):
    r = run([upstream] + args, env=clean_env(DS4_LOCK_FILE=tmp_path / "l"))
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr
    assert not (tmp_path / "l").exists()  # options are parsed before the lock


def test_unknown_option_prints_usage_on_stderr(upstream):
    r = run([upstream, "--power", "50"])
    assert r.returncode == 2
    assert "ds4-server: unknown option: --power" in r.stderr
    assert "Usage: ds4-server [options]" in r.stderr
    assert r.stdout == ""


def test_missing_model_exit_1(upstream, tmp_path):
    missing = tmp_path / "nope.gguf"
    r = run([upstream, "-m", missing], env=clean_env(DS4_LOCK_FILE=tmp_path / "l"))
    assert r.returncode == 1
    assert "ds4: cannot open model '%s': No such file or directory" % missing in r.stderr


def test_default_model_is_cwd_relative(upstream, tmp_path):
    r = run([upstream], cwd=tmp_path, env=clean_env(DS4_LOCK_FILE=tmp_path / "l"))
    assert r.returncode == 1
    assert "cannot open model 'ds4flash.gguf'" in r.stderr


@pytest.mark.parametrize("content,needle", [
    (b"\0" * 100, "ds4: model is not a GGUF file"),
    (b"GGUF12345", "ds4: model file is too small to be GGUF"),
    (b"GGUF" + (2).to_bytes(4, "little") + b"\0" * 40, "only GGUF v3 is supported"),
])
def test_not_gguf_exit_1(upstream, tmp_path, content, needle):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(content)
    r = run([upstream, "-m", bad], env=clean_env(DS4_LOCK_FILE=tmp_path / "l"))
    assert r.returncode == 1
    assert needle in r.stderr


def write_model(path, drop=None, override=None):
    kv = {**tiny_gguf.main_model_kv(), **(override or {})}
    kv.pop(drop, None)
    return tiny_gguf.write(path, "deepseek4", kv, tiny_gguf.main_tensors())


def test_wrong_metadata_value_exit_1(upstream, tmp_path):
    m = write_model(tmp_path / "m.gguf", override={"deepseek4.block_count": 42})
    r = run([upstream, "-m", m], env=clean_env(DS4_LOCK_FILE=tmp_path / "l"))
    assert r.returncode == 1
    assert "ds4: expected block_count=43 for DeepSeek4 Flash, got 42" in r.stderr


def test_missing_metadata_key_exit_1(upstream, tmp_path):
    m = write_model(tmp_path / "m.gguf", drop="deepseek4.expert_weights_norm")
    r = run([upstream, "-m", m], env=clean_env(DS4_LOCK_FILE=tmp_path / "l"))
    assert r.returncode == 1
    assert "ds4: required metadata key is missing: deepseek4.expert_weights_norm" in r.stderr


def test_truncated_model_exit_1(upstream, tmp_path):
    data = (MODELS / "tiny-ds4flash.gguf").read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:-40])
    r = run([upstream, "-m", cut], env=clean_env(DS4_LOCK_FILE=tmp_path / "l"))
    assert r.returncode == 1
    assert "ds4: tensor points outside GGUF file" in r.stderr


def test_lock_held_exit_2(upstream, model, tmp_path):
    lock = tmp_path / "ds4.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, b"4242\n")
        r = run([upstream, "-m", model], env=clean_env(DS4_LOCK_FILE=lock))
        assert r.returncode == 2
        assert "ds4: another ds4 process is already running (pid 4242); refusing to start" in r.stderr
    finally:
        os.close(fd)
    # the lock is checked before the model
    r = run([upstream, "-m", tmp_path / "missing.gguf"], env=clean_env(DS4_LOCK_FILE=lock))
    assert r.returncode == 1
    assert lock.read_text().strip().isdigit() and lock.read_text().strip() != "4242"


def test_lock_file_holds_server_pid(start, upstream, tmp_path):
    p, _url = serve(start, upstream)
    lock = tmp_path / "ds4-0.lock"
    assert lock.read_text().strip() == str(p.p.pid)
    r = run([upstream, "-m", MODELS / "tiny-ds4flash.gguf", "--port", str(free_port())],
            env=clean_env(DS4_LOCK_FILE=lock))
    assert r.returncode == 2
    assert "(pid %d)" % p.p.pid in r.stderr
    assert p.stop() == 0


def test_boot_log_lines(start, upstream, tmp_path):
    kv = tmp_path / "kv" / "sub"
    p, url = serve(start, upstream, "-c", "100000", "--kv-disk-dir", kv, "--kv-disk-space-mb", "512",
                   "--warm-weights")
    log = p.log()
    lines = log.splitlines()
    # like the real binary: its own lines carry "MMDD HH:MM:SS ", the engine's "ds4:" lines none
    assert all(bool(re.match(r"^\d{4} \d\d:\d\d:\d\d ds4-server: ", ln)) != ln.startswith("ds4:")
               for ln in lines), log
    assert "ds4: build target=cpu arch= nvcc=none flavour=upstream" in log
    assert re.search(r"ds4-server: context buffers 189[67]\.\d\d MiB \(ctx=100000, backend=cpu", log)
    assert "ds4-server: KV disk cache %s (budget=512 MiB, cross-quant=accept, min=512" % kv in log
    assert "warming" in log
    assert kv.is_dir()
    order = [log.index(s) for s in ("build target", "context buffers", "KV disk cache", "listening on")]
    assert order == sorted(order)
    assert p.stop() == 0


def test_context_buffer_estimate_default(start, fork):
    p, _ = serve(start, fork)
    assert re.search(r"context buffers 75[12]\.\d\d MiB \(ctx=32768", p.log())
    p.stop()


def test_port_busy_exit_1(start, upstream):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    port = s.getsockname()[1]
    try:
        p, _ = start(upstream, port=port)
        assert p.wait(15) == 1
        assert "ds4-server: failed to listen on 127.0.0.1:%d: Address already in use" % port in p.log()
        assert "context buffers" in p.log()  # only after the model load
    finally:
        s.close()


@pytest.mark.parametrize("host", ["::1", "myhost.example"])
def test_bad_host_exit_1(start, upstream, host):
    p, port = start(upstream, "--host", host)
    assert p.wait(15) == 1
    assert "ds4-server: failed to listen on %s:%d: Invalid argument" % (host, port) in p.log()


def test_localhost_accepted(start, upstream):
    p, port = start(upstream, "--host", "localhost")
    assert p.wait_for("listening on http://localhost:%d" % port), p.log()
    p.stop()


def test_cuda_backend_on_cpu_build_exit_1(start, upstream):
    p, _ = start(upstream, "--cuda")
    assert p.wait(15) == 1
    # after the model checks, as the real CPU build says it
    assert "ds4: cuda backend requested but this build has no graph backend support; aborting startup" in p.log()


def test_mtp_loaded_and_rejected(start, upstream):
    p, _ = serve(start, upstream, "--mtp", MODELS / "tiny-mtp.gguf", "--mtp-draft", "40")
    assert "ds4: MTP support model loaded: %s (draft=16)" % (MODELS / "tiny-mtp.gguf") in p.log()
    p.stop()
    p2, _ = start(upstream, "--mtp", MODELS / "tiny-dspark-legacy.gguf")
    assert p2.wait(15) == 1
    assert "mtp.0." in p2.log()


def test_last_occurrence_wins(start, upstream):
    port = free_port()
    # start() passes "--port <another>" first; the later --port and -c win
    p, _ = start(upstream, "-c", "4096", "-c", "8192", "--port", str(port))
    assert p.wait_for("listening on http://127.0.0.1:%d" % port), p.log()
    assert "ctx=8192" in p.log()
    p.stop()


# ------------------------------------------------------------------ fork-only flags

def test_fork_version(fork):
    r = run([fork, "--version"])
    assert r.returncode == 0
    assert r.stdout.strip() == "ds4-server 0.3.0"


@pytest.mark.parametrize("args", [
    ["--no-spec", "--mtp", str(MODELS / "tiny-mtp.gguf")],
    ["--no-dspark", "--dspark", str(MODELS / "tiny-dspark-legacy.gguf")],
    ["--mtp", str(MODELS / "tiny-mtp.gguf"), "--no-mtp"],
    ["--power", "0"],
    ["--power", "101"],
    ["--reasoning-effort", "extreme"],
])
def test_fork_flag_conflicts_exit_2(fork, tmp_path, args):
    r = run([fork] + args, env=clean_env(DS4_LOCK_FILE=tmp_path / "l"))
    assert r.returncode == 2, r.stderr


def test_fork_dspark_and_power(start, fork):
    p, url = serve(start, fork, "-m", MODELS / "tiny-ds4flash-0731.gguf", "--dspark",
                   MODELS / "tiny-dspark-0731.gguf", "--power", "75", "--no-update-check",
                   "--mem-floor-gb", "0", with_model=False)
    log = p.log()
    assert "DSpark drafter loaded" in log
    assert "ds4: GPU power duty cycle 75%" in log
    p.stop()


def test_fork_dspark_variant_mismatch_exit_1(start, fork):
    p, _ = start(fork, "-m", MODELS / "tiny-ds4flash-0731.gguf", "--dspark",
                 MODELS / "tiny-dspark-legacy.gguf", with_model=False)
    assert p.wait(15) == 1
    assert "refusing" in p.log()


def test_fork_dspark_wrong_architecture_exit_1(start, fork):
    p, _ = start(fork, "--dspark", MODELS / "tiny-mtp.gguf")
    assert p.wait(15) == 1
    assert "deepseek4-dspark" in p.log()
