# Two commands do everything on a fresh clone:  make run   and   make test
VENV ?= .venv
PY := $(VENV)/bin/python
ARGS ?= -p "The capital of France is" -n 32 --temp 0

.PHONY: run test install install-dev clean

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

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache
