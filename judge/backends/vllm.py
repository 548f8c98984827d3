"""The offline vLLM engine (optional extra `vllm`, GPU only).

Not implemented yet: this is the seam. A vLLM deployment works today through `vllm serve MODEL` and
`judge score --backend openai --base-url http://HOST:8000/v1 --model MODEL`, which uses vLLM's
OpenAI-compatible server with structured outputs and prefix caching.
"""

from judge.errors import BackendError


def unavailable() -> BackendError:
    return BackendError(
        "--backend vllm (the in-process engine) is not available yet; run `vllm serve MODEL` and use "
        "--backend openai --base-url http://HOST:8000/v1 --model MODEL"
    )
