#!/usr/bin/env bash
# The system packages `make test` needs (Debian/Ubuntu names), checked before any test runs. `make test` and CI
# (.ci/run, through make test) run this same script. Idempotent.
#
#   bash .ci/system-deps.sh
#
# Each tool the suite runs for real, and the package that provides it:
#   git, make          the simulated engine's repository, every build
#   gcc                `make cpu` of the real upstream engine (engine/upstream) and of the simulator
#   ss (iproute2)      the port facts (ds4_converge/facts, tests/facts/test_facts_real_host.py)
#   ssh, sftp          Ansible's ssh connection and testinfra (openssh-client); the ssh *server* of the fleet
#                      tests is molecule/shared/loopback_sshd.py (asyncssh, as the test user): no sshd needed
#   haproxy            the rolling upgrade behind a real HAProxy (molecule/haproxy), run as the test user
#   prometheus         promtool checks and unit-tests the shipped alert rules; a real prometheus scrapes a box
#                      through an upgrade and a revert (tests/observability), on loopback, as the test user
#   prometheus-node-exporter  serves the box's textfiles to that prometheus, as it does on a Spark
#   python3 -m venv    .venv (python3-venv; make's PYTHON, python3 by default)
# Missing ones: as root, apt-get installs them; otherwise one line names them and the command, and the script
# exits 1, so make stops before the first test.
set -euo pipefail

need=()
for tool in git make gcc; do command -v "$tool" >/dev/null || need+=("$tool"); done
command -v ss >/dev/null || [ -x /usr/sbin/ss ] || [ -x /sbin/ss ] || need+=(iproute2)
{ command -v ssh >/dev/null && command -v sftp >/dev/null; } || need+=(openssh-client)
command -v haproxy >/dev/null || [ -x /usr/sbin/haproxy ] || need+=(haproxy)
{ command -v prometheus >/dev/null && command -v promtool >/dev/null; } || need+=(prometheus)
command -v prometheus-node-exporter >/dev/null || need+=(prometheus-node-exporter)
"${PYTHON:-python3}" -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
[ ${#need[@]} -eq 0 ] && exit 0

if [ "$EUID" -eq 0 ] && command -v apt-get >/dev/null; then
  echo "==> installing system packages the tests need: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
  exit 0
fi
echo "make test needs these system packages: ${need[*]}; install them with: sudo apt-get install -y ${need[*]}" >&2
exit 1
