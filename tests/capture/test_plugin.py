import subprocess
import sys

from specdec.runfolder import ENV_CAPTURE_DIR


def test_register_is_inert_without_capture_dir():
    # In a fresh interpreter: no env var -> no state, no vLLM import at all.
    code = (
        f"import os, sys; os.environ.pop({ENV_CAPTURE_DIR!r}, None)\n"
        "from specdec.capture.plugin import hooks as plugin\n"
        "plugin.register(); plugin.register()\n"
        "assert plugin.state() is None\n"
        "assert 'vllm' not in sys.modules, 'register() imported vllm while inactive'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_plugin_is_registered_as_a_vllm_general_plugin():
    from importlib.metadata import entry_points

    eps = {ep.name: ep.value for ep in entry_points(group="vllm.general_plugins")}
    assert eps.get("specdec_capture") == "specdec.capture.plugin.hooks:register"
