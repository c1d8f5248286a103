# ds4-converge: `make run` converges the simulated engine here, `make test` runs every test, `make test-fast`
# the ones that start nothing real (unit, parsers, rendering, plan logic: seconds, for while you work).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
SPEC   ?= spec/examples/sim.yaml
# the next commands `make run` names carry the spec it ran, where it is not the default one
SPEC_ARG = $(if $(filter-out spec/examples/sim.yaml,$(SPEC)), SPEC=$(SPEC))
ARGS   ?=

# README's floor, checked before a venv is made from PYTHON (pyproject.toml's requires-python says the same)
PYTHON_FLOOR := 3.11
define check_python_floor
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < tuple(map(int, "$(PYTHON_FLOOR)".split("."))))' \
		2>/dev/null || { echo "ds4-converge needs Python >= $(PYTHON_FLOOR); $(PYTHON) is:" \
		"$$($(PYTHON) --version 2>&1 || echo not found). Name another: make ... PYTHON=/usr/bin/python3.11" >&2; exit 1; }
endef

.PHONY: run test system-deps test-fast lint-imports stop status check logs schema dashboard docs clean collection collection-build sanity

# What running the tool needs, and nothing else (no Hugging Face stack, no test or fleet tools): make run, check,
# status, stop. A spec with hf:// sources needs the `download` extra: $(BIN)/pip install -e '.[download]'.
$(VENV)/.installed-run: pyproject.toml
	$(check_python_floor)
	@echo "==> $(VENV): installing ds4-converge and what running it needs (docs/architecture.md says why each dependency is here)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --disable-pip-version-check --upgrade pip
	$(BIN)/pip install --disable-pip-version-check -e .
	touch $@

# The developer's venv: hf:// downloads, the test, fleet, plot and observability tools too (huggingface_hub,
# pytest, jsonschema, import-linter, ansible-core, molecule, matplotlib, grafana-foundation-sdk).
$(VENV)/.installed-dev: pyproject.toml
	$(check_python_floor)
	@echo "==> $(VENV): installing ds4-converge with its test and fleet tools"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --disable-pip-version-check --quiet --upgrade pip
	$(BIN)/pip install --disable-pip-version-check --quiet -e '.[download,test,fleet,plot,observability]'
	touch $@ $(VENV)/.installed-run

$(BIN)/ds4-converge: $(VENV)/.installed-dev
	touch $@

# ARGS go to the tool: make run ARGS='--set server.port=9000'. The tool itself prints the endpoint and a
# curl line that asks for a model /v1/models lists.
run: $(VENV)/.installed-run
	$(BIN)/ds4-converge $(SPEC) $(ARGS)
	@echo "status: make status$(SPEC_ARG)    logs: make logs$(SPEC_ARG)    stop: make stop$(SPEC_ARG)"

check: $(VENV)/.installed-run
	$(BIN)/ds4-converge $(SPEC) --check --diff $(ARGS)

# healthy (0), not healthy (1) and never converged (4) are answers, not errors of make
status: $(VENV)/.installed-run
	@$(BIN)/ds4-converge status $(SPEC) $(ARGS); rc=$$?; [ $$rc -eq 0 ] || [ $$rc -eq 1 ] || [ $$rc -eq 4 ]

stop: $(VENV)/.installed-run
	$(BIN)/ds4-converge stop $(SPEC) $(ARGS)

# the engine's log (and a failed build's): ARGS='-f' follows it
logs: $(VENV)/.installed-run
	@$(BIN)/ds4-converge logs $(SPEC) $(ARGS)

# ansible-test sanity (tests/fleet/test_collection.py) installs these into its own virtualenvs: downloaded here, once,
# so the test itself runs offline
ANSIBLE_TEST_WHEELS := build/ansible-test/wheels
$(ANSIBLE_TEST_WHEELS)/.downloaded: $(VENV)/.installed-dev
	bash .ci/ansible-test-wheels.sh $(VENV) $(ANSIBLE_TEST_WHEELS)

