"""The manifest's schedule entry names only the engines of the run: the flag that turns
each one's prefix cache off comes from its adapter (``Engine.prefix_cache_off_flag``),
the same constant its server arguments use."""

from __future__ import annotations

import pytest

from specdec.cli.main import BOTH_ENGINES_ARMS
from specdec.engines import Arm, LlamaCpp, Vllm
from specdec.engines.vllm import ServerSpec
from specdec.replay.config import ReplayConfig
from specdec.replay.manifest import _schedule
from specdec.traffic.io import BUNDLED


@pytest.mark.parametrize(
    "kwargs, says, not_says",
    [
        ({}, "--no-enable-prefix-caching (vLLM)", "--no-cache-prompt"),
        ({"engine": "llama.cpp"}, "--no-cache-prompt (llama-server)", "--no-enable-prefix-caching"),
        ({"named_arms": list(BOTH_ENGINES_ARMS)}, "--no-enable-prefix-caching (vLLM) or --no-cache-prompt", None),
    ],
)
def test_the_prefix_cache_note_names_the_runs_engines_only(tmp_path, kwargs, says, not_says):
    cfg = ReplayConfig(traffic=BUNDLED, runs_dir=tmp_path, prefix_cache="off", progress=False, **kwargs)
    note = _schedule(cfg)["prefix_cache_note"]
    assert says in note and (not_says is None or not_says not in note), note


def test_the_servers_use_the_flag_the_manifest_names():
    assert Vllm.prefix_cache_off_flag in ServerSpec(model="m", prefix_cache="off").common_args()
    assert Vllm.prefix_cache_off_flag not in ServerSpec(model="m", prefix_cache="reset").common_args()
    plain = Arm("llama-none", None)
    assert LlamaCpp.prefix_cache_off_flag in LlamaCpp(prompt_cache=False).server_args(plain, model="m.gguf")
    assert LlamaCpp.prefix_cache_off_flag not in LlamaCpp(prompt_cache=True).server_args(plain, model="m.gguf")
