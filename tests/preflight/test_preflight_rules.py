"""Each preflight rule on hand-built facts: the exact message a person reads, and the fix it suggests."""
from __future__ import annotations

from pathlib import Path

import pytest

from ds4_converge.preflight import rules
from ds4_converge.facts import Version
from ds4_converge.facts.base import Probe
from ds4_converge.spec.hostpaths import UnknownVariable
from ds4_converge.core.toolkit import Toolkit
from fakehost import GB10, GIB, H200, cuda, disk, host, listener, spec, toolkit


def levels(findings):
    return [f.level for f in findings]


def only(findings, level=None):
    assert len(findings) == 1, findings
    if level:
        assert findings[0].level == level, findings
    return findings[0]


TK132 = Toolkit(nvcc="/usr/local/cuda-13.2/bin/nvcc", cuda_home="/usr/local/cuda-13.2", version="13.2")


# --------------------------------------------------------------------------- rule 1: nvcc


def test_stale_path_nvcc_in_front_of_the_toolkit_is_a_warning_naming_both():
    facts = host(driver_cuda="13.2", cuda_facts=cuda(toolkit("/usr/local/cuda-13.2", "13.2"),
                                                    path_nvccs=[("/usr/bin/nvcc", "12.0")],
                                                    link_to="/usr/local/cuda-13.2"))
    finding = only(rules.nvcc_findings(spec(), facts, TK132), "warning")
    assert finding.message == (
        "nvcc first on PATH is /usr/bin/nvcc (12.0), not the build's /usr/local/cuda-13.2/bin/nvcc (13.2): a shell "
        "or installer running `nvcc` gets the other one; the build passes NVCC=/usr/local/cuda-13.2/bin/nvcc "
        "CUDA_HOME=/usr/local/cuda-13.2 to make explicitly")
    assert "put /usr/local/cuda-13.2/bin first on PATH" in finding.fix


def test_cuda_link_at_an_older_toolkit_is_a_warning_naming_both():
    facts = host(driver_cuda="13.2", cuda_facts=cuda(toolkit("/usr/local/cuda-13.0", "13.0"),
                                                    toolkit("/usr/local/cuda-13.2", "13.2"),
                                                    link_to="/usr/local/cuda-13.0"))
    finding = only(rules.nvcc_findings(spec(), facts, TK132), "warning")
    assert finding.message.startswith(
        "/usr/local/cuda points at /usr/local/cuda-13.0 (nvcc 13.0), older than the build's /usr/local/cuda-13.2 "
        "(nvcc 13.2): the engine's Makefile defaults CUDA_HOME to /usr/local/cuda, so a manual `make` builds with 13.0")
    assert finding.fix == "ln -sfn /usr/local/cuda-13.2 /usr/local/cuda"


def test_toolkit_on_path_and_linked_gives_no_nvcc_warning():
    tk = toolkit("/usr/local/cuda-13.2", "13.2", aliases=["/usr/local/cuda"])
    facts = host(driver_cuda="13.2", cuda_facts=cuda(tk, link_to="/usr/local/cuda-13.2"),
                 build_env={"CUDA_HOME": "/usr/local/cuda", "NVCC": "/usr/local/cuda/bin/nvcc"})
    # the toolkit's nvcc is first on PATH through the link
    facts = facts.model_copy(update={"cuda": facts.cuda.model_copy(update={
        "nvccs": [n.model_copy(update={"path_index": 0}) for n in facts.cuda.nvccs]})})
    assert rules.nvcc_findings(spec(), facts, TK132) == []


def test_exported_cuda_home_and_nvcc_that_differ_are_warnings():
    facts = host(driver_cuda="13.2", cuda_facts=cuda(toolkit("/usr/local/cuda-12.8", "12.8"),
                                                    toolkit("/usr/local/cuda-13.2", "13.2"),
                                                    link_to="/usr/local/cuda-13.2"),
                 build_env={"CUDA_HOME": "/usr/local/cuda-12.8", "NVCC": "/usr/local/cuda-12.8/bin/nvcc"})
    home, nvcc = rules.nvcc_findings(spec(), facts, TK132)
    assert home.message == ("the environment exports CUDA_HOME=/usr/local/cuda-12.8, which the engine's Makefile "
                            "honours silently over its default; ds4-converge overrides it on the make command line "
                            "(CUDA_HOME=/usr/local/cuda-13.2)")
    assert nvcc.message.startswith("the environment exports NVCC=/usr/local/cuda-12.8/bin/nvcc, which the engine's "
                                   "Makefile honours silently")
    assert "(NVCC=/usr/local/cuda-13.2/bin/nvcc)" in nvcc.message


