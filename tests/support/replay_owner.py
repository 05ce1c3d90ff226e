"""``specdec-replay`` with ``--engine llama.cpp`` whose ``llama-server`` is
``fake_llama_server.py`` (the binary given by ``$FAKE_LLAMA_BINARY`` instead of
the one built from PyPI): the real replay path, its embedded servers
started and stopped by the real lifecycle, without an engine."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import SimpleNamespace

from specdec.engines.llama_cpp import build as llama_build

llama_build.build_llama_server = lambda *a, **k: SimpleNamespace(path=Path(os.environ["FAKE_LLAMA_BINARY"]))

from specdec.cli.replay import main  # noqa: E402  (after the patch, which the run reads at its start)

if __name__ == "__main__":
    sys.exit(main())
