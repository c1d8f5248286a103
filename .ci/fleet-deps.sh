#!/usr/bin/env bash
# What the fleet tests (molecule/, tests/fleet/) need on a fresh Debian machine. Idempotent.
#
#   bash .ci/fleet-deps.sh VENV      e.g. bash .ci/fleet-deps.sh .venv
#
# - apt: .ci/system-deps.sh, which make test runs too (the OpenSSH client, HAProxy, ...: it says why each).
#   No sshd: each molecule scenario starts an ssh server of its own, as the test user (molecule/shared/
#   loopback_sshd.py), so the tests need neither root nor a system sshd. apt-get needs root; everything else
#   here does not.
# - pip: the requirements of pyproject's `fleet` extra (ansible-core, molecule, pytest-testinfra, asyncssh,
#   setuptools) into VENV, created with python3 -m venv when it does not exist. The project itself is not
#   installed here: `make test` does that (.[test,fleet]), and installing it here would make make's install
#   step look already done.
set -euo pipefail
venv=${1:?usage: $0 VENV (the virtualenv the tests run in, e.g. .venv)}
repo=$(cd "$(dirname "$0")/.." && pwd)

bash "$repo/.ci/system-deps.sh"   # apt: haproxy and the ssh client among them

[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
mapfile -t reqs < <("$venv/bin/python" - "$repo/pyproject.toml" <<'PY'
import sys, tomllib
with open(sys.argv[1], "rb") as handle:
    print("\n".join(tomllib.load(handle)["project"]["optional-dependencies"]["fleet"]))
PY
)
if ! "$venv/bin/python" - "${reqs[@]}" <<'PY' 2>/dev/null
import sys
from importlib.metadata import PackageNotFoundError, version
from packaging.requirements import Requirement
for spec in sys.argv[1:]:
    req = Requirement(spec)
    try:
        if not req.specifier.contains(version(req.name), prereleases=True):
            sys.exit(1)
    except PackageNotFoundError:
        sys.exit(1)
PY
then
  "$venv/bin/pip" install --quiet "${reqs[@]}"
fi
# the wheels of ansible-test's sanity virtualenvs (tests/fleet/test_collection.py runs offline)
bash "$repo/.ci/ansible-test-wheels.sh" "$venv" "$repo/build/ansible-test/wheels"
echo "fleet deps ready: $(/usr/sbin/haproxy -v 2>/dev/null | sed -n 1p), $("$venv/bin/ansible-playbook" --version | sed -n 1p), molecule $("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("molecule"))'), $(ssh -V 2>&1)"
