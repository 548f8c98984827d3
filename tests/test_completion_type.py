"""Every backend's `complete` returns a `judge.backends.Completion`: the keys the type writes down are the keys the
OpenAI-compatible client (online and through batch answers) builds, and their types hold on a real answer's shape."""

import typing

from judge.backends import Completion, Served, Usage
from judge.backends.batch import result_of
from judge.backends.openai_compat import _completion
from judge.secrets import Redactor

ANSWER = {"model": "m", "system_fingerprint": "fp", "usage": {"prompt_tokens": 12, "completion_tokens": 3,
                                                               "prompt_tokens_details": {"cached_tokens": 8}},
          "choices": [{"message": {"content": "Score: 4"}, "finish_reason": "stop",
                       "logprobs": {"content": [{"token": "4", "logprob": -0.1, "top_logprobs": []}]}}]}


def _check(value: dict, kind) -> None:
    hints = typing.get_type_hints(kind)
    assert set(value) == set(hints), (kind.__name__, set(value) ^ set(hints))
    for name, hint in hints.items():
        if typing.get_origin(hint) is None and isinstance(hint, type) and not typing.is_typeddict(hint):
            assert isinstance(value[name], hint), (name, value[name])


def test_an_online_answer_is_a_completion_with_its_usage_and_provenance():
    completion = _completion(ANSWER, {"engine": "llama.cpp b1", "model_digest": "abc"})
    _check(completion, Completion)
    _check(completion["usage"], Usage)
    _check(completion["served"], Served)
    assert completion["usage"]["cached_tokens"] == 8 and completion["served"]["engine"] == "llama.cpp b1"


def test_a_batch_answer_is_the_same_completion():
    record = {"custom_id": "k", "error": None, "response": {"status_code": 200, "request_id": "r", "body": ANSWER}}
    completion = result_of(record, Redactor())
    assert completion == _completion(ANSWER)
    _check(completion, Completion)
