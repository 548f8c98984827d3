"""Rubric files: every bundled rubric validates; bad files fail with the file, the line and the field."""

import pytest

from judge.errors import RubricError
from judge.rubric import available_rubrics, load_rubric


def test_required_rubrics_are_bundled():
    assert {"dialsummeval", "call_centre_fr"} <= set(available_rubrics())


@pytest.mark.parametrize("name", available_rubrics())
def test_every_bundled_rubric_loads(name):
    rubric = load_rubric(name)
    assert rubric.name == name
    assert rubric.criteria


def test_dialsummeval_has_the_four_aspects_on_1_to_5():
    rubric = load_rubric("dialsummeval")
    assert [c.id for c in rubric.criteria] == ["coherence", "consistency", "fluency", "relevance"]
    for c in rubric.criteria:
        assert c.scale.type == "likert" and c.scale.values == [1, 2, 3, 4, 5]


def test_call_centre_every_level_has_a_meaning_and_sub_issues_is_gated():
    rubric = load_rubric("call_centre_fr")
    assert rubric.language == "fr"
    assert [c.id for c in rubric.criteria] == ["faithfulness", "main_issues", "sub_issues", "resolution"]
    for c in rubric.criteria:
        assert c.scale.values == [1, 2, 3, 4, 5]
        assert all(p.meaning.strip() and p.label.strip() for p in c.scale.points)
    assert rubric.criterion("sub_issues").gate is not None
    assert all(c.gate is None for c in rubric.criteria if c.id != "sub_issues")


def test_unknown_rubric_and_criterion_are_clear():
    with pytest.raises(RubricError, match="unknown rubric 'nope'.*dialsummeval"):
        load_rubric("nope")
    with pytest.raises(RubricError, match="no criterion 'clarity'.*coherence"):
        load_rubric("dialsummeval").select(["clarity"])


BAD_SCALE = """\
name: broken
version: "1"
language: en
task: summary
title: t
instructions: i
inputs: [dialogue, candidate]
criteria:
  - id: fine
    name: Fine
    definition: d
    scale:
      type: likert
      points:
        - {value: 2, label: a, meaning: m}
        - {value: 1, label: b, meaning: m}
"""


def test_invalid_rubric_names_file_line_and_field(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text(BAD_SCALE)
    with pytest.raises(RubricError) as err:
        load_rubric(str(path))
    message = str(err.value)
    assert f"{path}:14" in message  # the `points:` line
    assert "criteria.0.scale.likert.points" in message and "ascending" in message


def test_unknown_field_and_bad_example_answer_are_rejected(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text(BAD_SCALE.replace("value: 2, label: a", "value: 0, label: a")
                    .replace("task: summary", "task: summary\ncolour: red"))
    with pytest.raises(RubricError, match="colour.*Extra inputs"):
        load_rubric(str(path))
    good = BAD_SCALE.replace("value: 2, label: a", "value: 0, label: a")
    path.write_text(good + "    examples:\n      - {candidate: c, answer: 7, why: w}\n")
    with pytest.raises(RubricError, match="answer 7 is not on the scale"):
        load_rubric(str(path))


@pytest.mark.parametrize(
    "content, message",
    [
        (BAD_SCALE.replace("title: t", "title: café").encode("latin-1"),
         r"r.yaml:5: not UTF-8 text \(byte \d+ is 0xe9\)"),
        (b"name: [broken\n", r"r.yaml:2: not valid YAML: expected ',' or '\]'"),
        (b"name: x\n\tversion: 1\n", r"r.yaml:2: not valid YAML: found character '\\t'"),
        (b"- just\n- a list\n", r"r.yaml: a rubric must be a YAML mapping, got list"),
        # BOM: still line 14
        (b"\xef\xbb\xbf" + BAD_SCALE.encode(), r"r.yaml:14: field criteria.0.scale.likert.points"),
    ],
)
def test_bad_rubric_files_are_one_line(tmp_path, content, message):
    path = tmp_path / "r.yaml"
    path.write_bytes(content)
    with pytest.raises(RubricError, match=message) as err:
        load_rubric(str(path))
    assert "\n" not in str(err.value)


def test_a_rubric_path_that_is_missing_or_a_directory(tmp_path):
    with pytest.raises(RubricError, match=r"mine.yaml: no such file"):
        load_rubric(str(tmp_path / "mine.yaml"))
    (tmp_path / "dir.yaml").mkdir()
    with pytest.raises(RubricError, match=r"dir.yaml: is a directory"):
        load_rubric(str(tmp_path / "dir.yaml"))
