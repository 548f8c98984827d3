"""What a judging run is asked to do, as one typed object: `RunOptions`.

Every way in builds one: the CLI from its flags (judge/cli.py), `judge.score`/`judge.compare` from their keyword
arguments (judge/api.py), the audit's probes from the audited run's settings. Types, choices and ranges are checked
here, once, with the flag's name in the message (`--concurrency must be at least 1, got 0`), whichever way the value
came in. `resolved()` fills in what depends on the backend and the environment ($JUDGE_BASE_URLS): the backends and
transports read a resolved `RunOptions` and never change it.
"""

from __future__ import annotations

import difflib
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypedDict

from pydantic import BaseModel, ConfigDict, StrictBool, ValidationError, field_validator, model_validator

from judge.errors import JudgeError

Backend = Literal["local", "openai", "vllm"]
DEFAULT_CONCURRENCY = {"vllm": 256}  # the in-process engine batches the requests in flight
DEFAULT_TIMEOUT = {"openai": 120.0}  # the local and vllm backends' long answers on a CPU take minutes: 600


class RunOptions(BaseModel):
    """The options of `judge score`, `judge compare` and `judge qualify`: each field is the flag of the same name
    (underscored), with the same default. See `judge score --help` for what each does."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # what to judge, and where the judgments go
    command: Literal["score", "compare", "qualify"] = "score"
    rubric: str
    input: str | None = None
    output: str | None = None
    criteria: list[str] | None = None
    template: str | None = None
    redo_changed: StrictBool = False
    mode: Literal["pointwise", "block"] = "pointwise"
    swap: StrictBool = True  # compare: ask both orders
    # the model and how to reach it
    backend: Backend | None = None
    model: str | None = None
    base_url: list[str] | None = None
    api_key_env: str = "OPENAI_API_KEY"
    client: Literal["auto", "sdk", "aiohttp"] = "auto"
    concurrency: int | None = None
    timeout: float | None = None
    # decoding
    temperature: float | None = None
    max_tokens: int | None = None
    seed: int = 0
    samples: int = 1
    logprobs: StrictBool = False
    response_format: Literal["json_schema", "json_object", "text"] = "json_schema"
    # the answer cache
    cache: str | None = None
    no_cache: StrictBool = False
    refresh: StrictBool = False
    progress: StrictBool = True
    # the in-process vLLM engine
    tensor_parallel_size: int = 1
    max_model_len: int | None = None
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    gpu_memory_utilization: float | None = None
    # what the tokens cost: a price table given by the user (judge/prices.py), never fetched
    prices: str | None = None
    # batch transports
    batch: StrictBool = False
    batch_dir: str | None = None
    shards: int | None = None
    # the plan only, no model called (judge/dry_run.py); the batch rounds run on a Ray cluster
    # (judge/backends/ray_data.py)
    dry_run: StrictBool = False
    executor: Literal["online", "ray"] = "online"
    ray_address: str | None = None
    # filled by resolved(): the servers from $JUDGE_BASE_URLS or $OPENAI_BASE_URL when --base-url is not given
    urls_from_env: list[str] | None = None

    def __init__(self, **values: Any):
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise JudgeError(_message(exc)) from None

    @model_validator(mode="before")
    @classmethod
    def _paths_as_text(cls, values: Any) -> Any:
        if isinstance(values, dict):
            values = {k: str(v) if isinstance(v, os.PathLike) else v for k, v in values.items()}
        return values

    @field_validator("criteria", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        """"a,b" as well as ["a", "b"], each id once; None means all of the rubric's."""
        return criteria_ids(value)

    @field_validator("base_url", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, (str, os.PathLike)) else value

    @model_validator(mode="after")
    def _in_range(self) -> RunOptions:
        problems = [
            (self.samples < 1, f"--samples must be at least 1, got {self.samples}"),
            (self.concurrency is not None and self.concurrency < 1,
             f"--concurrency must be at least 1, got {self.concurrency}"),
            (self.timeout is not None and not self.timeout > 0,
             f"--timeout must be more than 0 seconds, got {self.timeout or 0:g}"),
            (self.max_tokens is not None and self.max_tokens < 1,
             f"--max-tokens must be at least 1, got {self.max_tokens}"),
            (self.temperature is not None and not 0 <= self.temperature <= 2,
             f"--temperature must be between 0 and 2, got {self.temperature or 0:g}"),
            (self.tensor_parallel_size < 1,
             f"--tensor-parallel-size must be at least 1, got {self.tensor_parallel_size}"),
            (self.max_model_len is not None and self.max_model_len < 1,
             f"--max-model-len must be at least 1 token, got {self.max_model_len}"),
            (self.gpu_memory_utilization is not None and not 0 < self.gpu_memory_utilization <= 1,
             "--gpu-memory-utilization must be a fraction above 0 and at most 1, got "
             f"{self.gpu_memory_utilization or 0:g}"),
            (self.refresh and self.no_cache,
             "--refresh writes fresh answers to the cache that --no-cache turns off: give one of them"),
            (self.batch and self.batch_dir is not None,
             "--batch sends to a provider's Batch API and --batch-dir writes files for a runner: choose one"),
            (self.shards is not None and self.batch_dir is None and self.executor != "ray",
             "--shards splits the files of --batch-dir: add --batch-dir DIR, or drop --shards"),
            (self.ray_address is not None and self.executor != "ray",
             "--ray-address names the Ray cluster of --executor ray: add --executor ray, or drop --ray-address"),
            (self.executor == "ray" and self.batch,
             "--executor ray runs the batch rounds on Ray, --batch sends them to a provider's Batch API: choose one"),
            (self.shards is not None and self.shards < 1, f"--shards must be at least 1, got {self.shards}"),
            (self.command != "compare" and not self.swap, "--no-swap is for `judge compare`: a score has no order"),
            (self.mode == "block" and self.logprobs,
             "--logprobs needs --mode pointwise: a block answer holds many score tokens"),
        ]
        for bad, message in problems:
            if bad:
                raise JudgeError(message)
        for url in self.base_url or []:
            check_url(url, f"--base-url {url}")
        return self

    # -- what the run derives from them ---------------------------------------------------------------------------
    def resolved(self) -> RunOptions:
        """These options with what depends on the backend and the environment filled in: the backend (a server URL
        given for this tool means `openai`, else the embedded `local`), concurrency, timeout and the servers of
        $JUDGE_BASE_URLS. Contradictory or meaningless combinations are refused here, before anything starts."""
        env = os.environ.get("JUDGE_BASE_URLS")
        from_env = env_urls(env) if env is not None and not self.base_url else None
        openai_env = comma_list(os.environ.get("OPENAI_BASE_URL"))
        backend = self.backend
        if backend is None:
            # A URL given for this tool (the flag, or $JUDGE_BASE_URLS) means a server; $OPENAI_BASE_URL alone may
            # be set for other tools, so it does not replace the zero-setup default, but it is not ignored silently.
            backend = "openai" if self.base_url or from_env else "local"
            if backend == "local" and openai_env:
                print("note: $OPENAI_BASE_URL is set, but without --backend openai the embedded model judges",
                      file=sys.stderr)
        elif backend == "local" and self.base_url:
            raise JudgeError("--base-url names a server, but --backend local starts the embedded one: "
                             "use --backend openai with --base-url, or drop --base-url")
        if backend == "openai" and not (self.base_url or from_env):
            for url in openai_env or []:  # the servers asked: said before anything starts, never with a password
                check_url(url, f"$OPENAI_BASE_URL={url}")
        batch_dir = self.batch_dir
        if self.executor == "ray" and batch_dir is None and self.output:  # beside the output, for a rerun to resume
            batch_dir = f"{self.output}.ray-batches"
        return self.model_copy(update={
            "backend": backend,
            "batch_dir": batch_dir,
            "concurrency": self.concurrency or DEFAULT_CONCURRENCY.get(backend, 16),
            "timeout": self.timeout or DEFAULT_TIMEOUT.get(backend, 600.0),
            "urls_from_env": from_env or openai_env,
        })

    @property
    def servers(self) -> Sequence[str | None]:
        """The server URLs to ask (None: the provider's default, the OpenAI API)."""
        return self.base_url or self.urls_from_env or [None]

    @property
    def sampling_temperature(self) -> float:
        """--temperature as given, else 0 for one sample and 1.0 for several (re-asks must be able to differ)."""
        return self.temperature if self.temperature is not None else (0.0 if self.samples == 1 else 1.0)

    @property
    def batched(self) -> bool:
        return self.batch or self.batch_dir is not None or self.executor == "ray"


