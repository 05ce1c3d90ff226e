"""``specdec-capture proxy`` and the proxy that ``specdec-capture sidecar`` runs in process
declare the recording options once (``cli.options.recording_options``): the sidecar's
--proxy-X is the proxy's --X, with the same type, default and help."""

from __future__ import annotations

from click.testing import CliRunner

from specdec.cli.capture import main, proxy, sidecar


def _options(command, prefix: str) -> dict[str, dict]:
    out = {}
    for p in command.params:
        for opt in p.opts:
            if opt.startswith(f"--{prefix}") and opt[len(prefix) + 2 :] in ("out", "content", "rules"):
                out[opt[len(prefix) + 2 :]] = {
                    "type": p.type.to_info_dict(),
                    "default": p.default,
                    "help": p.help.split("; default:")[0].rstrip("."),
                    "required": p.required,
                    "name": p.name,
                }
    return out


def test_the_sidecar_proxy_options_are_the_proxys():
    bare, prefixed = _options(proxy, ""), _options(sidecar, "proxy-")
    assert set(bare) == set(prefixed) == {"out", "content", "rules"}
    for key in bare:
        for what in ("type", "default", "help"):
            assert bare[key][what] == prefixed[key][what], (key, what)
    # the proxy needs a folder; the sidecar's proxy writes to LAKE/traffic unless told
    assert bare["out"]["required"] and not prefixed["out"]["required"]
    assert "default: LAKE/traffic" in next(p.help for p in sidecar.params if p.name == "proxy_out")
    assert [bare[k]["name"] for k in ("out", "content", "rules")] == ["out", "content", "rules"]
    assert [prefixed[k]["name"] for k in ("out", "content", "rules")] == ["proxy_out", "proxy_content", "proxy_rules"]


def test_the_proxy_still_requires_out_and_the_sidecar_still_refuses_proxy_out_alone(tmp_path):
    res = CliRunner().invoke(main, ["proxy", "--upstream", "http://127.0.0.1:1"])
    assert res.exit_code == 2 and "Missing option '--out'" in res.output
    res = CliRunner().invoke(
        main,
        [
            "sidecar", "--capture-dir", str(tmp_path / "c"), "--lake", str(tmp_path / "l"),
            "--server", "http://127.0.0.1:1", "--proxy-out", str(tmp_path / "t"),
        ],
    )  # fmt: skip
    assert res.exit_code == 2 and "--proxy-out and --proxy-rules need --proxy-listen" in res.output
