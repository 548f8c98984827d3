"""The typed judgment, its fingerprint, and the redaction of credentials."""

from __future__ import annotations

import json

import pytest

from judge.errors import OutputError
from judge.judgment import Judgment, changes, fingerprint_of, parse_line, read_judgments
from judge.secrets import MASK, Redactor


def test_a_line_round_trips_and_shows_only_the_fields_that_apply():
    j = Judgment(id="d1", system="a|b", criterion="faithfulness", label="1", system_1="a", system_2="b",
                 orders={"forward": "1", "swapped": "1"}, order_disagreement=False, fingerprint={"model": "m"})
    line = j.to_line()
    data = json.loads(line)
    assert "position" not in data and "segments" not in data and "raw" not in data  # block/segment-only fields
    assert data["error"] is None and data["abstained"] is False  # the fixed fields are always there
    again = parse_line(line, "f:1")
    assert again == j and again.is_pair and again.key == ("d1", "a|b", "faithfulness")


@pytest.mark.parametrize("fields, status", [
    ({"score": 4.0}, "ok"),
    ({"label": "correct", "score": 1.0}, "ok"),
    ({"label": "yes"}, "label"),
    ({"label": "I don't know", "abstained": True}, "abstain"),
    ({"na": True}, "na"),
    ({"error": "HTTP 500", "score": None}, "error"),
])
def test_status_is_what_calibration_reads(fields, status):
    assert Judgment(id="d", system="s", criterion="c", **fields).status == status


@pytest.mark.parametrize("line, message", [
    ("not json", "f:3: not valid JSON"),
    ("[1]", "f:3: expected a judgment object, got list"),
    ('{"id": "d", "system": "s"}', "f:3: not a judgment: field 'criterion': Field required"),
    ('{"id": "d", "system": "s", "criterion": "c", "score": "four"}', "f:3: not a judgment: field 'score'"),
])
def test_a_bad_line_names_file_and_line(line, message):
    with pytest.raises(OutputError, match=message):
        parse_line(line, "f:3")


def test_reading_a_file_reports_encoding_and_directories(tmp_path):
    good = '{"id": 12, "system": "s", "criterion": "c", "usage": null}\n'
    (tmp_path / "latin1.jsonl").write_bytes(good.encode() + '{"id": "é"}'.encode("latin-1"))
    with pytest.raises(OutputError, match=r"latin1.jsonl:2: not UTF-8 text \(byte 9 of the line is 0xe9\)"):
        list(read_judgments(tmp_path / "latin1.jsonl"))
    (tmp_path / "bom.jsonl").write_bytes(b"\xef\xbb\xbf" + good.encode())
    [(line, judgment)] = list(read_judgments(tmp_path / "bom.jsonl"))  # numeric id and null usage, as other tools write
    assert line == 1 and judgment.id == "12" and judgment.usage.prompt_tokens == 0
    with pytest.raises(OutputError, match="is a directory"):
        list(read_judgments(tmp_path))


def test_changes_say_what_differs_in_words():
    old = fingerprint_of(model="m", temperature=0.0, item={"candidate": "a"}, template=[("t.j2", "x")])
    new = fingerprint_of(model="m", temperature=0.7, item={"candidate": "b"}, template=[("t.j2", "x")])
    assert changes(old, new) == ["item content", "temperature 0.0 -> 0.7"]
    assert changes(None, new) == ["no fingerprint (written by an older version)"]
    assert changes(new, dict(new)) == []


@pytest.mark.parametrize("text", [
    "HTTP 401: invalid credentials: Authorization: Bearer sk-live-0123456789abcdef",
    "error: key sk-live-0123456789abcdef is revoked",
    '{"api_key": "sk-live-0123456789abcdef"}',
    "the key 0123456789abcdef-known was refused",
])
def test_credentials_never_survive_redaction(text):
    redact = Redactor("sk-live-0123456789abcdef", "0123456789abcdef-known")
    out = redact(text)
    assert "0123456789abcdef" not in out and MASK in out


def test_a_password_in_a_url_is_masked_and_the_url_kept():
    assert Redactor()("http://bob:hunter2@127.0.0.1:8000/v1 refused") == f"http://{MASK}@127.0.0.1:8000/v1 refused"
    assert Redactor()("http://127.0.0.1:8000/v1 refused") == "http://127.0.0.1:8000/v1 refused"


def test_redaction_keeps_ordinary_text():
    assert Redactor("secret-key-1")("the score is 4 (skipping nothing)") == "the score is 4 (skipping nothing)"


CANONICAL = [  # what an item's (or any part's) digest encodes: every JSON type, the text a user may write
    {"id": "d0", "dialogue": "A: \"hi\"\\n\u2028 🙂 \x00", "candidate": "é", "system": "s"},
    {"b": [1, 2.5, -0.0, 1e300, None, True, False, {"z": [], "a": {}}], "a": "x"},
    {"nan": float("nan"), "inf": float("inf"), "-inf": -float("inf"), "big": 10**40},
    {2: "int keys", 1: "sorted as ints"}, {1.5: "float key"}, {False: 1, True: 2},
    {1: "keys of two types", "1.5": "cannot be sorted"},  # a TypeError, as json.dumps raises
    ["list", ("tuple",), {"nested": {"k": [{"deep": "er"}]}}], "a bare string", 3, 0.1 + 0.2, None,
    {"path": __import__("pathlib").Path("a/b"), "set-like": frozenset()},  # default=str
]


@pytest.mark.parametrize("value", CANONICAL, ids=range(len(CANONICAL)))
def test_a_digest_encodes_as_json_dumps_does(value):
    import hashlib

    from judge.judgment import _canonical, digest

    try:
        text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    except TypeError:
        with pytest.raises(TypeError):
            _canonical(value)
        return
    assert _canonical(value) == text
    assert digest(value) == hashlib.sha256((value if isinstance(value, str) else text).encode()).hexdigest()[:16]