class RunKwargs(TypedDict, total=False):
    """The run options `judge.score` and `judge.compare` take as keywords (`**options: Unpack[ScoreKwargs]`): each
    is the `RunOptions` field of the same name, with its default and checks, and the flag of `judge score --help`
    (underscored; `progress=False` is --no-progress). tests/test_run_api.py holds the four in step: the fields, these
    keys, the flags and their defaults."""

    criteria: str | list[str] | None  # "a,b" or ["a", "b"]; None: every criterion of the rubric
    template: str | Path | None
    redo_changed: bool
    backend: Backend | None
    model: str | None
    base_url: str | list[str] | None
    api_key_env: str
    client: Literal["auto", "sdk", "aiohttp"]
    concurrency: int | None
    timeout: float | None
    temperature: float | None
    max_tokens: int | None
    seed: int
    samples: int
    logprobs: bool
    response_format: Literal["json_schema", "json_object", "text"]
    cache: str | Path | None
    no_cache: bool
    refresh: bool
    progress: bool
    tensor_parallel_size: int
    max_model_len: int | None
    dtype: Literal["auto", "float32", "bfloat16", "float16"]
    gpu_memory_utilization: float | None
    prices: str | Path | None
    batch: bool
    batch_dir: str | Path | None
    shards: int | None
    dry_run: bool
    executor: Literal["online", "ray"]
    ray_address: str | None


