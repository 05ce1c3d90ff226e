"""The context a request may use, asked of each embedded engine (issue 44, item 3: the run
checked every arm, llama.cpp's included, against vLLM's max_model_len)."""

from __future__ import annotations

import pytest

from specdec.arms import parse_arm
from specdec.engines import EMBEDDED
from specdec.errors import SpecdecError
from specdec.replay import embedded, experiment
from specdec.replay.config import ReplayConfig
from specdec.traffic.io import BUNDLED


def test_each_engine_says_its_own_context_and_a_run_takes_the_smallest(monkeypatch):
    llama = ReplayConfig(traffic=BUNDLED, engine="llama.cpp")
    both = ReplayConfig(traffic=BUNDLED, named_arms=[parse_arm("a=vllm:none"), parse_arm("b=llama.cpp:none")])
    assert embedded.context_per_request(llama) == EMBEDDED["llama.cpp"].context_per_request
    external = ReplayConfig(traffic=BUNDLED, baseline_url="http://h:1", speculative_url="http://h:2")
    assert embedded.context_per_request(external) is None
    monkeypatch.setattr(EMBEDDED["llama.cpp"], "context_per_request", 512)
    assert embedded.context_per_request(both) == 512 < EMBEDDED["vllm"].context_per_request
    assert embedded.context_per_request(ReplayConfig(traffic=BUNDLED)) == EMBEDDED["vllm"].context_per_request
    # the run refuses a reply that cannot fit the smallest engine's context, before anything is made
    with pytest.raises(SpecdecError, match="max_model_len 512"):
        experiment.run_replay(llama.model_copy(update={"max_tokens": 600}))
