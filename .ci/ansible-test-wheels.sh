#!/usr/bin/env bash
# The wheels ansible-test sanity installs into its own virtualenvs, downloaded once, so that the sanity test
# (tests/fleet/test_collection.py) then runs offline: exactly the versions ansible-test pins for each sanity test
# (its _data/requirements/sanity.*.txt, read from the installed ansible-test) and the pip it bootstraps.
#
#   bash .ci/ansible-test-wheels.sh VENV DIR      e.g. bash .ci/ansible-test-wheels.sh .venv build/ansible-test/wheels
set -euo pipefail
venv=${1:?usage: $0 VENV DIR}
dest=${2:?usage: $0 VENV DIR}
[ -f "$dest/.downloaded" ] && exit 0
reqs=$("$venv/bin/python" -c 'import ansible_test, os; print(os.path.join(os.path.dirname(ansible_test.__file__), "_data", "requirements"))')
pip_version=$("$venv/bin/python" - <<'PY'
import re, ansible_test, os
src = open(os.path.join(os.path.dirname(ansible_test.__file__), "_internal", "python_requirements.py")).read()
print(re.search(r"default_packages = dict\(\s*pip='([^']+)'", src).group(1))
PY
)
args=()
for file in "$reqs"/sanity.*.txt; do args+=(-r "$file"); done
mkdir -p "$dest"
"$venv/bin/pip" download --quiet --disable-pip-version-check --dest "$dest" "pip==$pip_version" "${args[@]}"
echo "$pip_version" > "$dest/.downloaded"
echo "ansible-test sanity wheels ready in $dest (pip $pip_version, $(ls "$dest"/*.whl "$dest"/*.tar.gz 2>/dev/null | wc -l) files)"
