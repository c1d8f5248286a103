# ds4-converge: `make run` converges the simulated engine here, `make test` runs every test, `make test-fast`
# the ones that start nothing real (unit, parsers, rendering, plan logic: seconds, for while you work).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
SPEC   ?= spec/examples/sim.yaml

.PHONY: run test test-fast lint-imports stop status check schema clean

$(BIN)/ds4-converge: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,fleet,plot]'
	touch $@

run: $(BIN)/ds4-converge
	$(BIN)/ds4-converge $(SPEC)
	@port=$$($(BIN)/python -c "import yaml,sys; print(yaml.safe_load(open('$(SPEC)')).get('server',{}).get('port',8000))"); \
	 echo; echo "endpoint: http://127.0.0.1:$$port/v1"; \
	 echo "try:  curl -s http://127.0.0.1:$$port/v1/chat/completions -H 'Content-Type: application/json' \\"; \
	 echo "        -d '{\"model\":\"deepseek-chat\",\"messages\":[{\"role\":\"user\",\"content\":\"What is the capital of France?\"}]}'"; \
	 echo "stop: make stop"

check: $(BIN)/ds4-converge
	$(BIN)/ds4-converge $(SPEC) --check --diff

status: $(BIN)/ds4-converge
	$(BIN)/ds4-converge status $(SPEC)

stop: $(BIN)/ds4-converge
	$(BIN)/ds4-converge stop $(SPEC)

test: lint-imports
	$(BIN)/python -m pytest -q

test-fast: lint-imports
	$(BIN)/python -m pytest -q -m "not slow"

# the layering contracts of .importlinter: roles never import each other, the CLI never reaches into a role,
# nothing imports the CLI, the spec and the facts depend on nothing else of the package
lint-imports: $(BIN)/ds4-converge
	$(BIN)/lint-imports --no-cache

schema: $(BIN)/ds4-converge
	$(BIN)/ds4-converge schema > spec/schema.json

clean:
	-$(BIN)/ds4-converge stop $(SPEC)
	rm -rf build
