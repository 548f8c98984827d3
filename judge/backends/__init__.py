"""Model backends. Every backend answers one chat request (an OpenAI chat-completions body) as a `Completion`
(below: the text, why it stopped, the token log-probabilities, the usage and what served it), and raises
`RetryableError` (429, 5xx, timeout, connection), `ResponseFormatUnsupported` or `BackendError`.
A backend is a `ChatClient`: `await complete(body, timeout)` and `await aclose()`. The engine's asking layer
(judge/asking.py) owns caching, retries and concurrency, so a backend only transports one request; a backend that
runs whole batches (the in-process vLLM engine) gathers the requests in flight into batches behind this same call.

Imports are lazy: choosing a backend must not import the HTTP stack, torch or vLLM before it is needed.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypedDict

from judge.errors import BackendError, JudgeError

if TYPE_CHECKING:
    from judge.options import RunOptions


# The prefix group of the request being asked: "(criterion, dialogue)", set by the engine for each unit of work.
# Batch transports keep a group's requests in one shard, so a node prefills each dialogue once.
PREFIX_GROUP: contextvars.ContextVar[str | None] = contextvars.ContextVar("prefix_group", default=None)


class Usage(TypedDict):
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int | None  # the server's prefix-cache hits, where it says


class Served(TypedDict, total=False):
    """What answered, as the judgment's provenance records it (never a credential); empty when nothing is known
    (a dry run's made-up answer)."""

    model: str | None
    system_fingerprint: str | None
    engine: str | None  # a local engine's name and version, when the backend started it
    model_digest: str | None


class Completion(TypedDict):
    """What every backend's `complete` returns (a plain dict at run time; the asking layer and the cache read it)."""

    content: str
    finish_reason: str | None
    logprobs: list[dict] | None  # one dict per generated token, OpenAI's shape
    usage: Usage
    served: Served


class ChatClient(Protocol):
    name: str

    async def complete(self, body: dict, timeout: float) -> Completion: ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True)
class Opened:
    """A ready backend: the client, the model id written into judgments and cache keys, the backend's name,
    where it answers (for error messages; never a credential), and the requests the run may keep in flight (None:
    the options' --concurrency)."""

    client: ChatClient
    model: str
    backend: str
    where: str
    concurrency: int | None = None


@contextlib.contextmanager
def open_backend(options: RunOptions, identity: str | None = None):
    """Yield an `Opened` backend chosen by resolved run options (judge/options.py); a server it starts lives exactly
    as long as the block. `identity`: the run's identity (judge.run.run_identity), which a batch transport needs.

    With several servers, `--concurrency` bounds each one, and the run may keep the flag's value times the number
    of servers in flight (`Opened.concurrency`).
    """
    # Backends read resolved options (RunOptions.resolved): the backend, concurrency and timeout are filled in.
    assert options.backend is not None and options.concurrency is not None, "open_backend needs resolved options"
    if options.batched:
        with open_batch(options, identity) as opened:
            yield opened
        return
    if options.backend == "vllm":
        from judge.backends.vllm import open_engine

        with open_engine(options) as opened:
            yield opened
        return
    if options.backend == "local":
        from judge.backends import local
        from judge.backends.openai_compat import HTTPClient

        path = local.resolve_model(options.model)
        started = time.monotonic()
        print(f"starting the embedded llama.cpp server with {path.name} ...", file=sys.stderr, flush=True)
        ctx = local.BLOCK_CTX_PER_SLOT if options.mode == "block" else local.CTX_PER_SLOT
        with local.local_server(path, slots=options.concurrency, ctx_per_slot=ctx) as base_url:
            print(f"server ready in {time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)
            local_client = HTTPClient(base_url, None, options.concurrency)  # a local http URL: open_client's aiohttp
            local_client.engine = local.engine_provenance(path)
            yield Opened(local_client, local.model_id(path), "local", "the embedded llama.cpp server")
        return
    from judge.backends.openai_compat import open_client

    if not options.model:
        raise BackendError("--backend openai needs --model (the model name the server serves)")
    api_key = os.environ.get(options.api_key_env)
    urls = options.servers
    if len(urls) == 1:
        client = open_client(options.client, urls[0], api_key, options.concurrency)
        yield Opened(client, options.model, "openai", urls[0] or "the OpenAI API")
        return
    from judge.backends.pool import PoolClient

    named = [url for url in urls if url is not None]  # several servers are always named by their URLs
    if len(set(named)) != len(named):
        raise BackendError(f"--base-url: the same URL is given twice in {', '.join(named)}")
    per_server = options.concurrency
    pool = PoolClient(named, lambda url: open_client(options.client, url, api_key, per_server), per_server)
    yield Opened(pool, options.model, "openai", f"{len(named)} servers ({', '.join(named)})", per_server * len(named))


@contextlib.contextmanager
def open_batch(options: RunOptions, identity: str | None):
    """Yield an `Opened` batch transport for --batch (judge/backends/batch_api.py) or --batch-dir
    (judge/backends/batch_dir.py); refuse bad flags before anything is sent. `identity`: the run's (computed by
    judge/run.py, above this layer), by which the transport names and checks its files."""
    from judge.backends.batch import DIR_CONCURRENCY, public_url
    from judge.secrets import Redactor

    assert options.backend is not None, "open_batch needs resolved options"
    batch_dir, shards = options.batch_dir, options.shards  # their combinations are checked by RunOptions
    flag = "--batch" if options.batch else "--batch-dir"
    if options.executor == "ray" and options.backend == "local":
        raise JudgeError("--executor ray runs on --base-url servers (--backend openai) or loads vLLM in each worker "
                         "(--backend vllm --model M); the embedded model is not run on Ray")
    if options.backend == "local":
        raise JudgeError(f"{flag}: the embedded llama.cpp server has no Batch API and runs no batch files: use "
                         "--backend openai --base-url URL --model M (a provider's Batch API) or --batch-dir DIR "
                         "--backend vllm --model M (files for `vllm run-batch`)")
    if not options.model:
        raise JudgeError(f"{flag} needs --model (the model name the batches ask for)")
    api_key = os.environ.get(options.api_key_env)
    redact = Redactor(api_key)
    if not identity:
        raise JudgeError(f"{flag}: the run's identity was not given to the batch transport (judge.run.run_identity)")
    fingerprint = identity
    progress = options.progress
    if options.executor == "ray":
        from judge.backends.ray_data import Cluster, RayDirClient, ray_module

        ray_module()  # installed, or say how to install it, before any file is written
        sender: dict = {"concurrency": options.concurrency, "timeout": options.timeout}
        if options.backend == "vllm":
            from judge.backends.vllm import check_model

            check_model(options.model)  # on the driver, before a worker loads anything
            sender["engine"] = {name: getattr(options, name) for name in
                                ("model", "dtype", "tensor_parallel_size", "max_model_len", "gpu_memory_utilization")}
            where = f"Ray, each worker running vLLM ({options.model})"
        else:
            sender.update(urls=options.servers, client=options.client, api_key_env=options.api_key_env)
            where = f"Ray, sending to {public_url(options.servers[0], redact)}" + (
                f" and {len(options.servers) - 1} more" if len(options.servers) > 1 else "")
        ray_client = RayDirClient(batch_dir, shards or 4, options.model, fingerprint, options.command, redact,
                                  progress, sender=sender, cluster=Cluster(options.ray_address))
        yield Opened(ray_client, options.model, options.backend, where, DIR_CONCURRENCY)
        return
    if batch_dir:
        from judge.backends.batch_dir import BatchDirClient

        client = BatchDirClient(batch_dir, shards or 1, options.model, fingerprint, options.command, redact, progress)
        yield Opened(client, options.model, options.backend, f"batch files in {batch_dir}", DIR_CONCURRENCY)
        return
    if options.backend != "openai":
        raise JudgeError("--batch: the in-process vLLM engine has no Batch API: write batch files with --batch-dir "
                         "DIR and run them with `vllm run-batch`, or use --backend openai with a provider")
    from judge.backends.batch_api import (
        BatchAPIClient,
        Manifest,
        check_batch_endpoints,
        manifest_path,
        one_run_at_a_time,
    )

    urls = options.servers
    if len(urls) > 1:
        raise JudgeError("--batch sends to one provider: give one --base-url")
    where = public_url(urls[0], redact)  # what is written down and shown: no credentials
    if not options.output:
        raise JudgeError("--batch needs --output: the batch manifest is kept next to it")
    manifest = Manifest(manifest_path(options.output), fingerprint, options.command, options.model, where)
    check_batch_endpoints(urls[0], api_key, where, redact)
    with one_run_at_a_time(manifest.path):
        yield Opened(BatchAPIClient(urls[0], api_key, manifest, redact, progress), options.model, "openai", where,
                     DIR_CONCURRENCY)
