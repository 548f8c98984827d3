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
        ({"dialogue": "x", "candidate": "y"}, r"i.jsonl:2: field 'id': Field required"),
        (GOOD, r"i.jsonl:2: duplicate item \(id='c1', system='s1'\), first on line 1"),
        ([1, 2], r"i.jsonl:2: expected a JSON object"),
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
