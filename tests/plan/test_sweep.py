"""--sweep-k's named arms (specdec/cli/sweep.py)."""

from __future__ import annotations

import pytest

from specdec.arms import NGRAM, check_arms, comparisons
from specdec.cli.sweep import sweep_arms


def test_vllm_sweep_makes_one_arm_per_k_against_k0():
    arms = sweep_arms("vllm", [4, 0, 2, 2, 8])
    assert [a.name for a in arms] == ["k0", "k2", "k4", "k8"]
    assert arms[0].speculation is None
    assert [a.speculation["num_speculative_tokens"] for a in arms[1:]] == [2, 4, 8]
    assert all(a.speculation["method"] == "ngram" for a in arms[1:])
    check_arms(arms)
    assert [(c.treatment, c.reference) for c in comparisons(arms)] == [("k2", "k0"), ("k4", "k0"), ("k8", "k0")]
    assert NGRAM["vllm"]["num_speculative_tokens"] == 4  # the shared default is not modified


def test_llama_cpp_sweep_sets_n_max_and_keeps_the_given_speculation():
    arms = sweep_arms("llama.cpp", [1, 3], {"type": "draft-simple", "draft_model": "/d.gguf"})
    assert [a.speculation for a in arms[1:]] == [
        {"type": "draft-simple", "draft_model": "/d.gguf", "n_max": 1, "n_min": 0},
        {"type": "draft-simple", "draft_model": "/d.gguf", "n_max": 3, "n_min": 0},
    ]


@pytest.mark.parametrize("ks", [[0], [], [-1, 2]])
def test_a_sweep_without_a_positive_k_is_refused(ks):
    with pytest.raises(ValueError):
        sweep_arms("vllm", ks)
