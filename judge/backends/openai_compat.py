"""Any OpenAI-compatible chat endpoint: hosted APIs, `vllm serve`, the llama.cpp server.

Two clients speak the same protocol and raise the same exceptions:
- `SDKClient`, the official `AsyncOpenAI` SDK: the supported way to reach hosted APIs (https).
- `HTTPClient`, aiohttp + json: for self-hosted servers (http), where the SDK's per-call CPU (request and
  response models, httpx) caps throughput below what a local GPU server can serve (see
  benchmarks/engine_throughput.py for the measured difference).
`--client auto` picks the SDK for https URLs and aiohttp for http ones. The SDK's own retries are off: the
engine retries with tenacity so that every failure is counted and bounded in one place.
"""

from __future__ import annotations

import email.utils
import json
import time
from urllib.parse import urlparse

from judge.backends import ChatClient, Completion, Served
from judge.cache import Request
from judge.errors import BackendError, ResponseFormatUnsupported, RetryableError
from judge.secrets import Redactor


def _retry_after(headers) -> float | None:
    """Seconds to wait from `retry-after-ms` or `Retry-After` (seconds or an HTTP date)."""
    if headers is None:
        return None
    if (ms := headers.get("retry-after-ms")) is not None:
        try:
            return float(ms) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value) if value else None
        return max(0.0, parsed.timestamp() - time.time()) if parsed else None


def _status_error(status: int, text: str, headers, redact: Redactor) -> Exception:
    # Scrubbed here, where the body enters: a server may quote the credential it refused, and an exception's
    # message travels into tracebacks and chained errors before anyone else can clean it.
    snippet = redact(" ".join(text.split())[:300])
    message = f"HTTP {status}: {snippet}"
    if status == 429 or status >= 500:
        return RetryableError(message, status=status, retry_after=_retry_after(headers))
    lowered = text.lower()
    if status in (400, 422) and ("response_format" in lowered or "json_schema" in lowered):
        return ResponseFormatUnsupported(message, status=status)
    return BackendError(message, status=status)


def cached_tokens(data: dict) -> int | None:
    """Prompt tokens served from the server's prefix cache: OpenAI's `usage.prompt_tokens_details.cached_tokens`
    (hosted APIs, vLLM with --enable-prompt-tokens-details), else llama.cpp's `timings.cache_n`; None if unsaid."""
    details = (data.get("usage") or {}).get("prompt_tokens_details") or {}
    if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
        return details["cached_tokens"]
    timings = data.get("timings") or {}
    return timings.get("cache_n") if isinstance(timings, dict) and isinstance(timings.get("cache_n"), int) else None


def served(data: dict, engine: dict | None = None) -> Served:
    """What the server says about itself: the model it answered with (hosted APIs name a dated version) and its
    system_fingerprint; `engine` adds what a local engine knows (its version, the model file's digest)."""
    return {"model": data.get("model"), "system_fingerprint": data.get("system_fingerprint"),
            "engine": None, "model_digest": None, **(engine or {})}


def _completion(data: dict, engine: dict | None = None) -> Completion:
    try:
        choice = data["choices"][0]
        logprobs = choice.get("logprobs") or {}
        usage = data.get("usage") or {}
        return {
            "content": choice["message"].get("content") or "",
            "finish_reason": choice.get("finish_reason"),
            "logprobs": logprobs.get("content"),
            "usage": {
                "prompt_tokens": usage.get("prompt_tokens", 0),
                "completion_tokens": usage.get("completion_tokens", 0),
                "cached_tokens": cached_tokens(data),
            },
            "served": served(data, engine),
        }
    except (KeyError, IndexError, TypeError, AttributeError):
        # A 200 with a body that is not a chat completion: a broken proxy, a server mid-restart.
        raise RetryableError(f"malformed completion from server: {str(data)[:200]}") from None


class HTTPClient:
    name = "aiohttp"
    engine: dict | None = None  # set by a backend that starts the server itself (see `served`)

    def __init__(self, base_url: str, api_key: str | None, concurrency: int):
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._redact = Redactor(api_key)
        self._session = None  # an aiohttp.ClientSession, opened (and aiohttp imported) at the first request
        self._concurrency = concurrency

    def _open(self):
        if self._session is None:
            import aiohttp  # here, not at the top: batch transports use this module's parsing without HTTP

            connector = aiohttp.TCPConnector(limit=self._concurrency, ttl_dns_cache=300)
            self._session = aiohttp.ClientSession(connector=connector, headers=self._headers)
        return self._session

    async def complete(self, body: dict, timeout: float) -> Completion:
        import aiohttp

        session = self._open()
        try:
            async with session.post(
                self._url, data=body.text.encode("utf-8") if isinstance(body, Request) else json.dumps(body),
                timeout=aiohttp.ClientTimeout(total=timeout)
            ) as response:
                text = await response.text()
                if response.status != 200:
                    raise _status_error(response.status, text, response.headers, self._redact)
        except TimeoutError:
            raise RetryableError(f"no answer within {timeout:g} s", kind="timeout") from None
        except aiohttp.ClientError as exc:
            raise RetryableError(f"connection failed: {exc}", kind="connection") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            raise RetryableError(f"server answered 200 with a body that is not JSON: {text[:200]!r}") from None
        return _completion(data, self.engine)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


class SDKClient:
    name = "openai-sdk"
    engine: dict | None = None

    def __init__(self, base_url: str | None, api_key: str | None):
        self._redact = Redactor(api_key)
        import openai  # half a second of imports: only when the SDK is the client

        self._openai = openai
        self._client = openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key or "not-needed", max_retries=0
        )

    async def complete(self, body: dict, timeout: float) -> Completion:
        openai = self._openai
        try:
            # The raw response skips building the SDK's response models; we read the few fields we need.
            raw = await self._client.chat.completions.with_raw_response.create(**body, timeout=timeout)
        except openai.APITimeoutError:
            raise RetryableError(f"no answer within {timeout:g} s", kind="timeout") from None
        except openai.APIConnectionError as exc:
            raise RetryableError(f"connection failed: {exc}", kind="connection") from None
        except openai.APIStatusError as exc:
            raise _status_error(exc.status_code, exc.response.text, exc.response.headers, self._redact) from None
        try:
            data = json.loads(raw.text)
        except json.JSONDecodeError:
            raise RetryableError(f"server answered 200 with a body that is not JSON: {raw.text[:200]!r}") from None
        return _completion(data, self.engine)

    async def aclose(self) -> None:
        await self._client.close()


def open_client(kind: str, base_url: str | None, api_key: str | None, concurrency: int) -> ChatClient:
    """kind: 'sdk', 'aiohttp', or 'auto' (SDK for https and the default hosted URL, aiohttp for http)."""
    credentials = bool(base_url) and "@" in urlparse(base_url).netloc  # user:password@ in the URL
    if kind == "auto":  # the SDK sends a URL's credentials; aiohttp refuses them beside the key's header
        kind = "aiohttp" if base_url and urlparse(base_url).scheme == "http" and not credentials else "sdk"
    if kind == "aiohttp":
        if not base_url:
            raise BackendError("--client aiohttp needs --base-url (or OPENAI_BASE_URL)")
        if credentials:
            raise BackendError(f"--client aiohttp: {Redactor()(base_url)} holds a user name or password, which "
                               "aiohttp cannot send beside the API key's bearer header: use --client sdk (the "
                               "default for such a URL), or give the URL without them")
        return HTTPClient(base_url, api_key, concurrency)
    if kind == "sdk":
        return SDKClient(base_url, api_key)
    raise BackendError(f"unknown client {kind!r}: choose auto, sdk or aiohttp")
