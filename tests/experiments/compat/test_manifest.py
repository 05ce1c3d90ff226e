"""The manifest of an embedded compat run speaks of the engines that ran only:
its dtype line and its engine facts (vLLM's package facts only where a vLLM pair ran)."""

from __future__ import annotations

import pytest

from specdec.experiments.compat.run import CompatConfig, _manifest


@pytest.mark.parametrize(
    "engine, dtype, vllm_facts",
    [
        ("vllm", "vLLM float32", True),
        ("llama.cpp", "llama.cpp GGUF as shipped", False),
        ("both", "vLLM float32; llama.cpp GGUF as shipped", True),
    ],
)
def test_an_embedded_runs_manifest_names_its_own_engines(tmp_path, engine, dtype, vllm_facts):
    engines = ["vllm", "llama.cpp"] if engine == "both" else [engine]
    m = _manifest(CompatConfig(engine=engine, runs_dir=tmp_path), "r", [(e, None) for e in engines])
    assert m.dtype == dtype
    assert m.engine["engines"] == engines
    assert ("version" in m.engine) is vllm_facts
