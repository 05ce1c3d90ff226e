"""Tokenizer-only GGUF files for the tokenizer preflight's tests (no tensors), written
with the ``gguf`` package as llama.cpp's own files carry their tokenizer."""

from __future__ import annotations

from pathlib import Path


def write_gguf(
    path: Path, tokens: list[str], control: int = 2, eos: int = 1, merges: tuple[str, ...] = ("a b",)
) -> Path:
    """A tokenizer-only GGUF (no tensors), as llama.cpp's files carry it."""
    import gguf  # heavy and optional (the cpu extra), as in the preflight itself

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types([3 if i < control else 1 for i in range(len(tokens))])
    w.add_token_merges(list(merges))
    w.add_bos_token_id(0)
    w.add_eos_token_id(eos)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


TOKENS = ["<|im_start|>", "<|im_end|>", "a", "b", "ab", "Ġyes", "Ġno"]
