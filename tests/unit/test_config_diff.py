"""What a switch changes, in words: read from the two recorded deployments only."""
from ds4_converge.core.config_diff import config_changes, split_command
from ds4_converge.core.state import Deployment


def deployment(release="r1", ctx=32768, env=("DS4_THREADS=8",), flags=("--warm-weights",), user=None,
               model_identity="inode 1 size 10 mtime_ns 5") -> Deployment:
    command = ["/usr/bin/env", *env, f"/srv/releases/{release}/ds4-server", "-m", "/m/model.gguf",
               "--port", "8000", "-c", str(ctx), *flags]
    conf = (f"[program:ds4]\ncommand={' '.join(command)}\ndirectory=/srv/releases/{release}\n"
            + (f"user={user}\n" if user else "") + f"stopwaitsecs=600\n; model /m/model.gguf: {model_identity}\n")
    return Deployment(release=release, program_conf=conf, command=command, endpoint="http://127.0.0.1:8000")


def test_a_ctx_change_is_named_as_the_spec_names_it():
    assert config_changes(deployment(ctx=65536), deployment(ctx=32768)) == ["ctx 65536 → 32768"]


def test_release_flags_env_user_and_model_bytes():
    before = deployment()
    after = deployment(release="r2", env=("DS4_THREADS=4", "NEW=1"), flags=(), user="ds4",
                       model_identity="inode 2 size 10 mtime_ns 6")
    assert config_changes(before, after) == [
        "release r1 → r2", "warm-weights on → off", "env DS4_THREADS 8 → 4", "env NEW (none) → 1",
        "user (none) → ds4", "model file /m/model.gguf: new bytes"]


def test_a_build_switch_that_goes_with_the_release_says_why():
    """A switch from b030961 (which has --no-spec and is passed it) to upstream 8d57664 (which has not)."""
    before = deployment(release="b030961", flags=("--no-spec",))
    after = deployment(release="8d57664", flags=())
    assert config_changes(before, after) == [
        "release b030961 → 8d57664",
        "no-spec on → off (release 8d57664 has no --no-spec: speculation is off either way)"]
    assert config_changes(after, before)[1] == ("no-spec off → on (release b030961 has --no-spec: speculation is off "
                                                "either way)")
    # speculation itself turned on: its own lines say so, and no-spec's is a plain change
    mtp = deployment(release="b030961", flags=("--mtp", "/m/mtp.gguf"))
    assert config_changes(deployment(release="8d57664", flags=("--no-spec",)), mtp)[1:] == [
        "no-spec on → off", "mtp (none) → /m/mtp.gguf"]


def test_the_same_config_changes_nothing_and_a_first_start_says_so():
    assert config_changes(deployment(), deployment()) == []
    assert config_changes(None, deployment()) == ["first start: release r1"]


def test_split_command_reads_env_and_flags():
    env, flags = split_command(["/usr/bin/env", "A=1", "/x/ds4-server", "-c", "8", "--mtp-margin", "-0.5",
                                "--cors", "--power=90"])
    assert env == {"A": "1"}
    assert flags == {"-c": "8", "--mtp-margin": "-0.5", "--cors": True, "--power": "90"}