class ScoreKwargs(RunKwargs, total=False):
    """`judge.score`'s keywords: the run options and --mode."""

    mode: Literal["pointwise", "block"]


class CompareKwargs(RunKwargs, total=False):
    """`judge.compare`'s keywords: the run options and `swap` (False: --no-swap)."""

    swap: bool


def unknown_keywords(given: Mapping[str, object], allowed, verb: str) -> None:
    """Refuse a keyword `verb` does not take, naming the closest one it does (a JudgeError, not Python's TypeError)."""
    for name in given:
        if name not in allowed:
            close = difflib.get_close_matches(name, list(allowed), n=1)
            raise JudgeError(f"{verb}() got an unknown option {name!r}" + (f"; did you mean {close[0]}?" if close
                                                                            else ""))


def criteria_ids(value: Any) -> Any:
    """--criteria as a list of ids, each once, in the order given (`a,a` judges `a` once: one line per judgment);
    None (the flag left out) means every criterion. A blank value is refused: it is a slip (an empty shell
    variable), not a request for all of them."""
    if value is None:
        return None
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        return value  # pydantic says what is wrong with it
    ids = [v.strip() for v in value if v.strip()]
    if not ids:
        raise JudgeError("--criteria is empty: give criterion ids separated by commas (e.g. --criteria "
                         "coherence,fluency), or leave --criteria out to judge every criterion")
    return list(dict.fromkeys(ids))


def comma_list(value: str | None) -> list[str] | None:
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


def shown_url(url: str) -> str:
    """A URL as it may be printed: credentials written into it (`user:secret@`) masked."""
    from judge.secrets import MASK

    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority, slash, path = rest.partition("/")
    if "@" not in authority:
        return url
    return f"{scheme}://{MASK}@{authority.rpartition('@')[2]}{slash}{path}"


def check_url(url: str, what: str) -> None:
    """Refuse what is not a server URL (`what` names the flag; the URL is shown with any credentials masked)."""
    from urllib.parse import urlsplit

    what = what.replace(url, shown_url(url))
    try:
        parts = urlsplit(url)
        _ = parts.port  # a port that is not a number is refused here, not by the HTTP library mid-run
    except ValueError as exc:
        raise JudgeError(f"{what}: not a server URL ({exc}); give it as http://HOST:PORT/v1 (or https://...)") from None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise JudgeError(f"{what}: not a server URL; give it as http://HOST:PORT/v1 (or https://...)")


def env_urls(value: str) -> list[str]:
    """$JUDGE_BASE_URLS, comma-separated; blank (separators and spaces only), another separator or a bad URL is an
    error naming the value: a blank one must not fall back to the hosted API."""
    what = f"$JUDGE_BASE_URLS={','.join(map(shown_url, value.split(',')))!r}"
    urls = comma_list(value)
    if not urls:
        raise JudgeError(f"{what} is blank: set it to server URLs separated by commas, or unset it")
    if any(";" in url or any(c.isspace() for c in url) for url in urls):
        raise JudgeError(f"{what}: separate the URLs with commas (e.g. http://a:8000/v1,http://b:8000/v1)")
    for url in urls:
        check_url(url, what)
    return urls


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _message(exc: ValidationError) -> str:
    """The first problem pydantic found, said as the CLI says it: the flag, what it must be, what was given."""
    error = exc.errors()[0]
    name = str(error["loc"][0]) if error["loc"] else ""
    given, kind = error.get("input"), error["type"]
    if kind == "extra_forbidden":
        close = difflib.get_close_matches(name, list(RunOptions.model_fields), n=1)
        return f"unknown option {name!r}" + (f"; did you mean {close[0]}?" if close else "")
    if kind == "missing":
        return f"{_flag(name)} is required"
    flag = _flag(name)
    if kind.startswith("bool"):
        return f"{flag} is a switch: give True or False, got {given!r}"
    if kind == "literal_error":
        choices = error["ctx"]["expected"].replace("'", "").replace(" or ", ", ")
        return f"{flag} must be one of {choices}, got {given!r}"
    if kind.startswith("int"):
        return f"{flag} must be a whole number, got {given!r}"
    if kind.startswith("float"):
        return f"{flag} must be a number, got {given!r}"
    if kind.startswith(("string", "list")):
        return f"{flag} must be {'text' if kind.startswith('string') else 'a list'}, got {given!r}"
    return f"{flag}: {error['msg']}, got {given!r}"

