"""Items files: JSONL and CSV; each problem is reported as file:line: what is wrong."""

import json

import pytest

from judge.errors import InputError
from judge.items import load_items


def write_jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


GOOD = {"id": "c1", "system": "s1", "dialogue": "A: hi\nB: hello", "candidate": "They greet."}


def test_jsonl_with_turns_and_string_dialogues(tmp_path):
    turns = {**GOOD, "id": "c2", "dialogue": [{"speaker": "A", "text": "hi"}, {"speaker": "B", "text": "yo"}]}
    items = load_items(write_jsonl(tmp_path / "i.jsonl", [GOOD, turns]))
    assert items[0].dialogue_text == "A: hi\nB: hello"
    assert items[1].dialogue_text == "A: hi\nB: yo"


def test_csv_with_the_same_columns(tmp_path):
    path = tmp_path / "i.csv"
    path.write_text('id,system,dialogue,candidate\nc1,s1,"A: hi\nB: hello",They greet.\n')
    [item] = load_items(path)
    assert item.id == "c1" and item.dialogue_text == "A: hi\nB: hello" and item.reference is None


@pytest.mark.parametrize(
    "bad, message",
    [
        ('{"id": "c2", "dialogue": "x", "candidate": ', r"i.jsonl:2: not valid JSON"),
        ({"id": "c2", "dialogue": "x"}, r"i.jsonl:2: needs 'candidate'"),
        ({"id": "c2", "dialogue": "x", "candidate": "   "}, r"i.jsonl:2: 'candidate' is empty"),
        ({"dialogue": "x", "candidate": "y"}, r"i.jsonl:2: field 'id' is missing"),
        (GOOD, r"i.jsonl:2: duplicate item \(id='c1', system='s1'\), first on line 1"),
        ([1, 2], r"i.jsonl:2: expected one JSON object per line, got a list"),
        ({**GOOD, "id": "c2", "dialogue": 42}, r"i.jsonl:2: field 'dialogue' must be a string or a list of "),
        ({**GOOD, "id": "c2", "dialogue": [{"speaker": "A"}]}, r"i.jsonl:2: dialogue turn 1 has no 'text'"),
        ({**GOOD, "id": "c2", "dialogue": ["hi"]}, r"i.jsonl:2: dialogue turn 1 must be an object"),
        ({**GOOD, "id": "c2", "dialogue": []}, r"i.jsonl:2: 'dialogue' is empty"),
        ({**GOOD, "id": "c2", "candidate": 42}, r"i.jsonl:2: field 'candidate' must be text .* got the number 42; quote"),
        ({**GOOD, "id": "c2", "system": True}, r"i.jsonl:2: field 'system' must be a string or a whole number, got true"),
        ({**GOOD, "id": "c2", "segments": ["a", 3]}, r"i.jsonl:2: segment 2 must be a string, got the number 3"),
        ({"id": "c2", "dialogue": "x", "candiate": "y"}, r"i.jsonl:2: needs 'candidate' .*'candiate' a misspelt"),
    ],
)
def test_bad_lines_name_file_line_and_problem(tmp_path, bad, message):
    with pytest.raises(InputError, match=message):
        load_items(write_jsonl(tmp_path / "i.jsonl", [GOOD, bad]))


def test_required_reference_is_checked(tmp_path):
    with pytest.raises(InputError, match="i.jsonl:1: the rubric needs field 'reference'"):
        load_items(write_jsonl(tmp_path / "i.jsonl", [GOOD]), required=["dialogue", "candidate", "reference"])


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        load_items(tmp_path / "absent.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(InputError, match="no items"):
        load_items(tmp_path / "empty.jsonl")


def test_one_id_means_one_dialogue(tmp_path):
    other = {**GOOD, "system": "s2", "dialogue": "A: something else"}
    with pytest.raises(InputError, match="i.jsonl:2: item id 'c1' has a different dialogue than on line 1"):
        load_items(write_jsonl(tmp_path / "i.jsonl", [GOOD, other]))


def test_numbers_are_labels_not_texts(tmp_path):
    [item] = load_items(write_jsonl(tmp_path / "i.jsonl", [{**GOOD, "id": 17, "system": 3}]))
    assert (item.id, item.system) == ("17", "3")


def test_line_numbers_and_bom_and_semicolons_in_csv(tmp_path):
    path = tmp_path / "excel.csv"
    # Excel's "CSV UTF-8" starts with a byte-order mark; French-locale Excel separates with ';'
    path.write_bytes("\ufeffid;system;dialogue;candidate\nc1;s1;\"A: hi\nB: là\";Ils se saluent.\n\nc2;s1;d;x\n".encode())
    items = load_items(path)
    assert [(i.id, i.line) for i in items] == [("c1", 2), ("c2", 5)]
    assert items[0].dialogue_text == "A: hi\nB: là"


def test_jsonl_keeps_unicode_line_separators_inside_strings(tmp_path):
    path = tmp_path / "i.jsonl"
    path.write_text(json.dumps({**GOOD, "candidate": "one\u2028two"}, ensure_ascii=False) + "\n", encoding="utf-8")
    [item] = load_items(path)
    assert item.candidate == "one\u2028two" and item.line == 1


def test_oversized_names_line_id_system_and_size(tmp_path):
    from judge.items import oversized

    big = {**GOOD, "system": "s2", "candidate": "x" * 5000}
    items = load_items(write_jsonl(tmp_path / "i.jsonl", [GOOD, big]))
    expected = len(GOOD["dialogue"]) + 5000
    assert [tuple(o) for o in oversized(items, 1000)] == [(2, "c1", "s2", expected)]
    assert oversized(items, expected) == []
