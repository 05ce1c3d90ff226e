"""The manifest a config makes is the one it made before the manifest's config
fields were taken from one definition (``tests/fixtures/replay/manifest_from_config.json``,
written by the code before that change: external servers, so no engine starts).
Fields that are not the config's (clock, version, host, traffic digest) are left out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specdec.replay.config import ReplayConfig
from specdec.replay.manifest import arm_config, build_manifest
from specdec.schemas.records import RunManifest
from specdec.traffic.io import BUNDLED, load_traffic

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "replay" / "manifest_from_config.json"
CASES = json.loads(FIXTURE.read_text(encoding="utf-8"))
NOT_FROM_CONFIG = ("created_wall", "specdec_version", "host", "traffic")


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_manifest_of_a_config_is_unchanged(case):
    cfg = ReplayConfig(
        traffic=BUNDLED,
        runs_dir=Path("/nonexistent/runs"),
        progress=False,
        baseline_url="http://127.0.0.1:1",
        speculative_url="http://127.0.0.1:2",
        **CASES[case]["config"],
    )
    traffic = load_traffic(BUNDLED)
    arms = [arm_config(cfg, a, {}) for a in cfg.arm_specs()]
    made = build_manifest(cfg, "run-x", Path("/nonexistent/runs/run-x"), traffic, traffic.rows, {}, arms)
    got = json.loads(made.model_dump_json())
    for key in NOT_FROM_CONFIG:
        got.pop(key)
    assert list(got) == list(CASES[case]["manifest"])  # the same keys in the same order
    assert got == CASES[case]["manifest"]


def test_the_config_and_the_manifest_share_defaults_and_bounds():
    """A manifest written before a field existed reads the config's default; a value
    the config refuses, the manifest refuses too."""
    config, manifest = ReplayConfig.model_fields, RunManifest.model_fields
    for name in ("max_error_rate", "margin"):
        assert manifest[name].default == config[name].default, name
    base = json.loads(FIXTURE.read_text(encoding="utf-8"))["defaults"]["manifest"]
    for name, bad in (("max_error_rate", 1.5), ("max_error_rate", -0.1), ("margin", 0.0), ("margin", 1.1)):
        with pytest.raises(ValueError):
            ReplayConfig(traffic=BUNDLED, **{name: bad})
        with pytest.raises(ValueError):
            RunManifest.model_validate({**base, "created_wall": "t", "specdec_version": "v", "host": {},
                                        "traffic": {}, name: bad})  # fmt: skip
