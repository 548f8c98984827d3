"""judge/outputs.py: a file is replaced only when it is provably ours; everything else is refused untouched."""

from __future__ import annotations

import json

import pytest

from judge.errors import JudgeError, OutputError
from judge.outputs import REGISTRY, check_writable, is_ours, write_files, write_folder


def test_new_files_are_written_and_recorded(tmp_path):
    replaced = write_folder(tmp_path / "out", {"a.csv": "x,y\n1,2\n", "b.json": "{}\n"}, verb="screen")
    assert replaced == []
    assert (tmp_path / "out" / "a.csv").read_text() == "x,y\n1,2\n"
    registry = json.loads((tmp_path / "out" / REGISTRY).read_text())
    assert set(registry) == {"a.csv", "b.json"} and registry["a.csv"]["by"] == "judge screen"
    assert is_ours(tmp_path / "out" / "a.csv")


def test_our_own_files_are_replaced_and_reported(tmp_path):
    write_folder(tmp_path, {"a.csv": "old\n"}, verb="screen")
    replaced = write_folder(tmp_path, {"a.csv": "new\n"}, verb="screen")
    assert replaced == [tmp_path / "a.csv"]
    assert (tmp_path / "a.csv").read_text() == "new\n"


def test_an_html_page_proves_itself_without_a_registry(tmp_path):
    page = tmp_path / "report.html"
    write_files({page: "<html><body>1</body></html>"}, verb="calibrate")
    assert not (tmp_path / REGISTRY).exists()
    assert page.read_text().startswith("<!-- written by llm-judge-rater (calibrate); sha256 ")
    write_files({page: "<html><body>2</body></html>"}, verb="calibrate")  # ours: replaced
    assert page.read_text().endswith("<body>2</body></html>")


def _foreign(tmp_path):
    path = tmp_path / "notes.html"
    path.write_text("<html>my own notes</html>")
    return path, {}


def _edited_page(tmp_path):
    path = tmp_path / "report.html"
    write_files({path: "<html>ours</html>"}, verb="calibrate")
    path.write_text(path.read_text().replace("ours", "edited by hand"))
    return path, {}


def _edited_table(tmp_path):
    path = tmp_path / "systems.csv"
    write_files({path: "a\n1\n"}, verb="screen")
    path.write_text("a\n2\n")
    return path, {}


def _input(tmp_path):
    path = tmp_path / "labels.csv"
    path.write_text("item_id,system,annotator,criterion,score\n")
    return path, {"inputs": [path]}


def _folder(tmp_path):
    path = tmp_path / "out.html"
    path.mkdir()
    return path, {}


def _our_plan(tmp_path):
    path = tmp_path / "plan.csv"
    write_files({path: "item_id,part\nd1,random\n"}, verb="screen")
    return path, {}


# Each row: a file a user could name as an output, what the refusal says, and that it stays byte-identical.
REFUSED = [
    (_our_plan, "holds a table, plan or key this tool wrote"),  # ours, but a page must not replace a plan
    (_foreign, "was not written by this tool"),
    (_edited_page, "was not written by this tool (or was edited since)"),
    (_edited_table, "was not written by this tool (or was edited since)"),
    (_input, "would replace an input"),
    (_folder, "is a folder"),
]


@pytest.mark.parametrize("make, message", REFUSED, ids=[make.__name__.strip("_") for make, _ in REFUSED])
def test_refused_untouched(tmp_path, make, message):
    path, extra = make(tmp_path)
    before = path.read_bytes() if path.is_file() else None
    sibling = tmp_path / "new-table.csv"
    with pytest.raises(OutputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        write_files({sibling: "fresh\n", path: "<!DOCTYPE html><html>new</html>"}, verb="calibrate", **extra)
    assert (path.read_bytes() if path.is_file() else None) == before
    assert not sibling.exists(), "a refusal writes nothing, not even the files that could have been written"
    assert issubclass(OutputError, JudgeError)


def test_check_writable_names_the_option(tmp_path):
    path = tmp_path / "x.html"
    path.write_text("mine")
    with pytest.raises(OutputError, match="choose another --report path"):
        check_writable(path, what="--report")


def test_output_dir_that_is_a_file_is_refused(tmp_path):
    path = tmp_path / "plan"
    path.write_text("not a folder")
    with pytest.raises(OutputError, match="--output-dir is a file"):
        write_folder(path, {"a.csv": "1\n"}, verb="screen")
    assert path.read_text() == "not a folder"


def test_a_table_never_replaces_a_report_page_of_ours(tmp_path):
    page = tmp_path / "systems.csv"  # a report once written under a table's name
    write_files({page: "<!DOCTYPE html><p>report</p>"}, verb="screen")
    before = page.read_bytes()
    with pytest.raises(OutputError, match="holds a report page this tool wrote"):
        write_folder(tmp_path, {"systems.csv": "system,mean\n"}, verb="screen")
    assert page.read_bytes() == before
    assert write_files({page: "<!DOCTYPE html><p>again</p>"}, verb="screen") == [page]  # a page replaces a page
