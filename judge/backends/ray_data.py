"""`--executor ray`: the rounds of `--batch-dir` (judge/backends/batch_dir.py) run on a Ray cluster through Ray Data,
round after round, until the plan is done.

Each round's requests are written as the batch-dir shards (whole prefix groups per shard); Ray Data reads the
shard files as a dataset of lines (`read_text`), and `map_batches` sends each batch to the `--base-url` fleet with
the openai backend's own clients (judge/backends/openai_compat.py, several URLs through judge/backends/pool.py),
`--concurrency` requests in flight per worker; with `--backend vllm` each worker loads the model into the
in-process vLLM engine instead (judge/backends/vllm.py, one worker per tensor-parallel group of GPUs). Each answer
comes back to this process as the line `vllm run-batch` writes (`run_batch_record`) and is appended to
`*.out.jsonl` beside its shard as it arrives; the batch-dir reader then records the answers exactly as it records
run-batch's, and the engine's next pass asks what depends on them (the gates' criteria, re-asks, retries: the
asking layer's schema, refusal and retry rules apply to these answers as to any). An interrupted run resumes: an
answer written is never asked again, and the requests of a shard whose answers were cut short (a lost worker,
Ctrl-C) are written into the next round.

Ray is an optional extra: `pip install ".[ray]"`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import IO

from judge.backends.batch import _batch_lines
from judge.backends.batch_dir import BatchDirClient
from judge.errors import BackendError, JudgeError, RetryableError

INSTALL = 'pip install ".[ray]"'
LOCAL_CPUS = 2  # the local cluster started when no address is given
DRIVER_GRACE = 30.0  # seconds a stopped round gets to write what came back before the run leaves the cluster
WORKER_TRIES = 3  # a worker's tries of a request that failed retryably; later failures go back as error lines


def ray_module():
    """`ray`, or JudgeError saying how to install it."""
    try:
        import ray
        import ray.data  # noqa: F401 - Ray Data comes with the `data` extra of ray
    except ImportError:
        raise JudgeError(f"--executor ray needs Ray Data: {INSTALL}") from None
    return ray


def completion_body(completion: dict) -> dict:
    """A `Completion` (judge/backends/__init__.py) as the chat-completion body it was read from: reading it back with
    openai_compat._completion gives the same completion."""
    usage = completion["usage"]
    served = completion.get("served") or {}
    logprobs = completion.get("logprobs")
    return {"object": "chat.completion", "model": served.get("model"),
            "system_fingerprint": served.get("system_fingerprint"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": completion["content"]},
                         "finish_reason": completion["finish_reason"],
                         "logprobs": None if logprobs is None else {"content": logprobs}}],
            "usage": {"prompt_tokens": usage["prompt_tokens"], "completion_tokens": usage["completion_tokens"],
                      "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"],
                      "prompt_tokens_details": None if usage.get("cached_tokens") is None
                      else {"cached_tokens": usage["cached_tokens"]}}}


def run_batch_record(custom_id: str, result) -> dict:
    """One answer line as `vllm run-batch` writes it: the completion, or the error in the shape judge/backends/
    batch.py's `result_of` reads back into the exception the online path raises (an HTTP status with the server's
    text; a timeout or a dropped connection as a retryable error code)."""
    record = {"id": f"ray-{custom_id[:16]}", "custom_id": custom_id}
    if isinstance(result, dict):
        return {**record, "response": {"status_code": 200, "request_id": custom_id[:16],
                                       "body": completion_body(result)}, "error": None}
    status = getattr(result, "status", None)
    message = str(result)
    if status is not None:
        text = message.split(": ", 1)[1] if message.startswith(f"HTTP {status}: ") else message
        return {**record, "response": {"status_code": status, "request_id": custom_id[:16], "body": None},
                "error": text}
    code = "timeout" if getattr(result, "kind", None) == "timeout" else "server_error"
    if not isinstance(result, RetryableError):
        code = "invalid_request"
    return {**record, "response": None, "error": {"code": code, "message": message}}


class Sender:
    """A Ray Data worker (`map_batches`, one per actor): answers each request line of a batch and returns the answer
    lines. With `urls`, through the openai backend's client (several URLs: the pool); with `engine` (--backend
    vllm), through the in-process vLLM engine this actor loads (judge/backends/vllm.py: a body becomes the
    SamplingParams `vllm serve` builds from it, structured output and log-probabilities shaped as the server shapes
    them, so the answers are those of the served path). A retryable failure is tried again a few times here
    (honouring Retry-After); what still fails goes back as an error line, which the next round asks again."""

    def __init__(self, concurrency: int, timeout: float, urls: list[str] | None = None, client: str = "auto",
                 api_key_env: str = "OPENAI_API_KEY", engine: dict | None = None):
        self.timeout = timeout
        self.slots = concurrency
        self._opened = contextlib.ExitStack()  # what the actor holds open for its life: the vLLM engine
        if engine is not None:
            from types import SimpleNamespace

            from judge.backends.vllm import open_engine

            self.client = self._opened.enter_context(open_engine(SimpleNamespace(**engine))).client
        else:
            from judge.backends.openai_compat import open_client

            assert urls, "a Sender needs server URLs or an engine"
            api_key = os.environ.get(api_key_env)
            if len(urls) == 1:
                self.client = open_client(client, urls[0], api_key, concurrency)
            else:
                from judge.backends.pool import PoolClient

                self.client = PoolClient(urls, lambda url: open_client(client, url, api_key, concurrency),
                                         concurrency)
            self.slots = concurrency * len(urls)
        self.loop = asyncio.new_event_loop()

    def __del__(self):
        self._opened.close()

    def __call__(self, batch: dict) -> dict:
        lines = list(batch["text"])
        answers = self.loop.run_until_complete(self._send_all(lines))
        return {"path": list(batch["path"]), "answer": answers}

    async def _send_all(self, lines: list[str]) -> list[str]:
        slot = asyncio.Semaphore(self.slots)

        async def one(line: str) -> str:
            request = json.loads(line)
            async with slot:
                result = await self._send(request["body"])
            return json.dumps(run_batch_record(request["custom_id"], result), ensure_ascii=False)

        return await asyncio.gather(*(one(line) for line in lines))

    async def _send(self, body: dict):
        for attempt in range(1, WORKER_TRIES + 1):
            try:
                return await self.client.complete(body, self.timeout)
            except RetryableError as exc:
                if attempt == WORKER_TRIES or exc.kind == "timeout":
                    return exc
                await asyncio.sleep(min(exc.retry_after if exc.retry_after is not None else 0.5 * 2 ** attempt, 30))
            except BackendError as exc:
                return exc
        raise AssertionError("unreachable")


class Cluster:
    """The Ray cluster of a run: `--ray-address`, else $RAY_ADDRESS, else a local one (started here, stopped at the
    end of the run)."""

    def __init__(self, address: str | None):
        self.address, self.started = address, False

    def connect(self):
        """`ray`, connected (a cluster this process already joined is used as it is)."""
        ray = ray_module()
        if not ray.is_initialized():
            if self.address or os.environ.get("RAY_ADDRESS"):
                ray.init(address=self.address, log_to_driver=False)
            else:
                try:
                    ray.init(num_cpus=LOCAL_CPUS, include_dashboard=False, log_to_driver=False)
                except Exception as exc:  # noqa: BLE001 - Ray gives its raylet 30 s to start; a busy machine: once more
                    if "timed out during startup" not in str(exc):
                        raise
                    ray.shutdown()
                    ray.init(num_cpus=LOCAL_CPUS, include_dashboard=False, log_to_driver=False)
            self.started = True
            import logging

            from ray.data import DataContext

            logging.getLogger("ray.data").setLevel(logging.WARNING)  # its plan and timings: not the run's messages

            DataContext.get_current().enable_progress_bars = False
        return ray

    def stop(self) -> None:
        if self.started:
            import ray

            ray.shutdown()
            self.started = False


class RayDirClient(BatchDirClient):
    """The batch-dir transport whose rounds are run here, on Ray, instead of waiting for a runner."""

    name = "ray"

    def __init__(self, *args, sender: dict, cluster: Cluster, **kwargs):
        super().__init__(*args, **kwargs)
        self.sender, self.cluster = sender, cluster
        self.asked_of_ray = 0  # requests sent through Ray by this run
        self._driver: threading.Thread | None = None  # the round being run
        self._stop = threading.Event()
        self._failure: Exception | None = None

    async def end_pass(self) -> str | None:
        """Commit this pass's shards, run every file still waiting for answers through Ray Data, read the answers
        in, and go on with another pass (None); the engine stops when no question is deferred."""
        self._waiting_files |= self._commit()
        if not self._deferred:
            return None
        waiting = sorted(self._waiting_files, key=lambda n: (self._round_of(self._files[n]), self._files[n].name))
        before = len(self.answers)
        self.cluster.connect()  # here, on the main thread
        # The round runs on a thread the loop polls, so a Ctrl-C (the run's task cancelled) sets `stop`: the
        # driver stops at the next batch, and aclose waits for it before it leaves the cluster.
        self._stop = threading.Event()
        self._driver = threading.Thread(target=self._run, args=([self._files[n] for n in waiting], self._stop),
                                        name="judge-ray-driver", daemon=True)
        self._driver.start()
        try:
            while self._driver.is_alive():
                await asyncio.sleep(0.1)
        except asyncio.CancelledError:
            self._stop.set()
            raise
        if self._failure is not None:
            raise self._failure
        for number in waiting:
            self._read_new(number)
        self._waiting_files, self._deferred = set(), 0
        if len(self.answers) == before:
            raise BackendError(f"the Ray run answered none of the requests of {len(waiting)} batch file(s) in "
                               f"{self.dir}; see the workers' logs (`ray logs`), then run the same command again")
        return None

    def _run(self, paths: list[Path], stop: threading.Event) -> None:
        """The files' requests through Ray Data; each answer appended to FILE.out.jsonl as it arrives, until done
        or `stop`."""
        import ray

        started, count = time.monotonic(), 0
        dataset = ray.data.read_text([str(p) for p in paths], include_paths=True)
        dataset = dataset.map_batches(Sender, fn_constructor_kwargs=self.sender, batch_size=self.sender["concurrency"],
                                      **self._workers(ray, len(paths)))
        handles: dict[str, IO[str]] = {}
        self._failure = None
        try:
            for batch in dataset.iter_batches(batch_size=None, batch_format="numpy"):
                for path, answer in zip(batch["path"], batch["answer"]):
                    handle = handles.get(path)
                    if handle is None:
                        handle = handles[path] = self._out_of(path).open("a", encoding="utf-8")
                    handle.write(answer + "\n")
                    count += 1
                for handle in handles.values():
                    handle.flush()
                self.status.show(f"ray: {count} answers from {len(paths)} batch file(s)", "running")
                if stop.is_set():  # what came back is written; the rest is asked again by the next run
                    break
        except Exception as exc:  # noqa: BLE001 - handed to the loop's thread, which raises it
            self._failure = exc
        finally:
            for handle in handles.values():
                handle.close()
            self.asked_of_ray += count
            self.status.done()
        if self.status.enabled:
            print(f"ray: {count} answers in {time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)

    def _workers(self, ray, files: int) -> dict:
        """How many Sender actors a round gets, and what each holds of the cluster."""
        engine = self.sender.get("engine")
        if engine is None:  # they wait on HTTP: a quarter of a CPU each, at most two, so read tasks find a CPU
            return {"compute": ray.data.ActorPoolStrategy(min_size=1, max_size=min(2, files)), "num_cpus": 0.25}
        # Each actor loads the model: one per tensor-parallel group of GPUs, or a single one on a CPU-only cluster
        # (there the engine's own threads use the cores; a second copy would only compete for them).
        gpus = int(ray.cluster_resources().get("GPU", 0))
        size = engine["tensor_parallel_size"]
        if gpus >= size:
            return {"compute": ray.data.ActorPoolStrategy(size=max(1, min(files, gpus // size))), "num_gpus": size}
        return {"compute": ray.data.ActorPoolStrategy(size=1), "num_cpus": 1}

    def _out_of(self, path: str) -> Path:
        """The answer file of a shard path as Ray reports it (absolute, perhaps with a scheme)."""
        name = Path(path.split("://", 1)[-1]).name
        return self.dir / (name.removesuffix(".jsonl") + ".out.jsonl")

    def _read_new(self, number: int) -> None:
        """Index the answers written for input file `number` (a file of this folder)."""
        inp = self._files[number]
        out = inp.with_name(inp.name.removesuffix(".jsonl") + ".out.jsonl")
        if not out.exists():
            return
        number_out, round_ = self._number(out), self._round_of(inp)
        self._answered_files.add(number)
        for _, offset, record in _batch_lines(out, cut_ok=True):
            self.answers.add(record["custom_id"], round_, number_out, offset)

    async def aclose(self) -> None:
        try:
            await super().aclose()
        finally:
            if self._driver is not None and self._driver.is_alive():
                self._stop.set()
                self._driver.join(DRIVER_GRACE)  # the answers it holds are written before Ray is left
            self.cluster.stop()

    def summary(self) -> str:
        line = super().summary()
        return line.replace("by batch:", "by batch on Ray:", 1) if line else line
