"""Named arms in the replay's configuration and command line (specdec/arms.py):
what is refused before anything starts, each with a message that names the arm
or the option, and how the manifest states each comparison's difference."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from specdec.arms import parse_arm
from specdec.cli.replay import main as replay_main
from specdec.replay.config import ReplayConfig
from specdec.replay.manifest import arm_difference, comparison_note
from specdec.schemas.records import ArmConfig
from specdec.traffic.io import BUNDLED

ARMS = [
    parse_arm(a)
    for a in ("vllm-none=vllm", "vllm-ngram=vllm:ngram", "llama-none=llama.cpp", "llama-ngram=llama.cpp:ngram")
]


def _refused(match: str, **kw) -> None:
    with pytest.raises(ValidationError, match=match):
        ReplayConfig(traffic=BUNDLED, **kw)


def test_the_named_arms_set_the_arms_and_each_arm_has_its_engine():
    cfg = ReplayConfig(traffic=BUNDLED, named_arms=ARMS)
    assert cfg.arms == ["vllm-none", "vllm-ngram", "llama-none", "llama-ngram"]
    assert cfg.arm_engines() == {
        "vllm-none": "vllm",
        "vllm-ngram": "vllm",
        "llama-none": "llama.cpp",
        "llama-ngram": "llama.cpp",
    }
    classic = ReplayConfig(traffic=BUNDLED, engine="llama.cpp").arm_specs()
    assert [(a.name, a.engine, a.speculation) for a in classic] == [
        ("baseline", "llama.cpp", None),
        ("speculative", "llama.cpp", {"type": "ngram-mod"}),
    ]


def test_what_does_not_go_together_is_refused_by_name():
    _refused("arm vllm-none is given twice", named_arms=[ARMS[0], ARMS[0]])
    _refused("its reference nope is not one of the arms", named_arms=[ARMS[0], parse_arm("x=vllm:ngram@nope")])
    _refused("cannot be measured against itself", named_arms=[parse_arm("x=vllm:ngram@x")])
    _refused(r"engine \(--engine\) does not go with named arms", named_arms=ARMS, engine="llama.cpp")
    _refused(r"speculative_config \(--spec-config\) does not go", named_arms=ARMS, speculative_config=None)
    _refused("do not go with --baseline-url", named_arms=ARMS, baseline_url="http://127.0.0.1:1")
    _refused("arm bad: ", named_arms=[ARMS[0], parse_arm('bad=llama.cpp:{"type": "eagle"}')])


def test_the_command_line_names_a_bad_arm(tmp_path):
    result = CliRunner().invoke(replay_main, [str(BUNDLED), "--arm", "Vllm=vllm", "--runs-dir", str(tmp_path)])
    assert result.exit_code == 2 and "arm name 'Vllm'" in result.output
    result = CliRunner().invoke(replay_main, [str(BUNDLED), "--arm", "a=sglang", "--runs-dir", str(tmp_path)])
    assert result.exit_code == 2 and "unknown engine 'sglang'" in result.output
    assert not any(tmp_path.iterdir())  # nothing written


def _arm(name: str, engine: str, args: list[str], spec=None) -> ArmConfig:
    return ArmConfig(name=name, engine=engine, speculative_config=spec, server_args=args, endpoint="embedded")


def test_the_manifest_difference_is_per_comparison():
    arms = [
        _arm("vllm-none", "vllm", ["--model", "m"]),
        _arm("vllm-ngram", "vllm", ["--model", "m", "--speculative-config", "{}"], {"method": "ngram"}),
        _arm("llama-none", "llama.cpp", ["-m", "g.gguf"]),
        _arm("llama-ngram", "llama.cpp", ["-m", "g.gguf", "--spec-type", "ngram-mod"], {"type": "ngram-mod"}),
    ]
    assert arm_difference(arms) == [
        "vllm-ngram vs vllm-none: --speculative-config {}",
        "llama-ngram vs llama-none: --spec-type ngram-mod",
    ]
    assert comparison_note(arms) == ["vllm-ngram against vllm-none", "llama-ngram against llama-none"]
    classic = [
        _arm("baseline", "vllm", ["--model", "m"]),
        _arm("speculative", "vllm", ["--model", "m", "--x"], {"method": "ngram"}),
    ]
    assert arm_difference(classic) == ["--x"]  # the classic pair: as before, no prefix
