"""Model backends. Every backend answers one chat request as a plain dict:

    {"content": str, "finish_reason": str, "logprobs": [token dicts] | None,
     "usage": {"prompt_tokens": int, "completion_tokens": int}}

and raises `RetryableError` (429, 5xx, timeout, connection), `ResponseFormatUnsupported` or `BackendError`.
"""

from judge.backends.openai_compat import ChatClient, open_client

__all__ = ["ChatClient", "open_client"]
