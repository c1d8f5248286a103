"""The real CLI against fake nvidia-smi/nvcc/df/apt-get first on PATH and fake toolkit dirs.

Each error rule: exit 1 from preflight, its message, every later role skipped, nothing written under the root and
no engine started. The happy paths converge the simulated engine with a CUDA target, so the build log proves
which NVCC/CUDA_HOME make got.
"""
from __future__ import annotations

import contextlib
import os
import pwd
import socket
import subprocess
import sys
import time

import pytest

from boxes import engine_pids

LOCK = "converge.lock"  # the CLI takes the run lock (creating ROOT) before preflight: see test_failed_preflight_creates_no_root


def written(box) -> dict:
    return {path: stat for path, stat in box.tree().items() if path != LOCK}


def fails_in_preflight(box, fake, *args: str) -> dict:
    """Converge for real; it must stop in preflight having changed nothing. Returns the preflight result."""
    before, pids = written(box), engine_pids(box.root)
    rc, document = box.converge(*fake.set_args(), *args)
    assert rc == 1, document
    preflight, *rest = document["roles"]
    assert preflight["name"] == "preflight" and preflight["status"] == "failed", document
    assert [r["status"] for r in rest] == ["skipped"] * len(rest)
    assert document["error"].startswith("preflight: ")
    assert written(box) == before, "a failed preflight must not write anything"
    assert engine_pids(box.root) == pids, "a failed preflight must not start an engine"
    assert not (box.root / "releases").exists()
    return preflight


def check_passes(box, fake, *args: str) -> dict:
    """A --check run that passes preflight: returns {role: result}; check mode writes nothing at all."""
    before = box.tree()
    rc, document = box.converge(*fake.set_args(), "--check", *args)
    assert rc == 0, document
    assert box.tree() == before
    return {r["name"]: r for r in document["roles"]}


# ----------------------------------------------------------------------------- rule 1: nvcc


def test_stale_nvcc_and_old_cuda_link_warn_and_the_build_gets_the_toolkit_explicitly(box, fake):
    """GB10, driver CUDA 13.0; /usr/bin/nvcc 12.0 first on PATH, /usr/local/cuda -> cuda-13.0, cuda-13.2 with
    compat libs: the build uses 13.2 explicitly and the engine gets the compat LD_LIBRARY_PATH."""
    fake.gb10(cuda="13.0")
    stale = fake.stale_nvcc("12.0")
    old = fake.toolkit("13.0")
    new = fake.toolkit("13.2", compat=True)
    link = fake.link(old)
    rc, document = box.converge(*fake.set_args(), "--set", "engine.target=cuda-spark")
    assert rc == 0, document
    roles = {r["name"]: r for r in document["roles"]}
    warnings = roles["preflight"]["warnings"]
    assert any(w.startswith(f"nvcc first on PATH is {stale} (12.0), not the build's {new}/bin/nvcc (13.2)")
               for w in warnings), warnings
    assert any(w.startswith(f"{link} points at {old} (nvcc 13.0), older than the build's {new} (nvcc 13.2)")
               for w in warnings), warnings
    notes = roles["preflight"]["notes"]
    assert any(f"LD_LIBRARY_PATH={new}/compat goes into the engine's environment" in n for n in notes), notes
    assert roles["toolchain"]["msg"].startswith(f"build with NVCC={new}/bin/nvcc CUDA_HOME={new} (nvcc 13.2, "
                                                f"newest toolkit in {fake.local}/cuda*; PATH is never used)")
    release = document["release"]
    assert "-cuda-spark-nvcc13.2-" in release
    build_log = (box.root / "logs" / f"build-{release}.log").read_text()
    assert f"cuda-spark NVCC={new}/bin/nvcc CUDA_HOME={new}\n" in build_log.splitlines()[0] + "\n"
    conf = (box.root / "supervisor" / "programs" / "ds4.conf").read_text()
    assert f"LD_LIBRARY_PATH={new}/compat" in conf
    engine_log = (box.root / "logs" / "ds4.log").read_text()
    assert "nvcc=13.2.51" in engine_log, engine_log[-2000:]


def test_toolkit_older_than_min_version_is_an_error_even_with_a_new_nvcc_on_path(box, fake):
    fake.gb10(cuda="13.2")
    fake.stale_nvcc("13.2")  # a newer nvcc on PATH does not help: the Makefile never uses PATH
    fake.link(fake.toolkit("13.0"))
    preflight = fails_in_preflight(box, fake, "--set", "engine.target=cuda-spark",
                                   "--set", "toolchain.min_version=\"13.2\"")
    assert preflight["msg"].startswith(
        f"engine.target cuda-spark needs a CUDA toolkit >= 13.2 (newest is {fake.local}/cuda-13.0 (nvcc 13.0)); "
        f"searched {fake.local}/cuda*")
    assert f"the nvcc first on PATH ({fake.usr_bin}/nvcc, 13.2) is not used" in preflight["msg"]


def test_exported_cuda_home_is_a_warning(box, fake, monkeypatch):
    fake.gb10(cuda="13.2")
    old, new = fake.toolkit("12.8"), fake.toolkit("13.2")
    fake.link(new)
    monkeypatch.setenv("CUDA_HOME", str(old))
    roles = check_passes(box, fake, "--set", "engine.target=cuda-spark")
    assert any(w.startswith(f"the environment exports CUDA_HOME={old}, which the engine's Makefile honours "
                            f"silently") for w in roles["preflight"]["warnings"])


# ----------------------------------------------------------------------------- rule 2: forward compat


def test_toolkit_newer_than_driver_without_compat_dir_is_an_error(box, fake):
    fake.gb10(cuda="13.0")
    new = fake.toolkit("13.2")
    fake.link(new)
    preflight = fails_in_preflight(box, fake, "--set", "engine.target=cuda-spark")
    assert (f"nvcc 13.2 ({new}) is newer than the driver's CUDA 13.0 (driver 580.95.05), so the engine needs the "
            f"forward-compat libraries, and {new}/compat does not exist (fix: apt-get install cuda-compat-13-2"
            in preflight["msg"])


def test_install_compat_is_planned_in_check_mode_and_installed_by_converge(box, fake):
    fake.gb10(cuda="13.0")
    new = fake.toolkit("13.2")
    fake.link(new)
    fake.apt_get(creates=new / "compat")
    args = ("--set", "engine.target=cuda-spark", "--set", "toolchain.install_compat=true")
    roles = check_passes(box, fake, *args)
    assert roles["toolchain"]["status"] == "changed"
    assert roles["toolchain"]["changes"] == ["apt-get install -y cuda-compat-13-2"]
    assert fake.called() == "", "check mode must not run apt-get"

    rc, document = box.converge(*fake.set_args(), *args)
    assert rc == 0, document
    assert fake.called() == "apt-get install -y cuda-compat-13-2\n"
    toolchain = next(r for r in document["roles"] if r["name"] == "toolchain")
    assert toolchain["msg"] == f"installed cuda-compat-13-2; LD_LIBRARY_PATH={new}/compat for the engine"
    assert f"LD_LIBRARY_PATH={new}/compat" in (box.root / "supervisor/programs/ds4.conf").read_text()


# ----------------------------------------------------------------------------- rule 3: target vs GPU


def test_cuda_spark_on_h200_is_an_error_suggesting_sm_90(box, fake):
    fake.h200(cuda="13.2")
    fake.link(fake.toolkit("13.2"))
    preflight = fails_in_preflight(box, fake, "--set", "engine.target=cuda-spark")
    assert preflight["msg"] == ("engine.target cuda-spark is for DGX Spark (GB10, compute capability 12.1), but GPU 0 "
                                "is NVIDIA H200 (compute capability 9.0) (fix: use engine.target: cuda with "
                                "engine.cuda_arch: sm_90)")


def test_h200_with_cuda_sm_90_builds_with_explicit_nvcc(box, fake):
    fake.h200(cuda="13.2")
    new = fake.toolkit("13.2")
    fake.link(new)
    roles = check_passes(box, fake, "--diff", "--set", "engine.target=cuda", "--set", "engine.cuda_arch=sm_90")
    assert roles["preflight"]["warnings"] == []
    assert roles["preflight"]["msg"].startswith("host checks passed (") and "NVIDIA H200 (9.0)" in roles["preflight"]["msg"]
    assert roles["toolchain"]["msg"] == (f"build with NVCC={new}/bin/nvcc CUDA_HOME={new} (nvcc 13.2, newest toolkit "
                                         f"in {fake.local}/cuda*; PATH is never used)")
    assert f"make -j2 cuda CUDA_ARCH=sm_90 NVCC={new}/bin/nvcc CUDA_HOME={new}" in roles["engine"]["diff"]


@pytest.mark.parametrize("gpu", ["no devices", "no nvidia-smi"])
def test_cuda_target_without_gpu_is_an_error_suggesting_cpu(box, fake, gpu):
    if gpu == "no devices":
        fake.no_gpu()
    fake.link(fake.toolkit("13.2"))
    preflight = fails_in_preflight(box, fake, "--set", "engine.target=cuda", "--set", "engine.cuda_arch=sm_90")
    reason = "nvidia-smi lists no GPU" if gpu == "no devices" else "nvidia-smi is not installed"
    assert preflight["msg"] == (f"engine.target cuda builds for an NVIDIA GPU, but {reason} (fix: use engine.target: "
                                f"cpu (reference/debug build, slow), or fix the GPU driver)")


# ----------------------------------------------------------------------------- rules 4, 5: warnings


def test_power_and_exposure_are_warnings(box, fake):
    roles = check_passes(box, fake, "--set", "server.power=75", "--set", "server.host=0.0.0.0")
    assert roles["toolchain"]["msg"] == "cpu build: no CUDA toolkit needed"
    warnings = roles["preflight"]["warnings"]
    assert ("server.power 75 throttles the GPU duty cycle: measured 11.5 instead of 15.3 tok/s at power 75 on GB10 "
            "(fix: set server.power: 100, or leave it unset)") in warnings
    assert any(w.startswith("server.host 0.0.0.0 serves the API beyond this machine, and ds4-server has no "
                            "authentication") for w in warnings)
    roles = check_passes(box, fake, "--set", "server.host=0.0.0.0", "--set", "server.expose=true")
    assert not any("serves the API beyond" in w for w in roles["preflight"]["warnings"])


@pytest.mark.parametrize("address", ["1.2.3.4", "255.255.255.255"])
def test_an_address_this_host_does_not_have_is_refused_before_any_change(box, fake, address):
    """Written canonically but not this host's: the engine would log 'failed to listen' while the probe waited out
    its deadline; preflight names it from the host's own addresses (ip -j addr) instead."""
    preflight = fails_in_preflight(box, fake, "--set", f"server.host={address}", "--set", "server.expose=true")
    assert preflight["msg"].startswith(f"server.host {address}: no interface of this host has this address (it "
                                       f"has 127.0.0.1"), preflight


@pytest.mark.parametrize("address", ["000.000.000.000", "0.0.0.00", "127.000.000.001", "010.0.0.1"])
def test_an_address_written_as_a_disguised_number_is_an_invalid_spec(box, address):
    before = box.tree()
    proc = box.cli(str(box.spec_path), "--check", "--set", f"server.host={address}")
    assert proc.returncode == 2, proc.stderr
    assert f"server.host: '{address}' is not an IP address as it is written canonically" in proc.stderr
    assert box.tree() == before


# ----------------------------------------------------------------------------- rule 6: paths


def test_unknown_variable_in_a_spec_path_is_an_error_naming_the_field(box, fake, monkeypatch):
    monkeypatch.delenv("DS4_NOPE", raising=False)
    preflight = fails_in_preflight(box, fake, "--set", "model.main=${DS4_NOPE}/model.gguf")
    assert preflight["msg"].startswith("model.main: ${DS4_NOPE}/model.gguf: $DS4_NOPE is not set on this host for "
                                       "user ")


@pytest.mark.parametrize("kind", ["a FIFO", "a regular file", "a character device"])
def test_a_kv_disk_dir_that_is_not_a_directory_is_named_at_preflight(box, fake, tmp_path, kind):
    """The engine only logs 'failed to create KV cache directory …: File exists' and serves without its disk cache:
    preflight names what the path is instead, at --check and before any change."""

    path = tmp_path / "kv"
    if kind == "a FIFO":
        os.mkfifo(path)
    elif kind == "a regular file":
        path.write_text("not a folder\n")
    else:
        path = "/dev/null"
    expected = f"server.kv_disk_dir {path} is {kind}, not a directory"
    rc, document = box.converge(*fake.set_args(), "--check", "--set", f"server.kv_disk_dir={path}")
    assert rc == 1 and document["roles"][0]["msg"].startswith(expected), document
    assert fails_in_preflight(box, fake, "--set", f"server.kv_disk_dir={path}")["msg"].startswith(expected)