def test_cpu_target_has_no_nvcc_findings():
    facts = host(cuda_facts=cuda(path_nvccs=[("/usr/bin/nvcc", "12.0")]))
    assert rules.nvcc_findings(spec(engine={"target": "cpu"}), facts, Toolkit()) == []


def test_too_old_toolkit_is_an_error_through_all_findings():
    facts = host(cuda_facts=cuda(toolkit("/usr/local/cuda-13.0", "13.0"), path_nvccs=[("/usr/bin/nvcc", "12.0")],
                                 link_to="/usr/local/cuda-13.0"))
    errors = [f for f in rules.all_findings(spec(toolchain={"min_version": "13.2"}), facts) if f.level == "error"]
    assert only(errors).message == (
        "engine.target cuda-spark needs a CUDA toolkit >= 13.2 (newest is /usr/local/cuda-13.0 (nvcc 13.0)); "
        "searched /usr/local/cuda*: toolkits found: /usr/local/cuda-13.0 (nvcc 13.0); the nvcc first on PATH "
        "(/usr/bin/nvcc, 12.0) is not used: the engine's Makefile builds with $(CUDA_HOME)/bin/nvcc, never PATH's")
    assert errors[0].fix.startswith("install cuda-toolkit-13-2")


# --------------------------------------------------------------------------- rule 2: forward compat


def compat_host(*, compat: bool, driver_cuda="13.0"):
    return host(driver_cuda=driver_cuda, cuda_facts=cuda(toolkit("/usr/local/cuda-13.2", "13.2", compat=compat),
                                                        link_to="/usr/local/cuda-13.2"))


def test_newer_toolkit_with_compat_dir_sets_ld_library_path():
    facts = compat_host(compat=True)
    finding = only(rules.compat_findings(spec(), facts, TK132), "info")
    assert finding.message == (
        "nvcc 13.2 (/usr/local/cuda-13.2) is newer than the driver's CUDA 13.0 (driver 580.95.05): "
        "LD_LIBRARY_PATH=/usr/local/cuda-13.2/compat goes into the engine's environment "
        "(forward-compat libcuda from cuda-compat-13-2)")
    from ds4_converge.toolchain.select import compat_env
    assert compat_env(TK132, facts) == {"LD_LIBRARY_PATH": "/usr/local/cuda-13.2/compat"}


def test_newer_toolkit_without_compat_dir_is_an_error_naming_the_package():
    finding = only(rules.compat_findings(spec(), compat_host(compat=False), TK132), "error")
    assert finding.message == (
        "nvcc 13.2 (/usr/local/cuda-13.2) is newer than the driver's CUDA 13.0 (driver 580.95.05), so the engine "
        "needs the forward-compat libraries, and /usr/local/cuda-13.2/compat does not exist")
    assert finding.fix.startswith("apt-get install cuda-compat-13-2 (or set toolchain.install_compat: true)")


def test_install_compat_turns_the_error_into_a_planned_install():
    finding = only(rules.compat_findings(spec(toolchain={"install_compat": True}), compat_host(compat=False), TK132),
                   "info")
    assert "the toolchain role installs cuda-compat-13-2 (toolchain.install_compat)" in finding.message


def test_driver_as_new_as_the_toolkit_needs_nothing():
    from ds4_converge.toolchain.select import compat_env
    facts = compat_host(compat=False, driver_cuda="13.2")
    assert rules.compat_findings(spec(), facts, TK132) == [] and compat_env(TK132, facts) == {}


def test_server_env_ld_library_path_that_drops_the_compat_dir_is_a_warning():
    findings = rules.compat_findings(spec(server={"env": {"LD_LIBRARY_PATH": "/opt/lib"}}), compat_host(compat=True),
                                     TK132)
    assert levels(findings) == ["info", "warning"]
    assert findings[1].message == ("server.env sets LD_LIBRARY_PATH=/opt/lib, which replaces "
                                   "/usr/local/cuda-13.2/compat: the engine will load the driver's older libcuda")


