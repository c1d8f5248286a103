#!/usr/bin/env bash
# What the fleet tests (molecule/, tests/fleet/) need on a fresh Debian machine. Idempotent.
#
#   bash .ci/fleet-deps.sh VENV      e.g. bash .ci/fleet-deps.sh .venv
#
# - apt: sshd and ssh (Ansible reaches the simulated Sparks over ssh to 127.0.0.1), curl and ss (the
#   testinfra checks); only what is missing, one `apt-get update`.
# - pip: the requirements of pyproject's `fleet` extra (ansible-core, molecule, pytest-testinfra) into VENV,
#   created with python3 -m venv when it does not exist. The project itself is not installed here: `make test`
#   does that (.[test,fleet]), and installing it here would make make's install step look already done.
set -euo pipefail
venv=${1:?usage: $0 VENV (the virtualenv the tests run in, e.g. .venv)}
repo=$(cd "$(dirname "$0")/.." && pwd)
export DEBIAN_FRONTEND=noninteractive

need=()
[ -x /usr/sbin/sshd ] || need+=(openssh-server)
command -v ssh >/dev/null || need+=(openssh-client)
command -v ssh-keygen >/dev/null || need+=(openssh-client)
command -v curl >/dev/null || need+=(curl)
command -v ss >/dev/null || need+=(iproute2)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends $(printf '%s\n' "${need[@]}" | sort -u) >/dev/null
fi

[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
mapfile -t reqs < <("$venv/bin/python" - "$repo/pyproject.toml" <<'EOF'
import sys, tomllib
with open(sys.argv[1], "rb") as handle:
    print("\n".join(tomllib.load(handle)["project"]["optional-dependencies"]["fleet"]))
EOF
)
if ! "$venv/bin/python" - "${reqs[@]}" <<'EOF' 2>/dev/null
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
EOF
then
  "$venv/bin/pip" install --quiet "${reqs[@]}"
fi
echo "fleet deps ready: $("$venv/bin/ansible-playbook" --version | head -1), molecule $("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("molecule"))')"
