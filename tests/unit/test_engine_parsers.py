"""Pure parsers for engine knowledge: installer pins, ls-remote output, --help flags, release ids."""
import pytest

from ds4_converge.engine.git import parse_ls_remote
from ds4_converge.engine.installer import InstallerError, parse_pin
from ds4_converge.engine.release import BuildRequest, Toolkit, parse_help_flags

INSTALL_SH = """#!/usr/bin/env bash
# ds4-on-spark installer v0.2.2 (README says so; the pin below is what runs)
set -euo pipefail
DS4_REPO="${DS4_REPO:-https://github.com/Entrpi/ds4.git}"
DS4_REF="${DS4_REF:-v0.5.6}"   # pinned tag
echo "DS4_REF=${DS4_REF:-v9.9.9}"
"""


def test_installer_pin_is_the_default_that_runs():
    pin = parse_pin(INSTALL_SH, "install.sh")
    assert (pin.repo, pin.ref) == ("https://github.com/Entrpi/ds4.git", "v0.5.6")


def test_installer_without_pin_is_an_error():
    with pytest.raises(InstallerError, match="no DS4_REF"):
        parse_pin("#!/bin/sh\necho v0.2.2\n", "install.sh")


LS_REMOTE = (
    "1111111111111111111111111111111111111111\trefs/heads/main\n"
    "2222222222222222222222222222222222222222\trefs/tags/v0.2.0\n"
    "3333333333333333333333333333333333333333\trefs/tags/v0.2.0^{}\n"
    "garbage line\n"
)


@pytest.mark.parametrize("ref,expected", [("v0.2.0", "3" * 40), ("main", "1" * 40), ("nope", None)])
def test_ls_remote_prefers_peeled_tags(ref, expected):
    assert parse_ls_remote(LS_REMOTE, ref) == expected


HELP = """usage: ds4-server [options]
  -m, --model FILE          main GGUF (default ds4flash.gguf)
  --mtp FILE                MTP speculative GGUF
  -c, --ctx N               context tokens (default 32768)
  --power N                 GPU duty cycle 1..100 (default 100)
  --no-update-check         do not poll for updates
Notes: values like -1 are rejected; see --help.
"""


def test_help_flags_come_from_option_lines_only():
    flags = parse_help_flags(HELP)
    assert flags == {"-m", "--model", "--mtp", "-c", "--ctx", "--power", "--no-update-check"}


# the layout of upstream ds4-server --help (8d57664): `Usage:`, headings, the description on the next line
UPSTREAM_HELP = """Usage: ds4-server [options]

Model and runtime:
  -m, --model FILE
      GGUF model path. Default: ds4flash.gguf
  --dir-steering-ffn F
      Apply steering after FFN outputs: y -= F*v*dot(v,y). Default with file: 1
  --metal | --cuda | --cpu | --backend NAME
      Select backend explicitly. Defaults to Metal on macOS and CUDA on CUDA builds.
      --not-a-flag at the start of a description line is still a description

Thinking and sampling:
  Think Max is applied only when --ctx is at least 393216 tokens; smaller contexts use high.

Normal server command:
  ./ds4-server --ctx 100000 --kv-disk-dir /tmp/ds4-kv --kv-disk-space-mb 8192

  -h, --help
      Show this help.
"""


def test_help_flags_of_the_upstream_layout():
    assert parse_help_flags(UPSTREAM_HELP) == {"-m", "--model", "--dir-steering-ffn", "--metal", "--cuda", "--cpu",
                                               "--backend", "-h", "--help"}


def test_release_id_separates_arch_and_toolkit():
    base = dict(commit="a" * 40, ref="v1", jobs=2)
    cpu = BuildRequest(target="cpu", cuda_arch=None, toolkit=Toolkit(), **base)
    sm90 = BuildRequest(target="cuda", cuda_arch="sm_90", toolkit=Toolkit("/usr/local/cuda-13.0/bin/nvcc",
                                                                          "/usr/local/cuda-13.0", "13.0"), **base)
    sm121 = BuildRequest(target="cuda", cuda_arch="sm_121", toolkit=sm90.toolkit, **base)
    other_tk = BuildRequest(target="cuda", cuda_arch="sm_90", toolkit=Toolkit("/usr/local/cuda-13.2/bin/nvcc",
                                                                              "/usr/local/cuda-13.2", "13.2"), **base)
    ids = {r.release_id for r in (cpu, sm90, sm121, other_tk)}
    assert len(ids) == 4
    assert sm90.make_argv() == ["make", "-j2", "cuda", "CUDA_ARCH=sm_90", "NVCC=/usr/local/cuda-13.0/bin/nvcc",
                                "CUDA_HOME=/usr/local/cuda-13.0"]


def _release(flags, values=None):
    from pathlib import Path

    from ds4_converge.engine.release import Release

    return Release(id="r", path=Path("/opt/r"), commit="a" * 40, ref="v1", target="cpu", cuda_arch=None,
                   toolkit=Toolkit(), flags=frozenset(flags), values=values or {})


TOPIC_HELP = """ds4-server
Usage: ds4-server [options]

Model And Runtime
  -m, --model FILE               GGUF model path. Default: ds4flash.gguf
  --metal | --cuda | --cpu       Select the backend explicitly.
  --gpu-vram N[,N,...]|auto      CUDA VRAM budgets per device, in GiB, or auto-detect free VRAM.
  --power N                      GPU duty-cycle target, 1..100. Default: 100
  --ssd-streaming-cache-experts N|NGB
      SSD streaming: N is an exact dynamic expert count; --mtp is not named here.

More Info
    Runtime full info:         --help runtime
    Distributed inference:     --help distributed
"""