# --------------------------------------------------------------------------- rule 3: target vs GPU


def test_cuda_spark_on_h200_suggests_cuda_sm_90():
    finding = only(rules.target_findings(spec(), host(gpus=[H200])), "error")
    assert finding.message == ("engine.target cuda-spark is for DGX Spark (GB10, compute capability 12.1), but "
                               "GPU 0 is NVIDIA H200 (compute capability 9.0)")
    assert finding.fix == "use engine.target: cuda with engine.cuda_arch: sm_90"


def test_cuda_spark_on_gb10_is_fine():
    assert rules.target_findings(spec(), host(gpus=[GB10])) == []


@pytest.mark.parametrize("status, reason", [
    ("ok", "nvidia-smi lists no GPU"),
    ("missing", "nvidia-smi is not installed"),
    ("failed", "nvidia-smi failed (is the NVIDIA driver loaded?): NVIDIA-SMI has failed"),
])
def test_cuda_target_without_a_gpu_suggests_cpu(status, reason):
    probes = {"gpu.NvidiaGpus": Probe(fact="gpu.NvidiaGpus", argv=["nvidia-smi"], status=status,
                                      detail="NVIDIA-SMI has failed" if status == "failed" else "")}
    finding = only(rules.target_findings(spec(engine={"target": "cuda", "cuda_arch": "sm_90"}),
                                         host(gpus=[], probes=probes)), "error")
    assert finding.message == f"engine.target cuda builds for an NVIDIA GPU, but {reason}"
    assert finding.fix.startswith("use engine.target: cpu")


def test_cuda_arch_newer_than_the_gpu_is_an_error_older_a_warning():
    too_new = only(rules.target_findings(spec(engine={"target": "cuda", "cuda_arch": "sm_121"}), host(gpus=[H200])),
                   "error")
    assert too_new.message == ("engine.cuda_arch sm_121 builds code that GPU 0 is NVIDIA H200 (compute capability "
                               "9.0) cannot run")
    older = only(rules.target_findings(spec(engine={"target": "cuda", "cuda_arch": "sm_80"}), host(gpus=[H200])),
                 "warning")
    assert older.fix == "use engine.cuda_arch: sm_90"
    assert rules.target_findings(spec(engine={"target": "cuda", "cuda_arch": "sm_90"}), host(gpus=[H200])) == []


def test_generic_build_on_gb10_is_a_warning():
    finding = only(rules.target_findings(spec(engine={"target": "cuda-generic"}), host(gpus=[GB10])), "warning")
    assert "a DGX Spark: engine.target cuda-generic misses the GB10-only kernels" in finding.message
    assert finding.fix == "use engine.target: cuda-spark"


def test_sm_arch():
    assert rules.sm_arch(Version(9, 0)) == "sm_90" and rules.sm_arch(Version(12, 1)) == "sm_121"


# --------------------------------------------------------------------------- rule 4: power


def test_power_below_100_warns_with_the_measured_cost():
    finding = only(rules.power_findings(spec(server={"power": 75})), "warning")
    assert finding.message == ("server.power 75 throttles the GPU duty cycle: measured 11.5 instead of 15.3 tok/s "
                               "at power 75 on GB10")
    assert rules.power_findings(spec(server={"power": 100})) == []
    assert rules.power_findings(spec()) == []


def test_a_ctx_above_the_trained_context_gets_a_note_naming_yarn_and_the_measured_512k():
    finding = only(rules.context_findings(spec(server={"ctx": 524288})), "info")
    assert finding.message.startswith("server.ctx 524288 is above the model's trained context of 65536 tokens "
                                      "(rope.scaling.original_context_length): what lies beyond it is YaRN extension")
    assert "512K has been measured" in finding.message
    assert rules.context_findings(spec(server={"ctx": 65536})) == []
    assert any("YaRN" in f.message for f in rules.all_findings(spec(server={"ctx": 131072}), host()))


def _mtp(draft: int, **server) -> dict:
    return {"speculative": {"mode": "mtp", "draft": draft}, **server}


