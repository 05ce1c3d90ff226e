"""Build llama.cpp's ``llama-server`` once, from PyPI, and cache the binary.

No PyPI package ships a usable prebuilt ``llama-server``
(``../shared/reference/llama-cpp-server.md``), so specdec builds one from the
upstream llama.cpp source that the ``llama-cpp-python`` sdist vendors under
``vendor/llama.cpp``:

1. ``pip download --no-deps --no-binary :all: llama-cpp-python==LLAMA_CPP_PYTHON``
   (the only network access: PyPI);
2. CMake configures the server target only, statically linked, without the web
   UI (``LLAMA_USE_PREBUILT_UI=OFF``: the default downloads one) and without
   OpenSSL; ``GGML_NATIVE=ON``, so the binary is for the CPU it was built on;
3. ``cmake --build --target llama-server llama-quantize``: the server, and the
   source's quantizer, which makes the 8-bit GGUF of the compatibility stage's
   quantization cells (issue 22; ``quant.py``).

The results, binaries of about 15 MB that need only libgomp and libstdc++,
go to ``<cache>/llama-server/<version>-<cpu key>/`` with a ``build.json``
beside them (sdist version, targets, build seconds, compiler, when), and the
source's Python converter (``convert_hf_to_gguf.py`` with the ``conversion``
and ``gguf-py`` folders of the same commit) under ``py/``. A cache made before
``llama-quantize`` was a target keeps its server: ``build_llama_quantize``
then builds the quantizer alone, from the same sdist and flags, and records
its own time in ``llama-quantize.json``. The
cache key holds the CPU's flags because of ``GGML_NATIVE``: a cache shared
between machines never hands a binary to a CPU it may not run on. A file lock
makes concurrent callers (two test workers, a test and ``make``) wait for one
build instead of building twice; every later call returns the cached binary at
once. CMake comes from ``PATH``, or from the ``cmake`` package on PyPI when
``PATH`` has none.

``specdec engine build llama.cpp`` (and ``make llama-server``) run it; the
tests' fixture calls the same function.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from specdec.errors import EngineError
from specdec.model import cache_root

__all__ = [
    "LLAMA_CPP_PYTHON",
    "CMAKE_FLAGS",
    "BuiltServer",
    "build_llama_quantize",
    "build_llama_server",
    "cached_llama_quantize",
    "cached_llama_server",
    "converter_script",
]

log = logging.getLogger("specdec.engines.llama_cpp.build")

#: The llama-cpp-python sdist whose vendored llama.cpp is built (upstream commit 0c1e570).
LLAMA_CPP_PYTHON = "0.3.36"

#: Compiler flags that keep Intel AMX out of a native build: on a CPU with AMX (amx_tile,
#: amx_int8, amx_bf16 in /proc/cpuinfo, as this project's machines have had since 2026-12-02),
#: a GGML_NATIVE build of 0.3.36 segfaults while loading the model (exit -11 right after
#: "llama threadpool init"), seen on the bare binary as well as under specdec.
NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"

#: CMake configuration: the server only, static, no web UI download, no OpenSSL, no AMX.
CMAKE_FLAGS = (
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_CURL=OFF",
    "-DGGML_NATIVE=ON",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DCMAKE_BUILD_TYPE=Release",
    f"-DCMAKE_C_FLAGS={NO_AMX}",
    f"-DCMAKE_CXX_FLAGS={NO_AMX}",
)

BINARY = "llama-server"
QUANTIZE = "llama-quantize"
#: What one build makes: the server and the quantizer, in one ``cmake --build``.
TARGETS = (BINARY, QUANTIZE)
RECORD = "build.json"
#: The record of a quantizer built alone, for a cache whose server was built before it was a target.
QUANTIZE_RECORD = "llama-quantize.json"
#: The source's Python converter and what it imports, copied under ``py/`` of the cache.
PY_TOOLS = ("convert_hf_to_gguf.py", "conversion", "gguf-py")
PY_DIR = "py"


@dataclass(frozen=True)
class BuiltServer:
    """A built binary (the server, or the quantizer) and the build that made it."""

    path: Path
    built: bool  # False when the cached binary was reused
    seconds: float  # the build's seconds (the one that made the cached binary, when reused)
    record: dict[str, Any]


def _cpu_key() -> str:
    """A short key for the CPU features a GGML_NATIVE build depends on."""
    flags = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                flags = " ".join(sorted(line.split(":", 1)[1].split()))
                break
    except OSError:
        pass
    machine = os.uname().machine
    return f"{machine}-{hashlib.sha256(flags.encode()).hexdigest()[:10]}"


def _cache_dir(cache: Path | None) -> Path:
    """One binary per source version, CPU features and build flags (a change of flags builds anew)."""
    flags = hashlib.sha256("\0".join(CMAKE_FLAGS).encode()).hexdigest()[:6]
    return (cache or cache_root()) / "llama-server" / f"{LLAMA_CPP_PYTHON}-{_cpu_key()}-{flags}"


def cached_llama_server(cache: Path | None = None) -> Path | None:
    """The cached binary, or None when it was never built on this machine."""
    return _cached(cache, BINARY)


def cached_llama_quantize(cache: Path | None = None) -> Path | None:
    """The cached ``llama-quantize`` with the source's converter beside it, or None."""
    return _cached(cache, QUANTIZE) if converter_script(cache) is not None else None


