"""The planner's synthetic world, shared by tests/plan (test_noise, test_met, test_plan_sweep):
rounds with a known per-position acceptance, a known step cost, and the plan's inputs built from
them (``plan_inputs``); the world's true speedup (``true_speedup``)."""

from __future__ import annotations

import numpy as np

from specdec.analytics.plan.data import DRAFT_TERMS, VERIFY_TERMS, PlanInputs
from specdec.analytics.plan.fit import LinearFit
from specdec.analytics.plan.noise import MeasurementNoise
from specdec.analytics.plan.predict import StepCost, predict, round_sums

P_ACCEPT = 0.6  # each draft position accepted with this probability, given the ones before it
K = 4
LEVELS = [1, 4, 8]
REPEATS = 2
REQUESTS = 24  # per repeat
ROUNDS = 12  # per request
COST = StepCost((20.0, 2.0, 1.0), (1.0, 0.2, 0.05))
COEF_SE = np.array([1.0, 0.1, 0.05])  # the verify fit's standard errors [ms]
S_REPEAT, S_BLOCK = 0.06, 0.04  # the measurement's noise, log scale


def true_speedup(k: int, level: int) -> float:
    """The expected speedup: tau and dbar from the acceptance distribution itself."""
    pa = np.array([P_ACCEPT**i * (1 - P_ACCEPT) for i in range(K)] + [P_ACCEPT**K])
    a = np.arange(K + 1)
    n = np.array([[(x // (kk + 1) + 1) for kk in range(K + 1)] for x in a])
    tau = (pa @ (1 + a)) / (pa @ n)
    dbar = (pa @ (n * np.minimum(K, np.arange(K + 1))[None, :])) / (pa @ n)
    return float(predict(tau, dbar, COST, level, level)["speedup"][k])


def plan_inputs(rng: np.random.Generator, noise: MeasurementNoise) -> PlanInputs:
    j = REQUESTS * REPEATS
    u = rng.random((j * ROUNDS, K))
    accepted = np.cumprod(u < P_ACCEPT, axis=1).sum(axis=1)
    request = np.repeat(np.arange(j), ROUNDS)
    sums = round_sums(request, np.full(len(request), K), accepted, np.ones(len(request)), request // REQUESTS, K)
    cov = np.diag(COEF_SE**2)
    verify = LinearFit(VERIFY_TERMS, VERIFY_TERMS, rng.normal(COST.verify, COEF_SE), cov, 1000, 1.0, 30.0)
    draft = LinearFit(DRAFT_TERMS, DRAFT_TERMS, np.array(COST.draft), np.zeros((3, 3)), 1000, 0.1, 2.0)
    return PlanInputs(
        "sim", ["code"], LEVELS, K, {"code": sums}, verify, draft,
        {lv: float(lv) for lv in LEVELS}, {lv: True for lv in LEVELS}, {}, {"code": 64.0}, {"code": j},
        "vllm", None, {}, {}, {}, spec_batch={k: {lv: float(lv) for lv in LEVELS} for k in range(1, K + 1)},
        noise={"code": noise},
    )  # fmt: skip