def test_help_options_count_each_flags_values():
    from ds4_converge.engine.release import help_topics, parse_help_options

    assert parse_help_options(TOPIC_HELP) == {"-m": 1, "--model": 1, "--metal": 0, "--cuda": 0, "--cpu": 0,
                                              "--gpu-vram": 1, "--power": 1, "--ssd-streaming-cache-experts": 1}
    assert parse_help_options("  --listen HOST PORT             Coordinator listen address\n"
                              "  --dspark                       Enable DSpark\n") == {"--listen": 2, "--dspark": 0}
    assert parse_help_options("  --metal | --cuda | --cpu | --backend NAME\n") == {
        "--metal": 0, "--cuda": 0, "--cpu": 0, "--backend": 1}
    assert help_topics(TOPIC_HELP) == ["runtime", "distributed"]
    assert help_topics(HELP) == []


def test_every_topic_page_counts_and_the_version_is_named():
    from ds4_converge.engine.release import HelpText, server_options

    runtime = "  --mtp FILE                     Optional MTP support GGUF.\n  --dspark                       Enable.\n"
    distributed = "  --role ROLE                    Distributed role.\n  --tensor-parallel              (ds4 CLI)\n"
    options, version = server_options(HelpText(TOPIC_HELP, {"runtime": runtime, "distributed": distributed}),
                                      commit="f" * 40, ref="main")
    assert options["--mtp"] == 1 and options["--dspark"] == 0 and options["--role"] == 1
    assert "--tensor-parallel" not in options  # b030961's server refuses it: an option of the ds4 CLI
    assert version.name == "b030961" and "not a known version" in version.why and "topic pages" in version.why
    _, known = server_options(HelpText(TOPIC_HELP, {}), commit="b030961" + "0" * 33, ref="v1")
    assert known.name == "b030961" and known.why == "commit b03096100000 is upstream b030961"
    _, fork = server_options(HelpText(HELP, {}), commit="f" * 40, ref="v0.5.6")
    assert fork.name == "fork" and "--no-update-check" in fork.why
    _, old = server_options(HelpText("  --mtp FILE\n", {}), commit="f" * 40, ref="8d57664")
    assert old.name == "8d57664"


def test_dspark_is_rendered_as_the_build_spells_it():
    from pathlib import Path

    from ds4_converge.engine.server_args import ModelPaths, server_argv
    from ds4_converge.spec.model import Server

    base = {"--model": 1, "--ctx": 1, "--host": 1, "--port": 1, "--mtp": 1}
    models = ModelPaths(Path("/m.gguf"), dspark=Path("/d.gguf"))
    spec = Server(speculative={"mode": "dspark"})
    upstream = _release(set(base) | {"--dspark"}, {**base, "--dspark": 0})  # b030961: a switch
    assert server_argv(upstream, spec, models, None)[-3:] == ["--mtp", "/d.gguf", "--dspark"]
    fork = _release(set(base) | {"--dspark"}, {**base, "--dspark": 1})  # the fork: --dspark FILE
    assert server_argv(fork, spec, models, None)[-2:] == ["--dspark", "/d.gguf"]


def test_server_argv_uses_the_spelling_the_binary_lists_and_refuses_what_it_lacks():
    from pathlib import Path

    from ds4_converge.engine.server_args import ModelPaths, UnsupportedSettings, server_argv
    from ds4_converge.spec.model import Server

    upstream = _release({"--model", "--ctx", "--host", "--port", "--warm-weights"})
    argv = server_argv(upstream, Server(ctx=4096, warm_weights=True), ModelPaths(Path("/m.gguf")), None)
    assert argv == ["/opt/r/ds4-server", "--model", "/m.gguf", "--host", "127.0.0.1", "--port", "8000",
                    "--ctx", "4096", "--warm-weights"]
    with pytest.raises(UnsupportedSettings, match=r"server.power needs --power \(a flag of upstream b030961 and the Entrpi fork\)"):
        server_argv(upstream, Server(power=75), ModelPaths(Path("/m.gguf")), None)
    with pytest.raises(UnsupportedSettings, match="'--bogus' is not an option"):
        server_argv(upstream, Server(extra_args=["--bogus"]), ModelPaths(Path("/m.gguf")), None)


def test_power_100_on_a_build_without_power_is_not_rendered_but_noted():
    """Upstream has no duty cycle: it always runs at 100, the fork's default. A spec copied from a fork setup
    that asks for exactly that is served as asked, without the flag the binary would refuse."""
    from pathlib import Path

    from ds4_converge.engine.server_args import ModelPaths, not_rendered, server_argv
    from ds4_converge.spec.model import Server

    upstream = _release({"--model", "--ctx", "--host", "--port"})
    argv = server_argv(upstream, Server(power=100), ModelPaths(Path("/m.gguf")), None)
    assert "--power" not in argv
    assert not_rendered(upstream, Server(power=100)) == [
        f"server.power 100 is not passed: this ds4-server (release {upstream.id}) has no --power and always runs at "
        "full duty cycle; of the known engines only upstream b030961 and the Entrpi fork have --power"]
    assert not_rendered(upstream, Server()) == []
    fork = _release({"--model", "--ctx", "--host", "--port", "--power"})
    assert server_argv(fork, Server(power=100), ModelPaths(Path("/m.gguf")), None)[-2:] == ["--power", "100"]
    assert not_rendered(fork, Server(power=100)) == []