def test_mtp_drafts_deeper_than_one_warn_that_upstream_may_change_the_output():
    mtp = {"mtp": "/srv/gguf/mtp.gguf"}
    finding = only(rules.speculation_findings(spec(model=mtp, server=_mtp(2))), "warning")
    assert finding.message == ("server.speculative.draft 2: MTP drafts of depth >= 2 are verified in a batched "
                               "pass that can change the output upstream (corrupted answers are reported there); "
                               "draft 1 is exact")
    assert finding.fix == ('set server.speculative.draft: 1, or set DS4_MTP_STRICT: "1" in server.env for the exact '
                           'verifier (no speed win)')
    assert rules.speculation_findings(spec(model=mtp, server=_mtp(1))) == []
    assert rules.speculation_findings(spec(server={"speculative": {"mode": "off", "draft": 3}})) == []
    # the exact verifier asked for: said as a note, not a warning
    strict = spec(model=mtp, server=_mtp(3, env={"DS4_MTP_STRICT": "1"}))
    assert levels(rules.speculation_findings(strict)) == ["info"]
    quality = spec(model=mtp, server=_mtp(2, extra_args=["--quality"]))
    assert levels(rules.speculation_findings(quality)) == ["info"]
    # and it is one of the rules preflight runs
    assert any("MTP drafts of depth" in f.message for f in rules.all_findings(spec(model=mtp, server=_mtp(2)), host()))


# --------------------------------------------------------------------------- rule 5: exposure


def test_non_loopback_host_warns_about_no_authentication_unless_exposed():
    finding = only(rules.exposure_findings(spec(server={"host": "0.0.0.0"})), "warning")
    assert finding.message == ("server.host 0.0.0.0 serves the API beyond this machine, and ds4-server has no "
                               "authentication: anyone who reaches port 8000 can use it")
    assert "server.expose: true" in finding.fix
    assert levels(rules.exposure_findings(spec(server={"host": "0.0.0.0", "expose": True}))) == ["info"]
    assert rules.exposure_findings(spec(server={"host": "localhost"})) == []
    assert rules.exposure_findings(spec(server={"host": "127.0.0.2"})) == []


@pytest.mark.parametrize("address", ["1.2.3.4", "255.255.255.255", "192.0.2.3"])
def test_an_address_no_interface_of_this_host_has_is_an_error(address):
    facts = host(addresses=["127.0.0.1", "::1", "192.0.2.2", "fd00::2"])
    finding = only(rules.bind_findings(spec(server={"host": address, "expose": True}), facts), "error")
    assert finding.message == (f"server.host {address}: no interface of this host has this address (it has "
                               f"127.0.0.1, 192.0.2.2): ds4-server could not bind it")
    assert "0.0.0.0" in finding.fix
    assert any(f.message == finding.message for f in rules.all_findings(spec(server={"host": address}), facts))


@pytest.mark.parametrize("address", ["192.0.2.2", "0.0.0.0", "127.0.0.1", "127.3.4.5", "localhost"])
def test_an_address_of_this_host_any_or_loopback_binds(address):
    facts = host(addresses=["127.0.0.1", "::1", "192.0.2.2"])
    assert rules.bind_findings(spec(server={"host": address}), facts) == []


@pytest.mark.parametrize("field", ["front.host", "front.metrics.host"])
def test_a_front_address_this_host_does_not_have_is_an_error(field):
    """HAProxy cannot bind it: its reload failed while the run said "serving" (issue 41)."""
    facts = host(addresses=["127.0.0.1", "192.0.2.2"])
    front = {"keys": "/k", "host": "192.0.2.2", "metrics": {"host": "127.0.0.1", "port": 8405}}
    front["metrics" if field == "front.metrics.host" else "host"] = (
        {"host": "203.0.113.9", "port": 8405} if field == "front.metrics.host" else "203.0.113.9")
    s = spec(server={"port": 9000}, front=front)
    finding = only(rules.bind_findings(s, facts), "error")
    assert finding.message == (f"{field} 203.0.113.9: no interface of this host has this address (it has "
                               f"127.0.0.1, 192.0.2.2): HAProxy could not bind it")
    assert any(f.message == finding.message for f in rules.all_findings(s, facts))
    assert rules.bind_findings(spec(server={"port": 9000}, front={"keys": "/k", "host": "192.0.2.2"}), facts) == []


def test_unknown_addresses_refuse_nothing():
    assert rules.bind_findings(spec(server={"host": "1.2.3.4"}), host(addresses=None)) == []


