"""The engines layer does not import the HTTP client (issue 44, item 3): an adapter
parses what it is given, and the requests live in the http room
(``specdec/http``) and the replay's client."""

import subprocess
import sys


def test_importing_every_engine_module_leaves_aiohttp_unloaded():
    code = (
        "import pkgutil, importlib, sys, specdec.engines as e\n"
        "for m in pkgutil.iter_modules(e.__path__):\n"
        "    importlib.import_module('specdec.engines.' + m.name)\n"
        "print(sorted(k for k in sys.modules if k.split('.')[0] == 'aiohttp'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


def test_the_http_room_is_where_aiohttp_is():
    code = "import sys, specdec.http.metrics\nprint('aiohttp' in sys.modules)\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True", out
