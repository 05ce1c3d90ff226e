"""specdec-replay --sweep-k through click (needs the --sweep-k option in specdec/cli/replay.py)."""

from __future__ import annotations


def test_replay_sweep_k_builds_a_config_with_the_named_arms(monkeypatch, tmp_path):
    from click.testing import CliRunner

    from specdec.cli import replay as replay_cli

    seen = {}

    def fake_run_replay(cfg, *a, **kw):
        seen["cfg"] = cfg
        raise SystemExit(0)

    monkeypatch.setattr("specdec.replay.experiment.run_replay", fake_run_replay)
    traffic = tmp_path / "t.jsonl"
    traffic.write_text('{"prompt_id": "p", "category": "code", "prompt": "x", "max_tokens": 4}\n')
    res = CliRunner().invoke(replay_cli.main, [str(traffic), "--sweep-k", "0,2,4", "--runs-dir", str(tmp_path / "r")])
    assert "cfg" in seen, res.output
    arms = seen["cfg"].arm_specs()
    assert [a.name for a in arms] == ["k0", "k2", "k4"]
    assert [a.speculation["num_speculative_tokens"] for a in arms[1:]] == [2, 4]
    bad = CliRunner().invoke(replay_cli.main, [str(traffic), "--sweep-k", "0", "--runs-dir", str(tmp_path / "r")])
    assert bad.exit_code == 2 and "--sweep-k" in bad.output