# --------------------------------------------------------------------------- rule 6: paths


def test_unknown_variable_is_an_error_naming_the_field():
    s = spec(model={"main": "${GGUF_DIR}/model.gguf"}, server={"kv_disk_dir": "~/kv"})
    expand = rules.facts_expander(host(), env={})
    finding = only(rules.path_findings(s, expand), "error")
    assert finding.message.startswith("model.main: ${GGUF_DIR}/model.gguf: $GGUF_DIR is not set on this host for "
                                      "user ds4 (spec paths expand on the target host for the service user")
    paths, _ = rules.expand_paths(s, expand)
    assert paths["server.kv_disk_dir"] == Path("/home/ds4/kv")  # the service user's HOME, not the caller's


def test_paths_expand_for_the_service_user():
    s = spec(model={"main": "$HOME/gguf/m.gguf"}, toolchain={"cuda_home": "${CUDA_ROOT}/cuda-13.2"})
    paths, findings = rules.expand_paths(s, rules.facts_expander(host(), env={"CUDA_ROOT": "/opt"}))
    assert findings == []
    assert paths["model.main"] == Path("/home/ds4/gguf/m.gguf")
    assert paths["toolchain.cuda_home"] == Path("/opt/cuda-13.2")


def test_other_users_home_is_an_error():
    finding = only(rules.path_findings(spec(server={"kv_disk_dir": "~root/kv"}), rules.facts_expander(host())))
    assert finding.message.startswith("server.kv_disk_dir: ~root/kv: only ~ (the service user's home) is supported")


def test_expander_errors_are_findings_not_exceptions():
    def expand(raw: str) -> Path:
        raise UnknownVariable(f"{raw}: $X is not set")

    findings = rules.path_findings(spec(), expand)
    assert {f.message.split(":")[0] for f in findings} >= {"paths.root", "model.main", "toolchain.cuda_link"}


# --------------------------------------------------------------------------- rule 7: port


def test_foreign_port_holder_is_an_error_naming_pid_and_command():
    facts = host(listeners=[listener(4242, "python3", ["python3", "-m", "http.server", "8000"])])
    finding = only(rules.port_findings(spec(), facts), "error")
    assert finding.message == ("port 8000 is held by pid 4242 (python3 -m http.server 8000), which ds4-converge "
                               "does not manage")
    assert finding.fix == "stop pid 4242 or choose another server.port"


@pytest.mark.parametrize("argv, command", [
    (["/srv/build/sim-root/releases/abc123-cpu-none/ds4-server", "--port", "8000"], "ds4-server"),
    (["/usr/bin/python3", "/srv/build/sim-root/releases/abc123-cpu-none/ds4-server", "--port", "8000"], "ds4-server"),
    (["/usr/sbin/haproxy", "-W", "-db", "-f", "/srv/build/sim-root/front/haproxy.cfg"], "haproxy"),
])
def test_a_port_held_by_another_root_of_this_tool_names_that_root_and_its_stop_command(argv, command):
    """The two example specs share :8000: the refusal names the other root and how to stop it, not a stranger."""
    facts = host(listeners=[listener(4242, argv[0].rsplit("/", 1)[1], argv)])
    finding = only(rules.port_findings(spec(), facts), "error")
    assert finding.message == (f"port 8000 is held by pid 4242 ({command}), which another ds4-converge root runs "
                               f"(paths.root /srv/build/sim-root)"), finding
    assert " stop SPEC, with the spec whose paths.root is /srv/build/sim-root" in finding.fix, finding
    assert finding.fix.endswith("or choose another server.port"), finding


@pytest.mark.parametrize("argv", [["/opt/releases/x/ds4-serverx"], ["/opt/x/ds4-server"], ["ds4-server"], [],
                                  ["nginx", "-f", "/x/front/haproxy.cfg"]])
def test_look_alikes_are_not_another_root(argv):
    assert rules.other_root(argv) is None


def test_our_engine_on_the_port_is_fine():
    facts = host(listeners=[listener(4242, "ds4-server")])
    assert rules.port_findings(spec(), facts, our_pids={4241, 4242}) == []