def converter_script(cache: Path | None = None) -> Path | None:
    """The cached ``convert_hf_to_gguf.py`` of the built source, or None."""
    path = _cache_dir(cache) / PY_DIR / PY_TOOLS[0]
    return path if path.is_file() else None


def _cached(cache: Path | None, name: str) -> Path | None:
    path = _cache_dir(cache) / name
    return path if path.is_file() and os.access(path, os.X_OK) else None


def _cmake() -> list[str]:
    found = shutil.which("cmake")
    if found:
        return [found]
    venv_cmake = Path(sys.executable).with_name("cmake")
    if not venv_cmake.exists():
        log.info("no cmake on PATH: installing the cmake package from PyPI into %s", sys.prefix)
        _run([sys.executable, "-m", "pip", "install", "-q", "cmake"], "pip install cmake")
    return [str(venv_cmake)]


def _run(cmd: list[str], what: str, log_file: IO[str] | None = None) -> None:
    try:
        proc = subprocess.run(cmd, stdout=log_file or subprocess.PIPE, stderr=subprocess.STDOUT, text=log_file is None)
    except OSError as exc:
        raise EngineError(f"llama-server build: {what} could not start: {exc}") from None
    if proc.returncode != 0:
        tail = proc.stdout[-3000:] if log_file is None else f"see {log_file.name}"
        raise EngineError(f"llama-server build: {what} failed with exit code {proc.returncode}:\n{tail}")


def _sdist(work: Path, log_file: IO[str] | None) -> Path:
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "--no-binary",
            ":all:",
            "-d",
            str(work),
            f"llama-cpp-python=={LLAMA_CPP_PYTHON}",
        ],
        "pip download of the llama-cpp-python sdist",
        log_file,
    )
    archives = sorted(work.glob("llama_cpp_python-*.tar.gz")) + sorted(work.glob("llama-cpp-python-*.tar.gz"))
    if not archives:
        raise EngineError(f"llama-server build: pip download left no llama-cpp-python sdist in {work}")
    with tarfile.open(archives[0]) as tar:
        tar.extractall(work / "src", filter="data")
    sources = [p for p in (work / "src").glob("*/vendor/llama.cpp") if (p / "CMakeLists.txt").is_file()]
    if not sources:
        raise EngineError(f"llama-server build: {archives[0].name} has no vendor/llama.cpp/CMakeLists.txt")
    return sources[0]


