# ds4-converge: `make run` converges the simulated engine here, `make test` runs every test, `make test-fast`
# the ones that start nothing real (unit, parsers, rendering, plan logic: seconds, for while you work).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
SPEC   ?= spec/examples/sim.yaml
ARGS   ?=

.PHONY: run test test-fast lint-imports stop status check schema clean

# What running the tool needs, and nothing else (no test or fleet tools): make run, check, status, stop.
$(VENV)/.installed-run: pyproject.toml
	@echo "==> $(VENV): installing ds4-converge and what running it needs (README: Why each dependency is here)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --disable-pip-version-check --upgrade pip
	$(BIN)/pip install --disable-pip-version-check -e .
	touch $@

# The developer's venv: the test, fleet and plot tools too (pytest, jsonschema, import-linter, ansible-core,
# molecule, matplotlib).
$(VENV)/.installed-dev: pyproject.toml
	@echo "==> $(VENV): installing ds4-converge with its test and fleet tools"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --disable-pip-version-check --quiet --upgrade pip
	$(BIN)/pip install --disable-pip-version-check --quiet -e '.[test,fleet,plot]'
	touch $@ $(VENV)/.installed-run

$(BIN)/ds4-converge: $(VENV)/.installed-dev
	touch $@

# ARGS go to the tool: make run ARGS='--set server.port=9000'. The tool itself prints the endpoint and a
# curl line that asks for a model /v1/models lists.
run: $(VENV)/.installed-run
	$(BIN)/ds4-converge $(SPEC) $(ARGS)
	@echo "status: make status    logs: $(BIN)/ds4-converge logs $(SPEC)    stop: make stop"

check: $(VENV)/.installed-run
	$(BIN)/ds4-converge $(SPEC) --check --diff $(ARGS)

# healthy (0), not healthy (1) and never converged (4) are answers, not errors of make
status: $(VENV)/.installed-run
	@$(BIN)/ds4-converge status $(SPEC) $(ARGS); rc=$$?; [ $$rc -eq 0 ] || [ $$rc -eq 1 ] || [ $$rc -eq 4 ]

stop: $(VENV)/.installed-run
	$(BIN)/ds4-converge stop $(SPEC) $(ARGS)

test: lint-imports
	$(BIN)/python -m pytest -q

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

schema: $(VENV)/.installed-run
	$(BIN)/ds4-converge schema > spec/schema.json

clean:
	-$(BIN)/ds4-converge stop $(SPEC) $(ARGS)
	rm -rf build
