"""Fixtures of the integration tests."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def llama_server_binary():
    """llama-server, built once per machine (``make llama-server``; built here when
    missing); a failure to build fails under CI=true and skips elsewhere."""
    from specdec.engines.llama_cpp.build import build_llama_server
    from specdec.errors import EngineError

    try:
        return build_llama_server().path
    except EngineError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"llama-server could not be built: {exc}")
        pytest.skip(f"llama-server could not be built here: {exc}")
