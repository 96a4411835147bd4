# Two commands do everything on a fresh clone:  make run   and   make test
VENV ?= .venv
PY := $(VENV)/bin/python
ARGS ?= -p "The capital of France is" -n 32 --temp 0

.PHONY: run test fuzz install install-dev clean

$(VENV)/.installed: pyproject.toml scripts/install.sh
	scripts/install.sh $(VENV)
	touch $@

$(VENV)/.installed-dev: pyproject.toml scripts/install.sh
	scripts/install.sh $(VENV) dev
	touch $@ $(VENV)/.installed

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

run: $(VENV)/.installed
	$(VENV)/bin/llamapy run $(ARGS)

test: $(VENV)/.installed-dev
	$(PY) -m pytest $(PYTEST_ARGS)

# The GGUF fuzzers longer than `make test` runs them: FUZZ_SCALE times the hypothesis cases
# (4000 tiny-model and 1000 SmolLM2-header mutations at 1), a fresh seed, atheris for FUZZ_SECONDS;
# and the schemathesis contract test with CONTRACT_CASES cases per route and mode.
FUZZ_SCALE ?= 25
FUZZ_SECONDS ?= 180
CONTRACT_CASES ?= 200
fuzz: $(VENV)/.installed-dev
	LLAMAPY_FUZZ_SCALE=$(FUZZ_SCALE) LLAMAPY_FUZZ_SEED=random LLAMAPY_FUZZ_ATHERIS_SECONDS=$(FUZZ_SECONDS) \
		LLAMAPY_CONTRACT_CASES=$(CONTRACT_CASES) \
		$(PY) -m pytest -s tests/test_gguf_fuzz.py tests/test_api_contract.py $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache
