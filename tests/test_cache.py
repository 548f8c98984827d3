"""Cache keys: everything that changes the answer is in the key, credentials and addresses never are."""

import pytest

from judge.cache import AnswerCache, request_key

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.0, "max_tokens": 10,
        "seed": 0, "response_format": {"type": "json_object"}}


def test_key_changes_with_what_changes_the_answer():
    base = request_key(BODY)
    for change in ({"model": "m2"}, {"temperature": 0.7}, {"seed": 1}, {"max_tokens": 11},
                   {"messages": [{"role": "user", "content": "hi!"}]}, {"response_format": {"type": "text"}},
                   {"logprobs": True}):
        assert request_key({**BODY, **change}) != base, change


def test_key_ignores_dict_order():
    assert request_key(dict(reversed(list(BODY.items())))) == request_key(BODY)


def test_round_trip_persists_across_connections(tmp_path):
    cache = AnswerCache(tmp_path)
    key = request_key(BODY)
    assert cache.get(key) is None
    cache.put(key, {"content": '{"score": 3}', "finish_reason": "stop"})
    cache.close()
    again = AnswerCache(tmp_path)
    assert again.get(key) == {"content": '{"score": 3}', "finish_reason": "stop"}


# -- a request encoded once (judge.cache.Encoder): the same text and key as encoding it whole ----------------------
SYSTEM = "Vous êtes un évaluateur. \"Guillemets\", barres \\ obliques, tabulations\t et retours\n" * 40
SCHEMA = {"type": "json_schema", "json_schema": {"name": "answer", "strict": True, "schema": {
    "type": "object", "properties": {"score": {"type": "integer", "enum": [1, 2, 3]}}, "required": ["score"]}}}
ENCODED = [  # (case, body): every shape a request takes, and what a user's text may hold
    ("the common request", {**BODY, "messages": [{"role": "system", "content": SYSTEM},
                                                 {"role": "user", "content": "hi"}], "response_format": SCHEMA}),
    ("no response format (text mode)", {k: v for k, v in BODY.items() if k != "response_format"}),
    ("json_object", BODY),
    ("logprobs", {**BODY, "logprobs": True, "top_logprobs": 20}),
    ("a re-ask", {**BODY, "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "q"},
                                       {"role": "assistant", "content": "not json"},
                                       {"role": "user", "content": "That answer cannot be used"}]}),
    ("line separators and emoji", {**BODY, "messages": [{"role": "user", "content": "a\u2028b\u2029c 🙂 \x00 \x1f"}]}),
    ("a message with a name", {**BODY, "messages": [{"role": "user", "content": "x", "name": "n"}]}),
    ("content that is a list", {**BODY, "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]}),
    ("a number as content", {**BODY, "messages": [{"role": "system", "content": 3}]}),
    ("no messages", {"model": "m"}),
    ("floats and None", {**BODY, "temperature": 0.1 + 0.2, "seed": None}),
    # Settings are encoded from the encoder's memory of strings and from repr: a bool is not an int, -0.0 is not 0.0,
    # a whole float keeps its ".0", a huge or a non-finite float is written as json writes it.
    ("a bool beside ints", {**BODY, "logprobs": True, "top_logprobs": 1, "seed": False}),
    ("signed zero and whole floats", {**BODY, "temperature": -0.0, "top_p": 1.0, "seed": 10**30}),
    ("non-finite floats", {**BODY, "temperature": float("nan"), "top_p": float("inf"), "seed": -float("inf")}),
    ("tiny and huge floats", {**BODY, "temperature": 1e-300, "top_p": 1.7976931348623157e308}),
    # Subclasses of str, list and dict take the general encoder's path, with the same text.
    ("subclasses", {**BODY, "messages": type("Messages", (list,), {})([
        type("Message", (dict,), {})(role="user", content="x"),
        {"role": "system", "content": type("S", (str,), {})("y")}])}),
]


@pytest.mark.parametrize("case,body", ENCODED, ids=[c for c, _ in ENCODED])
def test_a_request_encoded_once_has_the_text_and_key_of_encoding_it_whole(case, body):
    import json

    from judge.cache import Encoder

    encoder = Encoder()
    for _ in range(3):  # the repeated parts come from the encoder's memory the second time
        request = encoder.request(body)
        assert request.text == json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        assert request.key == request_key(dict(body)) == request_key(request)
        assert dict(request) == body


def test_a_shared_part_changed_in_place_is_not_served_stale():
    """The encoder remembers parts by identity: a new object with new content gets its own encoding."""
    from judge.cache import Encoder

    encoder = Encoder()
    first = encoder.request({**BODY, "response_format": {"type": "json_object"}})
    second = encoder.request({**BODY, "response_format": {"type": "text"}})
    assert first.key != second.key and '"text"' in second.text