@pytest.mark.parametrize("held, host, collides", [
    ("127.0.0.2", "127.0.0.3", False), ("127.0.0.3", "127.0.0.3", True), ("0.0.0.0", "127.0.0.3", True),
    ("127.0.0.2", "0.0.0.0", True), ("*", "127.0.0.3", True), ("::", "127.0.0.3", True),
    ("::1", "127.0.0.1", False), ("::1", "0.0.0.0", False), ("::ffff:127.0.0.3", "127.0.0.3", True),
    ("127.0.0.1", "localhost", True), ("127.0.0.2", "localhost", False), ("fe80::1%eth0", "0.0.0.0", False),
])
def test_a_port_holder_blocks_only_the_addresses_it_collides_with(held, host, collides):
    findings = rules.port_findings(spec(server={"host": host}), host_with_listener(held))
    assert bool(findings) is collides, (held, host, findings)


def host_with_listener(address: str):
    return host(listeners=[listener(4242, "python3").model_copy(update={"address": address})])


def test_invisible_port_holder_is_an_error():
    finding = only(rules.port_findings(spec(), host(listeners=[listener(None)])), "error")
    assert finding.message == ("port 8000 is held by a process this user cannot see (listening on 127.0.0.1), "
                               "which ds4-converge does not manage")


# --------------------------------------------------------------------------- rule 8: disk and memory


def test_not_enough_disk_for_the_build_is_an_error():
    facts = host(root_free_gib=1.0)
    finding = only(rules.disk_findings(facts, rules.disk_needs(facts)), "error")
    assert finding.message == ("not enough disk on / (/dev/nvme0n1p2): 1.0 GiB free, 2.0 GiB needed "
                               "(2.0 GiB for the engine build)")


def test_a_build_that_may_not_happen_is_only_a_warning():
    facts = host(root_free_gib=1.0)
    finding = only(rules.disk_findings(facts, rules.disk_needs(facts, build_certain=False)), "warning")
    assert "(2.0 GiB for the engine build (if needed))" in finding.message


def test_build_and_downloads_on_one_filesystem_add_up():
    facts = host(root_free_gib=60, disk_models={"/srv/gguf": disk("/srv/gguf", 60)})
    needs = rules.disk_needs(facts, model_bytes_needed={"/srv/gguf": 81 * GIB})
    finding = only(rules.disk_findings(facts, needs), "error")
    assert finding.message == ("not enough disk on / (/dev/nvme0n1p2): 60.0 GiB free, 83.0 GiB needed "
                               "(2.0 GiB for the engine build, 81.0 GiB for model downloads into /srv/gguf)")
    other_fs = host(root_free_gib=60, disk_models={"/srv/gguf": disk("/srv/gguf", 100, fs="/dev/sdb1", mount="/srv")})
    assert rules.disk_findings(other_fs, rules.disk_needs(other_fs, model_bytes_needed={"/srv/gguf": 81 * GIB})) == []


def test_unmeasured_disk_is_a_warning():
    facts = host(disk_root=None)
    finding = only(rules.disk_findings(facts, rules.disk_needs(facts)), "warning")
    assert finding.message.startswith("free disk at /var/lib/ds4-converge is unknown")


# --------------------------------------------------------------------------- all rules


def test_a_healthy_spark_has_no_findings():
    assert rules.all_findings(spec(toolchain={"min_version": "13.0"}), host()) == []


def test_all_findings_in_issue_order():
    facts = host(gpus=[H200], driver_cuda="13.0", root_free_gib=1,
                 cuda_facts=cuda(toolkit("/usr/local/cuda-13.2", "13.2"), path_nvccs=[("/usr/bin/nvcc", "12.0")],
                                 link_to="/usr/local/cuda-13.2"),
                 listeners=[listener(99, "nginx")])
    s = spec(server={"power": 50, "host": "0.0.0.0"}, model={"main": "$NOPE/m.gguf"})
    findings = rules.all_findings(s, facts, expand=rules.facts_expander(facts))
    assert [(f.level, f.message.split(" ")[0]) for f in findings] == [
        ("warning", "nvcc"),              # 1 stale PATH nvcc
        ("error", "nvcc"),                # 2 no compat dir
        ("error", "engine.target"),       # 3 cuda-spark on H200
        ("warning", "server.power"),      # 4
        ("warning", "server.host"),       # 5
        ("error", "model.main:"),         # 6
        ("error", "port"),                # 7
        ("error", "not"),                 # 8 disk
    ]
