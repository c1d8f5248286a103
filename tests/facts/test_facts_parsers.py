"""Pure parsers on fixture strings: well-formed, empty and malformed output."""

from __future__ import annotations

import pytest
from pathlib import Path

from ds4_converge.facts import (CommandResult, FactParseError, Gpu, Version, evaluate, parse_ancestors, parse_comm_cmdline, parse_df, parse_env0, parse_getent_passwd, parse_gpu_query, parse_id_user, parse_ls_proc_fds, parse_meminfo, parse_nvcc_version, parse_nvidia_smi_header, parse_proc_listeners, parse_proc_net_tcp, parse_ss_listeners, parse_uname_machine, count_established)
from ds4_converge.facts.gpu import NvidiaGpus, parse_clocks_query, parse_compute_apps
from ds4_converge.facts.users import Passwd

# ---- fixtures -------------------------------------------------------------------------

GB10_QUERY = "NVIDIA GB10, 12.1, 580.95.05\n"
H200_QUERY = "NVIDIA H200, 9.0, 570.124.06\n"
NO_DEVICES = "No devices were found\n"
COMMAND_NOT_FOUND = "bash: nvidia-smi: command not found\n"

GB10_SMI = """\
Tue Nov 24 10:12:01 2026
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 580.95.05              Driver Version: 580.95.05      CUDA Version: 13.0     |
+-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|=========================================+========================+======================|
|   0  NVIDIA GB10                    On  |   0000000F:01:00.0  On |                  N/A |
| N/A   41C    P8              4W /  N/A  | Not Supported          |      0%      Default |
+-----------------------------------------+------------------------+----------------------+
"""

H200_SMI = """\
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 570.124.06             Driver Version: 570.124.06     CUDA Version: 12.8     |
|-----------------------------------------+------------------------+----------------------+
|   0  NVIDIA H200                    On  |   00000000:19:00.0 Off |                    0 |
+-----------------------------------------+------------------------+----------------------+
"""

DRIVER_DOWN = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
               "Make sure that the latest NVIDIA driver is installed and running.\n")

NVCC_132 = """\
nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2026 NVIDIA Corporation
Built on Tue_Feb_10_20:00:00_PST_2026
Cuda compilation tools, release 13.2, V13.2.51
Build cuda_13.2.r13.2/compiler.36000000_0
"""
NVCC_120_UBUNTU = """\
nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2023 NVIDIA Corporation
Built on Fri_Jan__6_16:45:21_PST_2023
Cuda compilation tools, release 12.0, V12.0.140
Build cuda_12.0.r12.0/compiler.32267302_0
"""

MEMINFO = """\
MemTotal:       128449980 kB
MemFree:         1234567 kB
MemAvailable:   120000000 kB
Buffers:           12345 kB
SwapTotal:      16777212 kB
SwapFree:       16000000 kB
HugePages_Total:       0
Hugepagesize:       2048 kB
"""

DF = """\
Filesystem          1-blocks         Used    Available Capacity Mounted on
/dev/nvme0n1p2 3936818806784 512000000000 3224818806784      14% /
/dev/nvme1n1p1 1000000000000 100000000000  900000000000      10% /srv/models
"""

SS = """\
LISTEN 0      128    127.0.0.1:8000 0.0.0.0:* users:(("ds4-server",pid=4242,fd=7))
LISTEN 0      4096       [::1]:8000    [::]:* users:(("nginx",pid=12,fd=6),("nginx",pid=11,fd=6))
LISTEN 0      511      0.0.0.0:8000 0.0.0.0:*
LISTEN 0      128  127.0.0.1%lo:8000 0.0.0.0:* users:(("we\\"ird",pid=5,fd=3))
"""

PROC_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 55501 1 0000000000000000 100 0 0 10 0
   1: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1145 1 0000000000000000 100 0 0 10 0
   2: 0100007F:1F40 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000  1000        0 55777 1 0000000000000000 20 4 30 10 -1