def build_llama_server(cache: Path | None = None, jobs: int | None = None) -> BuiltServer:
    """Return the cached ``llama-server``, building it (with ``llama-quantize``) first when this machine has none."""
    target = _cache_dir(cache)
    target.mkdir(parents=True, exist_ok=True)
    with open(target / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second caller waits here for the first one's build
        found = cached_llama_server(cache)
        if found is not None:
            record = _read_record(target, RECORD)
            return BuiltServer(found, False, float(record.get("seconds", 0.0)), record)
        record = _build(target, TARGETS, RECORD, jobs)
        return BuiltServer(target / BINARY, True, record["seconds"], record)


def build_llama_quantize(cache: Path | None = None, jobs: int | None = None) -> BuiltServer:
    """Return the cached ``llama-quantize`` (and the converter beside it): built with the server
    when neither is cached, alone when a server built before it was a target is."""
    if cached_llama_server(cache) is None:
        build_llama_server(cache, jobs)
    target = _cache_dir(cache)
    with open(target / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = cached_llama_quantize(cache)
        if found is not None:
            record = _read_record(target, QUANTIZE_RECORD) or _read_record(target, RECORD)
            return BuiltServer(found, False, float(record.get("seconds", 0.0)), record)
        record = _build(target, (QUANTIZE,), QUANTIZE_RECORD, jobs)
        return BuiltServer(target / QUANTIZE, True, record["seconds"], record)


def _build(target: Path, targets: tuple[str, ...], record_name: str, jobs: int | None) -> dict[str, Any]:
    """Download the sdist, build ``targets`` in one ``cmake --build``, copy them and the converter
    into ``target`` (each replaced whole) and write the build's record. The caller holds the lock."""
    started = time.monotonic()
    log_path = target / f"build-{'-'.join(targets)}.log" if targets != TARGETS else target / "build.log"
    with tempfile.TemporaryDirectory(prefix="specdec-llama-build-") as tmp, log_path.open("w") as log_file:
        work = Path(tmp)
        log.info(
            "building %s from llama-cpp-python %s (minutes, once per machine); log: %s",
            " and ".join(targets),
            LLAMA_CPP_PYTHON,
            log_path,
        )
        source = _sdist(work, log_file)
        cmake = _cmake()
        build_dir = work / "build"
        _run([*cmake, "-S", str(source), "-B", str(build_dir), *CMAKE_FLAGS], "cmake configure", log_file)
        _run(
            [*cmake, "--build", str(build_dir), "--target", *targets, "-j", str(jobs or os.cpu_count() or 2)],
            "cmake build",
            log_file,
        )
        for name in targets:
            built = next((p for p in (build_dir / "bin" / name, build_dir / name) if p.is_file()), None)
            if built is None:
                raise EngineError(f"llama.cpp build: no {name} under {build_dir}; see {log_path}")
            tmp_bin = target / f".{name}.tmp"
            shutil.copy2(built, tmp_bin)
            os.replace(tmp_bin, target / name)  # a reader sees no binary or the whole one
        if QUANTIZE in targets:
            _copy_converter(source, target)
    seconds = time.monotonic() - started
    record = {
        "llama_cpp_python": LLAMA_CPP_PYTHON,
        "targets": list(targets),
        "seconds": round(seconds, 1),
        "cpu_key": _cpu_key(),
        "cmake_flags": list(CMAKE_FLAGS),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "compiler": _compiler(),
    }
    (target / record_name).write_text(json.dumps(record, indent=2) + "\n")
    log.info("built %s in %.0f s: %s", " and ".join(targets), seconds, target)
    return record


def _copy_converter(source: Path, target: Path) -> None:
    """The source's ``convert_hf_to_gguf.py`` and what it imports, under ``target/py`` (replaced whole)."""
    tmp = target / f".{PY_DIR}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    for name in PY_TOOLS:
        src = source / name
        if not src.exists():
            raise EngineError(f"llama.cpp build: the source has no {name} (convert_hf_to_gguf.py needs it)")
        if src.is_dir():
            shutil.copytree(src, tmp / name)
        else:
            shutil.copy2(src, tmp / name)
    shutil.rmtree(target / PY_DIR, ignore_errors=True)
    os.replace(tmp, target / PY_DIR)


def _read_record(target: Path, name: str) -> dict[str, Any]:
    try:
        record = json.loads((target / name).read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _compiler() -> str:
    cc = shutil.which("c++") or shutil.which("g++") or ""
    if not cc:
        return ""
    try:
        return subprocess.run([cc, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    except (OSError, IndexError):
        return cc
