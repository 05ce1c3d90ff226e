"""llama.cpp, in one place: its adapter (``adapter``: llama-server's command line, its
per-request timings and counters), its server for one arm (``server``: ``LlamaServer``), the
build of ``llama-server`` from the llama-cpp-python sdist (``build``) and the quantized GGUF
files (``quant``)."""

from specdec.engines.llama_cpp.adapter import LlamaCpp, speculation_flags
from specdec.engines.llama_cpp.server import LlamaServer

__all__ = ["LlamaCpp", "LlamaServer", "speculation_flags"]