def test_a_kv_disk_dir_under_a_file_or_one_the_service_user_cannot_write_is_refused(box, fake, tmp_path):
    under_a_file = tmp_path / "file"
    under_a_file.write_text("")
    preflight = fails_in_preflight(box, fake, "--set", f"server.kv_disk_dir={under_a_file}/kv/deeper")
    assert preflight["msg"].startswith(f"server.kv_disk_dir {under_a_file}/kv/deeper does not exist, and "
                                       f"{under_a_file} above it is a regular file, not a directory"), preflight
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o755)
    me = pwd.getpwuid(os.getuid()).pw_name  # root in CI, the user who runs make test elsewhere
    preflight = fails_in_preflight(box, fake, "--set", "server.user=nobody", "--set", f"server.kv_disk_dir={locked}")
    assert preflight["msg"].startswith(f"server.kv_disk_dir {locked}: the engine's user nobody cannot write this "
                                       f"directory (owned by {me}, mode 755)"), preflight
    # a path that does not exist yet, under a folder the user may write: the engine creates it
    roles = check_passes(box, fake, "--set", f"server.kv_disk_dir={tmp_path}/new/kv")
    assert roles["preflight"]["status"] == "ok", roles


def test_home_in_a_spec_path_is_the_service_users(box, fake):
    roles = check_passes(box, fake, "--set", "server.kv_disk_dir=$HOME/ds4-kv-preflight-test")
    assert roles["preflight"]["status"] == "ok"


# ----------------------------------------------------------------------------- rule 7: port


@contextlib.contextmanager
def _listen_foreign(box, tmp_path, address: str):
    """A process that is not ours listening on the box's port at `address`, until the block ends."""
    proc = subprocess.Popen([sys.executable, "-m", "http.server", str(box.port), "--bind", address],
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection((address, box.port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    try:
        yield proc
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def squatter(box, tmp_path):
    """A process that is not ours listening on the box's port."""
    with _listen_foreign(box, tmp_path, "127.0.0.1") as proc:
        yield proc


def test_port_held_by_a_foreign_process_is_an_error_naming_pid_and_command(box, fake, squatter):
    preflight = fails_in_preflight(box, fake)
    assert f"port {box.port} is held by pid {squatter.pid} ({sys.executable} -m http.server {box.port}" in preflight["msg"]
    assert squatter.poll() is None, "preflight must not touch the foreign process"


@pytest.fixture
def squatter_on(box, tmp_path):
    """A foreign process listening on the box's port at another loopback address (127.0.0.2)."""
    with _listen_foreign(box, tmp_path, "127.0.0.2") as proc:
        yield proc


def test_a_holder_on_another_address_does_not_block_server_host(box, fake, squatter_on):
    """127.0.0.2:P held by someone else: a server bound to 127.0.0.3:P binds fine, and is not refused."""
    roles = check_passes(box, fake, "--set", "server.host=127.0.0.3")
    assert roles["preflight"]["status"] == "ok", roles["preflight"]
    # 0.0.0.0 collides with every address on that port: refused, naming the holder
    preflight = fails_in_preflight(box, fake, "--set", "server.host=0.0.0.0")
    assert f"port {box.port} is held by pid {squatter_on.pid}" in preflight["msg"]


# ----------------------------------------------------------------------------- rule 8: disk and memory


def test_not_enough_disk_for_the_build_is_an_error(box, fake):
    fake.small_disk(1024**3)
    preflight = fails_in_preflight(box, fake)
    assert preflight["msg"].startswith("not enough disk on / (/dev/fake): 1.0 GiB free, 2.0 GiB needed (2.0 GiB for "
                                       "the engine build)")


# ----------------------------------------------------------------------------- the lock


def test_failed_preflight_creates_no_root(box, fake):
    fake.small_disk(1024**3)
    assert not box.root.exists()
    rc, _ = box.converge(*fake.set_args())
    assert rc == 1
    assert not box.root.exists()