"""
PROC_TCP6 = """\
  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:1F40 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 55502 1 0000000000000000 100 0 0 10 0
"""
LS_FD = """\
/proc/1/fd/:
total 0
lrwx------ 1 root root 64 Nov 29 17:20 0 -> /dev/null

/proc/4242/fd/:
total 0
lr-x------ 1 ds4 ds4 64 Nov 29 17:20 0 -> /dev/null
lrwx------ 1 ds4 ds4 64 Nov 29 17:20 7 -> socket:[55501]
lrwx------ 1 ds4 ds4 64 Nov 29 17:20 8 -> socket:[55502]
"""


# ---- arch -----------------------------------------------------------------------------

def test_uname():
    assert parse_uname_machine("aarch64\n") == "aarch64"


@pytest.mark.parametrize("out", ["", "\n", "aarch64 x86_64\n"])
def test_uname_malformed(out):
    with pytest.raises(FactParseError):
        parse_uname_machine(out)


# ---- gpu ------------------------------------------------------------------------------

def test_gpu_query_gb10():
    assert parse_gpu_query(GB10_QUERY) == [
        Gpu(index=0, name="NVIDIA GB10", compute_cap=Version(12, 1), driver_version="580.95.05")]


def test_gpu_query_h200_multi():
    gpus = parse_gpu_query(H200_QUERY * 8)
    assert [g.index for g in gpus] == list(range(8))
    assert {g.compute_cap for g in gpus} == {(9, 0)}
    assert gpus[0].driver_version == "570.124.06"


@pytest.mark.parametrize("out", [NO_DEVICES, "", "\n"])
def test_gpu_query_no_gpu(out):
    assert parse_gpu_query(out) == []


def test_gpu_query_not_available_cap():
    assert parse_gpu_query("NVIDIA X, [N/A], [N/A]\n")[0].compute_cap is None


@pytest.mark.parametrize("out", [
    COMMAND_NOT_FOUND,
    DRIVER_DOWN,
    'Field "compute_cap" is not a valid field to query.\n',
    "NVIDIA GB10, twelve, 580.95.05\n",
    "NVIDIA GB10, 12.1, not-a-driver\n",
    GB10_QUERY + "garbage\n",
])
def test_gpu_query_malformed(out):
    with pytest.raises(FactParseError):
        parse_gpu_query(out)


def test_smi_header_gb10_and_h200():
    gb10 = parse_nvidia_smi_header(GB10_SMI)
    assert gb10.driver_version == "580.95.05" and gb10.cuda_version == Version(13, 0)
    assert str(gb10.cuda_version) == "13.0"
    h200 = parse_nvidia_smi_header(H200_SMI)
    assert h200.driver_version == "570.124.06" and h200.cuda_version == (12, 8)


def test_smi_header_no_devices():
    info = parse_nvidia_smi_header(NO_DEVICES)
    assert info.driver_version is None and info.cuda_version is None


def test_smi_header_without_cuda_field():
    info = parse_nvidia_smi_header("| NVIDIA-SMI 470.1  Driver Version: 470.1 |\n")
    assert info.driver_version == "470.1" and info.cuda_version is None


@pytest.mark.parametrize("out", ["", DRIVER_DOWN, COMMAND_NOT_FOUND])
def test_smi_header_malformed(out):
    with pytest.raises(FactParseError):
        parse_nvidia_smi_header(out)


# ---- nvcc -----------------------------------------------------------------------------

def test_nvcc_versions():
    r = parse_nvcc_version(NVCC_132)
    assert r.version == Version(13, 2) and r.build == "13.2.51"
    assert parse_nvcc_version(NVCC_120_UBUNTU).version == (12, 0)
    assert parse_nvcc_version("Cuda compilation tools, release 11.8\n").build is None


@pytest.mark.parametrize("out", ["", "nvcc: command not found\n", "Cuda compilation tools, release thirteen\n"])
def test_nvcc_malformed(out):
    with pytest.raises(FactParseError):
        parse_nvcc_version(out)


# ---- memory ---------------------------------------------------------------------------

def test_meminfo():
    m = parse_meminfo(MEMINFO)
    assert m.total_bytes == 128449980 * 1024
    assert m.available_bytes == 120000000 * 1024


def test_meminfo_swap():
    m = parse_meminfo(MEMINFO)
    assert (m.swap_total_bytes, m.swap_free_bytes) == (16777212 * 1024, 16000000 * 1024)


def test_meminfo_old_kernel_without_available():
    m = parse_meminfo("MemTotal: 1000 kB\nMemFree: 10 kB\n")
    assert m.available_bytes is None and m.swap_total_bytes is None


# ---- who is on the GPU, and is it held slow --------------------------------------------------------

def test_compute_apps_with_a_comma_in_the_name_and_memory_not_reported():
    apps = parse_compute_apps("4242, /srv/ds4/ds4-server, 13926\n777, python3 train,v2.py, [N/A]\n")
    assert [(a.pid, a.name, a.used_memory_bytes) for a in apps] == [
        (4242, "/srv/ds4/ds4-server", 13926 * 1024 * 1024), (777, "python3 train,v2.py", None)]


@pytest.mark.parametrize("out", ["", "No devices were found\n", "No running processes found\n"])
def test_compute_apps_none(out):
    assert parse_compute_apps(out) == []


@pytest.mark.parametrize("out", ["garbage\n", "x, name, 10\n", "12, name, lots\n"])
def test_compute_apps_malformed(out):
    with pytest.raises(FactParseError):
        parse_compute_apps(out)


def test_clocks_of_a_power_capped_gb10_without_a_power_limit():
    (c,) = parse_clocks_query("0, 208, 3003, 11.20, [N/A], P8, 0x0000000000000005\n")
    assert (c.sm_mhz, c.max_sm_mhz, c.power_limit_w, c.pstate) == (208, 3003, None, "P8")
    assert c.reasons == ["idle", "software power cap"] and c.slowdowns == ["software power cap"]


def test_clocks_unknown_reason_bits_are_kept():
    (c,) = parse_clocks_query("0, 1980, 1980, 600, 700, P0, 0x0000000000001000\n")
    assert c.reasons == ["other (0x1000)"] and c.slowdowns == []


@pytest.mark.parametrize("out", ["0, 345, 1980\n", "0, fast, 1980, 1, 2, P0, 0x0\n", "0, 1, 2, 3, 4, P0, busy\n"])
def test_clocks_malformed(out):
    with pytest.raises(FactParseError):
        parse_clocks_query(out)


@pytest.mark.parametrize("out", ["", "garbage\n", "MemTotal: lots kB\n", "MemFree: 10 kB\n"])
def test_meminfo_malformed(out):
    with pytest.raises(FactParseError):
        parse_meminfo(out)


# ---- disk -----------------------------------------------------------------------------

def test_df():
    a, b = parse_df(DF)
    assert (a.mount, a.available_bytes, a.total_bytes) == ("/", 3224818806784, 3936818806784)
    assert b.filesystem == "/dev/nvme1n1p1" and b.mount == "/srv/models"


def test_df_odd_names_and_no_header():
    (e,) = parse_df("map auto_home   0 0 0 - /System/Volumes/Data/home dir\n")
    assert e.filesystem == "map auto_home" and e.mount == "/System/Volumes/Data/home dir"


@pytest.mark.parametrize("out", ["", "Filesystem 1-blocks Used Available Capacity Mounted on\n/dev/x 1 2\n",
                                 "df: /nope: No such file or directory\n"])
def test_df_malformed(out):
    with pytest.raises(FactParseError):
        parse_df(out)


def test_ancestors():
    assert parse_ancestors("/srv/models/ds4\t/srv\n/\t/\n") == {"/srv/models/ds4": "/srv", "/": "/"}
    assert parse_ancestors("") == {}
    with pytest.raises(FactParseError):
        parse_ancestors("/srv/models/ds4\n")


# ---- port -----------------------------------------------------------------------------

def test_ss_listeners():
    ls = parse_ss_listeners(SS)
    assert [(entry.address, entry.pid, entry.command) for entry in ls] == [
        ("127.0.0.1", 4242, "ds4-server"),
        ("::1", 12, "nginx"),
        ("::1", 11, "nginx"),
        ("0.0.0.0", None, None),      # socket of another user: no process info without root
        ("127.0.0.1", 5, 'we\\"ird'),
    ]
    assert {entry.port for entry in ls} == {8000}


def test_ss_empty_and_header():
    assert parse_ss_listeners("") == []
    assert parse_ss_listeners("State Recv-Q Send-Q Local Address:Port Peer Address:Port Process\n") == []


@pytest.mark.parametrize("out", ["ss: command not found\n", "LISTEN 0 128 nonsense 0.0.0.0:*\n",
                                 "ESTAB 0 0 127.0.0.1:8000 127.0.0.1:5555\n"])
def test_ss_malformed(out):
    with pytest.raises(FactParseError):
        parse_ss_listeners(out)


def test_proc_net_tcp():
    assert parse_proc_net_tcp(PROC_TCP, 8000) == {55501: "127.0.0.1"}   # not the ESTABLISHED one
    assert parse_proc_net_tcp(PROC_TCP6, 8000) == {55502: "::1"}
    assert parse_proc_net_tcp(PROC_TCP, 9999) == {}
    assert parse_proc_net_tcp("", 8000) == {}
    with pytest.raises(FactParseError):
        parse_proc_net_tcp("   0: zzzz:1F40 00000000:0000 0A 0 0 0 0 0 x\n", 8000)
    with pytest.raises(FactParseError):
        parse_proc_net_tcp("garbage\n", 8000)


def test_established_connections_are_requests_in_flight():
    assert count_established(PROC_TCP, 8000) == 1  # the server's side of 127.0.0.1:53999, not the listener
    assert count_established(PROC_TCP, 0xD2F0) == 0  # the client's side has the port as its remote end
    assert count_established(PROC_TCP6, 8000) == 0 and count_established("", 8000) == 0
    with pytest.raises(FactParseError):
        count_established("garbage\n", 8000)


def test_ls_proc_fds():
    assert parse_ls_proc_fds(LS_FD) == {55501: [4242], 55502: [4242]}
    assert parse_ls_proc_fds("") == {}
    assert parse_ls_proc_fds("ls: cannot open directory '/proc/1/fd/': Permission denied\n") == {}


def test_proc_listeners_joined():
    out = f"== tcp\n{PROC_TCP}== tcp6\n{PROC_TCP6}== fd\n{LS_FD}"
    ls = parse_proc_listeners(out, 8000)
    assert [(entry.address, entry.pid) for entry in ls] == [("127.0.0.1", 4242), ("::1", 4242)]


def test_proc_listeners_socket_of_unreadable_process():
    ls = parse_proc_listeners(f"== tcp\n{PROC_TCP}== fd\n", 22)
    assert [(entry.address, entry.pid) for entry in ls] == [("0.0.0.0", None)]


@pytest.mark.parametrize("out", ["", "garbage\n", "== tcp\n"])
def test_proc_listeners_malformed(out):
    with pytest.raises(FactParseError):
        parse_proc_listeners(out, 8000)


def test_comm_cmdline():
    d = parse_comm_cmdline("ds4-server\n./ds4-server\0--cuda\0-m\0/m/x.gguf\0", 42)
    assert d.comm == "ds4-server" and d.cmdline == ["./ds4-server", "--cuda", "-m", "/m/x.gguf"]
    assert parse_comm_cmdline("kthreadd\n", 2).cmdline == []
    with pytest.raises(FactParseError):
        parse_comm_cmdline("", 42)


# ---- users / env ----------------------------------------------------------------------

def test_getent():
    e = parse_getent_passwd("ds4:x:1001:1001:DS4 service,,,:/home/ds4:/bin/bash\n")
    assert (e.name, e.uid, e.home, e.shell) == ("ds4", 1001, "/home/ds4", "/bin/bash")
    assert parse_getent_passwd("") is None


@pytest.mark.parametrize("out", ["ds4:x:1001\n", "ds4:x:abc:1:g:/h:/s\n", "a:x:1:1::/a:/s\nb:x:2:2::/b:/s\n"])
def test_getent_malformed(out):
    with pytest.raises(FactParseError):
        parse_getent_passwd(out)


def test_id_user():
    assert parse_id_user("ds4\n") == "ds4"
    with pytest.raises(FactParseError):
        parse_id_user("")


def test_env0():
    out = "PATH=/usr/bin:/bin\0CUDA_HOME=/usr/local/cuda-13.2\0FOO=a=b\0MULTI=x\ny\0"
    assert parse_env0(out) == {"PATH": "/usr/bin:/bin", "CUDA_HOME": "/usr/local/cuda-13.2"}
    assert parse_env0("") == {}
    with pytest.raises(FactParseError):
        parse_env0("no equals sign\0")


# ---- evaluate: command result -> value + probe status (pure) ---------------------------

ARGV = ("nvidia-smi", "--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader")


@pytest.mark.parametrize("result, status, value", [
    (CommandResult(ARGV, 0, GB10_QUERY), "ok", [Gpu(index=0, name="NVIDIA GB10", compute_cap=(12, 1),
                                                    driver_version="580.95.05")]),
    (CommandResult(ARGV, 6, NO_DEVICES), "ok", []),
    (CommandResult(ARGV, None, missing=True), "missing", []),
    (CommandResult(ARGV, 127, "", COMMAND_NOT_FOUND, missing=True), "missing", []),
    (CommandResult(ARGV, 9, DRIVER_DOWN), "failed", []),
    (CommandResult(ARGV, 0, "garbage\n"), "unparsed", []),
    (CommandResult(ARGV, None, timed_out=True), "timeout", []),
])
def test_evaluate_statuses(result, status, value):
    obs = evaluate(NvidiaGpus(), result)
    assert obs.probe.status == status
    assert obs.value == value
    assert obs.probe.fact == "gpu.NvidiaGpus"


def test_evaluate_failed_detail_and_not_found_user():
    obs = evaluate(NvidiaGpus(), CommandResult(ARGV, 9, DRIVER_DOWN))
    assert "couldn't communicate" in obs.probe.detail and obs.probe.returncode == 9
    # getent exits 2 for an unknown user: a value (None), not a failure
    obs = evaluate(Passwd(user="nobody-here"), CommandResult(("getent", "passwd", "nobody-here"), 2, ""))
    assert obs.probe.status == "ok" and obs.value is None
    assert obs.probe.fact == "users.Passwd(user='nobody-here')"


# ---- addresses -------------------------------------------------------------------------


def test_ip_addr_json_lists_every_address_of_every_interface():
    from ds4_converge.facts.addresses import parse_ip_addr_json

    text = (Path(__file__).parent / "fixtures" / "ip-addr.json").read_text()
    assert parse_ip_addr_json(text) == ["127.0.0.1", "::1", "192.0.2.2", "fd00::2", "fe80::fc:ff:fe00:1"]


@pytest.mark.parametrize("out", ["", "{}", "not json", '[{"addr_info": [{"local": "1.2.3"}]}]'])
def test_ip_addr_json_malformed(out):
    from ds4_converge.facts.addresses import parse_ip_addr_json

    with pytest.raises(FactParseError):
        parse_ip_addr_json(out)