# Two workers, a test file each at a time (a file's tests keep their order and module fixtures): most of the
# suite waits on engines, supervisord, ssh and HTTP, so two files at once fit two cores; -rs says why each skipped
# test skipped (CI fails on any: .ci/run), --durations lists the slowest in the log. The system packages come first.
test: system-deps lint-imports $(ANSIBLE_TEST_WHEELS)/.downloaded collection
	$(BIN)/python -m pytest -q -rs -n 2 --dist loadfile --durations=25

# haproxy, the ssh client, iproute2, a C compiler...: installed as root, named with the command to install them
# otherwise (make stops before the first test)
system-deps:
	@PYTHON=$(PYTHON) bash .ci/system-deps.sh

# Under 10 s on 2 idle cores: a few hypothesis examples per property (make test runs them all), and only the
# plugins these tests use (testinfra and anyio serve the fleet tests: loading them costs a second; the
# unraisable-exception check's two full garbage collections at the end are make test's business).
test-fast: lint-imports
	PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 $(BIN)/python -m pytest -q -m "not slow" -p _hypothesis_pytestplugin \
		-p pytest_timeout -p no:unraisableexception --hypothesis-profile=fast

# the layering contracts of .importlinter: imports point down (cli > orchestrate > roles > core > spec, facts),
# roles never import each other, the CLI never reaches into a role
lint-imports: $(BIN)/ds4-converge
	$(BIN)/lint-imports --no-cache

# The repository is the Ansible collection ds4.converge: `make collection` links this checkout into
# build/collections (ansible.cfg looks there), as an editable install; `make collection-build` builds the artifact
# (build/ds4-converge-VERSION.tar.gz, what build_ignore in galaxy.yml leaves, with the tool's wheel in it). `make sanity` runs ansible-test
# sanity on the built collection, offline (tests/fleet/test_collection.py, which make test runs too).
collection:
	mkdir -p build/collections/ansible_collections/ds4
	ln -sfn ../../../.. build/collections/ansible_collections/ds4/converge

# The artifact carries the tool's wheel (roles/ds4_converge/files/, git-ignored), so that a fleet run from the
# installed collection, without a checkout, installs ds4-converge on its hosts. Built out of tree and reproducibly
# (the same tree gives the same bytes), as the role's `wheel` entry point builds it from a checkout.
COLLECTION_WHEELS := roles/ds4_converge/files
collection-build: $(VENV)/.installed-dev
	rm -rf build/collection-wheel $(COLLECTION_WHEELS)/ds4_converge-*.whl
	mkdir -p build/collection-wheel $(COLLECTION_WHEELS)
	printf '[build]\nbuild_base = %s/build\n[egg_info]\negg_base = %s\n[bdist_wheel]\nbdist_dir = %s/bdist\n' \
		$(CURDIR)/build/collection-wheel $(CURDIR)/build/collection-wheel $(CURDIR)/build/collection-wheel \
		> build/collection-wheel/setup.cfg
	DIST_EXTRA_CONFIG=$(CURDIR)/build/collection-wheel/setup.cfg SOURCE_DATE_EPOCH=315532800 \
		$(BIN)/python -m pip wheel --quiet --disable-pip-version-check --no-deps --no-build-isolation \
		--no-cache-dir --wheel-dir $(COLLECTION_WHEELS) .
	$(BIN)/ansible-galaxy collection build --force --output-path build .

sanity: $(ANSIBLE_TEST_WHEELS)/.downloaded
	$(BIN)/python -m pytest -q tests/fleet/test_collection.py

# the schema and the spec reference generated from it (tests fail when either is stale)
schema: $(VENV)/.installed-run
	$(BIN)/ds4-converge schema > spec/schema.json
	$(BIN)/python docs/make_spec_reference.py

# the Grafana dashboard the collection ships, generated from observability/dashboard.py (a test fails when it is stale)
DASHBOARD := roles/ds4_converge/files/grafana/ds4-converge-dashboard.json
dashboard: $(VENV)/.installed-dev
	$(BIN)/python observability/dashboard.py > $(DASHBOARD).tmp && mv $(DASHBOARD).tmp $(DASHBOARD)

docs: schema dashboard

clean:
	-$(BIN)/ds4-converge stop $(SPEC) $(ARGS)
	rm -rf build
