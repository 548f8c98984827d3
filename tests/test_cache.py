"""Cache keys: everything that changes the answer is in the key, credentials and addresses never are."""

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
