"""The Model Runner V2 timing hooks (capture/plugin/v2.py) against small fakes
shaped like the vllm 0.33.0 classes (the signatures the contract tests check
in the real wheel), with CUDA events faked on a simulated device clock; and
the scheduler-side rows they feed: pairing of step N's draft time with step
N+1's rows, dummy runs skipped, placeholder drafts (-1) counted by length,
adaptive verification recorded beside the scheduled count, and the start-up
line. Nothing here needs a GPU (none has run this code)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest

from specdec.capture.plugin import hooks as plugin
from specdec.capture.plugin import v2 as plugin_v2

# ------------------------------------------------------------------ fakes
DEVICE = {"ms": 0.0}  # the simulated device clock: work advances it when it "runs"


class FakeEvent:
    """torch.cuda.Event(enable_timing=True): record() takes the device clock;
    query() is False until the stream has reached it (``done``)."""

    made: list[FakeEvent] = []

    def __init__(self):
        self.t = None
        self.done = True
        FakeEvent.made.append(self)

    def record(self):
        self.t = DEVICE["ms"]

    def query(self):
        return self.done

    def elapsed_time(self, end):
        assert self.t is not None and end.t is not None
        return end.t - self.t


class FakeStepTiming:  # vllm.v1.worker.gpu.async_utils.StepTimingCollector
    def __init__(self):
        self.starts = 0

    def forward_start(self):
        self.starts += 1


class FakeSpeculator:  # a BaseSpeculator subclass: overrides propose
    def __init__(self, draft_ms: float = 3.0):
        self.draft_ms = draft_ms
        self.calls = []

    def propose(
        self,
        input_batch,
        attn_metadata,
        slot_mappings,
        last_hidden_states,
        aux_hidden_states,
        num_sampled,
        num_rejected,
        last_sampled,
        next_prefill_tokens,
        temperature,
        seeds,
        dp_sync_state=None,
        dummy_run=False,
        skip_attn_for_dummy_run=False,
        mm_inputs=None,
        is_profile=False,
        num_speculative_tokens=None,
    ):
        self.calls.append(dummy_run)
        DEVICE["ms"] += self.draft_ms
        return [[-1] * 4]


class FakeAsyncOutput:  # vllm.v1.worker.gpu.async_utils.AsyncOutput
    def __init__(
        self,
        model_runner_output,
        sampler_output=None,
        num_sampled_tokens=None,
        main_stream=None,
        copy_stream=None,
        check_ep_fault=False,
        pending_aux_output=None,
    ):
        self.model_runner_output = model_runner_output
        self.synchronized = False

    def get_output(self):
        self.synchronized = True  # self.copy_event.synchronize()
        return self.model_runner_output


class GPUModelRunner:  # vllm.v1.worker.gpu.model_runner.GPUModelRunner, the parts the hooks touch
    __module__ = "vllm.v1.worker.gpu.model_runner"

    def __init__(self, speculator=None, forward_ms=10.0, sample_ms=2.0):
        self.speculator = speculator
        self.step_timing = FakeStepTiming()
        self.forward_ms, self.sample_ms = forward_ms, sample_ms
        self.num_draft_tokens = 0  # what the next step's input batch carries
        self._batch = None

    def execute_model(
        self,
        scheduler_output,
        intermediate_tensors=None,
        dummy_run=False,
        skip_attn_for_dummy_run=False,
        is_profile=False,
        context_len=0,
        valid_dummy_state_slots=False,
        randomize_inputs=False,
    ):
        DEVICE["ms"] += 0.5  # input preparation, before the forward
        self._batch = SimpleNamespace(num_draft_tokens=self.num_draft_tokens)
        self.step_timing.forward_start()
        DEVICE["ms"] += self.forward_ms
        return None

    def sample(self, hidden_states, input_batch, grammar_output):
        DEVICE["ms"] += self.sample_ms
        return SimpleNamespace(sampled_token_ids=[[1]]), [1], [0]

    def sample_tokens(self, grammar_output):
        sampler_output, num_sampled, num_rejected = self.sample(None, self._batch, grammar_output)
        out = FakeAsyncOutput(model_runner_output=SimpleNamespace())
        DEVICE["ms"] += 0.25  # postprocess, between the sampler and the drafter
        if self.speculator is not None:
            self.speculator.propose(
                self._batch,
                {},
                {},
                None,
                None,
                num_sampled,
                num_rejected,
                None,
                None,
                None,
                None,
                num_speculative_tokens=4,
            )
        return out

    def _dummy_run(self):
        self.execute_model(None, dummy_run=True)
        if self.speculator is not None:
            self.speculator.propose(None, {}, {}, None, None, None, None, None, None, None, None, dummy_run=True)


@pytest.fixture(autouse=True)
def fake_events(monkeypatch):
    DEVICE["ms"] = 0.0
    FakeEvent.made.clear()
    monkeypatch.setattr(plugin_v2, "new_event", FakeEvent)


def _step(runner, **kw):
    runner.execute_model(SimpleNamespace(), **kw)
    return runner.sample_tokens(None).get_output()


def _runner(**kw):
    r = GPUModelRunner(**kw)
    plugin_v2.install(r)
    return r


# ------------------------------------------------------------------ worker side
def test_verify_time_is_forward_plus_sampling_and_drafts_pair_with_the_next_step():
    spec = FakeSpeculator(draft_ms=3.0)
    r = _runner(speculator=spec)
    first = _step(r)
    assert first.specdec_timing == (None, 12.0)  # no drafts were verified in the first step
    spec.draft_ms = 5.0
    second = _step(r)
    assert second.specdec_timing == (3.0, 12.0)  # step 1's drafts, verified now
    third = _step(r)
    assert third.specdec_timing == (5.0, 12.0)
    assert r.step_timing.starts == 3  # vLLM's own collector still called


def test_dummy_runs_are_not_timed_and_do_not_move_the_pairing():
    spec = FakeSpeculator(draft_ms=3.0)
    r = _runner(speculator=spec)
    _step(r)
    made = len(FakeEvent.made)
    r._dummy_run()  # profile / cudagraph capture: execute_model(dummy_run=True), propose(dummy_run=True)
    assert len(FakeEvent.made) == made  # no event for a dummy run
    spec.draft_ms = 7.0
    r._dummy_run()
    assert _step(r).specdec_timing == (3.0, 12.0)  # still the last real step's drafts
    assert spec.calls == [False, True, True, False]


def test_no_speculator_means_no_draft_time():
    r = _runner(speculator=None)
    _step(r)
    assert _step(r).specdec_timing == (None, 12.0)


def test_events_not_complete_are_null_never_waited_for(monkeypatch):
    r = _runner(speculator=FakeSpeculator())
    r.execute_model(SimpleNamespace())
    out = r.sample_tokens(None)
    for ev in FakeEvent.made:
        ev.done = False
    assert out.get_output().specdec_timing == (None, None)


def test_adaptive_verification_records_what_the_runner_verified():
    r = _runner(speculator=FakeSpeculator())
    r.num_draft_tokens = 5  # DSpark admitted 5 of the drafts the scheduler scheduled
    assert _step(r).specdec_drafts_verified == 5


def test_the_class_is_patched_once_and_each_runner_has_its_state():
    a, b = _runner(speculator=FakeSpeculator(3.0)), _runner(speculator=FakeSpeculator(4.0))
    plugin_v2.install(a)  # again: idempotent on the class
    _step(a), _step(b)
    assert _step(a).specdec_timing[0] == 3.0 and _step(b).specdec_timing[0] == 4.0
    assert plugin_v2.is_v2_runner(a) and not plugin_v2.is_v2_runner(SimpleNamespace())


# ------------------------------------------------------------------ scheduler side
class FakeRequest:
    def __init__(self, computed, prompt):
        self.num_computed_tokens, self.num_in_flight_tokens, self.num_prompt_tokens = computed, 0, prompt
        self.num_stale_output_tokens, self.drop_stale_output = 0, False

    def is_finished(self):
        return False


def test_placeholder_drafts_count_by_length_and_v2_figures_reach_the_rows(tmp_path):
    """Async scheduling: the scheduler sees [-1]*K placeholders; vLLM counts list
    lengths, so the rows do too. The V2 output carries the timings and the verified
    drafts (adaptive verification admitted 5 of the 8 scheduled)."""
    st = plugin._State(tmp_path, "run-v2")
    try:
        sched = SimpleNamespace(
            requests={"a-00000001": FakeRequest(20, 10), "b-00000002": FakeRequest(30, 10)},
            num_sampled_tokens_per_step=1,
            has_unfinished_requests=lambda: True,
        )
        so = SimpleNamespace(
            num_scheduled_tokens={"a-00000001": 5, "b-00000002": 5},
            scheduled_spec_decode_tokens={"a-00000001": [-1] * 4, "b-00000002": [-1] * 4},
            num_invalid_spec_tokens=None,
            finished_req_ids=set(),
        )
        mro = SimpleNamespace(
            sampled_token_ids=[[7, 8, 9], [5]],
            req_id_to_index={"a-00000001": 0, "b-00000002": 1},
            specdec_timing=(3.0, 12.0),
            specdec_drafts_verified=5,
        )
        plugin._after_update(st, sched, so, mro, plugin._before_update(sched, so, mro))
        st.writer.flush()
        rows = [r for f in sorted(tmp_path.glob("*.parquet")) for r in pq.read_table(f).to_pylist()]
    finally:
        st.writer.close()
    got = {r["engine_request_id"]: r for r in rows}
    assert (got["a-00000001"]["tokens_proposed"], got["a-00000001"]["tokens_accepted"]) == (4, 2)
    assert (got["b-00000002"]["tokens_proposed"], got["b-00000002"]["tokens_accepted"]) == (4, 0)
    assert {(r["draft_ms"], r["verify_ms"], r["step_drafts_verified"]) for r in rows} == {(3.0, 12.0, 5)}
    assert sum(r["tokens_proposed"] for r in rows) == 8  # what vLLM's counters count as proposed


# ------------------------------------------------------------------ start-up line and refusal
def test_the_worker_hook_installs_v2_timing_and_says_so(caplog):
    made = GPUModelRunner(speculator=FakeSpeculator())
    make = plugin._wrap_make_model_runner(lambda self: made)
    with caplog.at_level(logging.INFO, logger="vllm.plugins.specdec_capture"):
        assert make(SimpleNamespace()) is made
    assert hasattr(made, "_specdec_v2")
    lines = [r.getMessage() for r in caplog.records if r.name == "vllm.plugins.specdec_capture"]
    assert len(lines) == 1 and "counts exact; timings from CUDA events (V2 runner" in lines[0], lines


def test_an_unrecognised_runner_is_said_to_have_no_timings(caplog):
    make = plugin._wrap_make_model_runner(lambda self: SimpleNamespace())
    with caplog.at_level(logging.INFO, logger="vllm.plugins.specdec_capture"):
        make(SimpleNamespace())
    assert any("timings off: runner types.SimpleNamespace not recognised" in r.getMessage() for r in caplog.records)


def test_an_unsupported_vllm_is_refused_and_nothing_is_patched(tmp_path, monkeypatch, caplog):
    """In this process, as a fresh engine process would register (no capture state yet): the
    version check refuses before anything is patched or started, and says so once for two
    registrations (vLLM calls the entry point in each of its processes, and may call it again)."""
    import vllm
    from vllm.v1.core.sched.scheduler import Scheduler

    monkeypatch.setattr(vllm, "__version__", "0.34.0")
    monkeypatch.setenv("SPECDEC_CAPTURE_DIR", str(tmp_path))
    monkeypatch.setenv("SPECDEC_CAPTURE_RUN_ID", "r")
    monkeypatch.setattr(plugin, "_STATE", None)
    monkeypatch.setattr(plugin, "_GAVE_UP", False)
    before = {name: Scheduler.__dict__[name] for name in ("update_from_output", "shutdown")}
    with caplog.at_level(logging.ERROR, logger=plugin.log.name):
        plugin.register()
        plugin.register()
    assert {name: Scheduler.__dict__[name] for name in before} == before
    assert plugin.state() is None
    said = [r.getMessage() for r in caplog.records if "not supported" in r.getMessage()]
    assert len(said) == 1
    assert "vLLM 0.34.0 is not supported (supported: 0.32.x, 0.33.x); capture is off" in said[0]
    assert not list(tmp_path.iterdir())


def test_the_v1_runner_on_cpu_says_what_it_times():
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner as V1

    runner = V1.__new__(V1)  # the line reads only the class and the device
    runner.device = SimpleNamespace(type="cpu")
    assert plugin.runner_line(runner).startswith("counts exact; timings from the host clock (V1 runner")
