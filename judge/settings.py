"""What a run is asked to do: the model, decoding, mode and transport limits, in one typed place."""

from __future__ import annotations

from dataclasses import dataclass

MODES = ("pointwise", "block", "pairwise")
# Strongest first: a server that rejects one is asked with the next, and the same strict parser reads all.
RESPONSE_FORMATS = ("json_schema", "json_object", "text")


@dataclass(frozen=True)
class Settings:
    model: str
    backend: str = "openai"
    temperature: float = 0.0
    max_tokens: int | None = None  # None: enough for the answer schema (see AnswerFormat.max_tokens)
    samples: int = 1
    logprobs: bool = False
    top_logprobs: int = 20
    seed: int = 0
    concurrency: int = 16
    timeout: float = 120.0
    attempts: int = 6  # transport attempts per request (first try included); a timeout gets two at most
    reasks: int = 2  # extra asks when an answer does not parse or is truncated
    response_format: str = "json_schema"
    template: str | None = None
    backoff_max: float = 30.0
    mode: str = "pointwise"  # pointwise | block | pairwise
    swap: bool = True  # pairwise: ask both orders
    where: str = ""  # where the backend answers, for messages (a URL; never a credential)

    def decoding(self) -> dict:
        """The parameters that change an answer, for the judgment's fingerprint."""
        return {"model": self.model, "temperature": self.temperature, "max_tokens": self.max_tokens,
                "samples": self.samples, "logprobs": self.logprobs, "top_logprobs": self.top_logprobs if self.logprobs
                else None, "seed": self.seed, "response_format": self.response_format, "mode": self.mode,
                "swap": self.swap if self.mode == "pairwise" else None}
