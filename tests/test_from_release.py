"""examples/from_release.py, the way from a long-format release to an items file and a labels file, run as the
agreement tutorial runs it: what it writes (checked against pandas, independently), and bad input table-driven,
each refused with its message and nothing written or replaced."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "from_release.py"
RELEASE = ROOT / "examples" / "release"


def convert(*argv) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, argv)], capture_output=True, text=True,
                          timeout=120)


def digests(folder: Path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def test_the_release_becomes_one_item_per_rated_text_and_its_labels_and_a_rerun_replaces_its_own(tmp_path):
    done = convert(RELEASE, "--output-dir", tmp_path / "mine")
    assert done.returncode == 0, done.stderr
    items = [json.loads(line) for line in (tmp_path / "mine" / "items.jsonl").read_text().splitlines()]
    outputs = pd.read_csv(RELEASE / "outputs.csv", dtype=str)
    dialogues = pd.read_csv(RELEASE / "items.csv", dtype=str).set_index("item_id")["dialogue"]
    assert [(i["id"], i["system"], i["candidate"]) for i in items] == list(
        outputs[["item_id", "system", "summary"]].itertuples(index=False, name=None))
    assert all(i["dialogue"] == dialogues[i["id"]] for i in items)
    labels = pd.read_csv(tmp_path / "mine" / "labels.csv", dtype={"item_id": str})
    want = pd.read_csv(RELEASE / "annotations.csv", dtype={"item_id": str})
    pd.testing.assert_frame_equal(labels, want[["item_id", "system", "annotator", "criterion", "score"]])
    assert done.stdout == f"wrote {len(items)} items to {tmp_path / 'mine' / 'items.jsonl'} and {len(labels)} " \
                          f"labels to {tmp_path / 'mine' / 'labels.csv'}\n"
    before = digests(tmp_path / "mine")
    assert convert(RELEASE, "--output-dir", tmp_path / "mine").returncode == 0  # its own files: replaced alike
    assert digests(tmp_path / "mine") == before


def _user_labels(tmp_path: Path) -> tuple[Path, list[str]]:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "labels.csv").write_text("item_id,score\nmine,5\n")
    return RELEASE, ["--output-dir", tmp_path / "out"]


def _no_annotations(tmp_path: Path) -> tuple[Path, list[str]]:
    release = tmp_path / "release"
    shutil.copytree(RELEASE, release)
    (release / "annotations.csv").unlink()
    return release, ["--output-dir", tmp_path / "out"]


def _no_text_column(tmp_path: Path) -> tuple[Path, list[str]]:
    release = tmp_path / "release"
    shutil.copytree(RELEASE, release)
    pd.read_csv(release / "outputs.csv").rename(columns={"summary": "text"}).to_csv(release / "outputs.csv",
                                                                                   index=False)
    return release, ["--output-dir", tmp_path / "out"]


def _output_dir_is_a_file(tmp_path: Path) -> tuple[Path, list[str]]:
    (tmp_path / "out").write_text("notes\n")
    return RELEASE, ["--output-dir", tmp_path / "out"]


BAD = [
    ("a labels.csv of the user's in --output-dir", _user_labels,
     "labels.csv: exists and was not written by this tool (or was edited since): it is left untouched"),
    ("a release without annotations.csv", _no_annotations,
     "no annotations.csv here; a release folder holds items.csv, outputs.csv and annotations.csv"),
    ("the rated text under another column name", _no_text_column,
     "outputs.csv: no column summary (it has dataset, item_id, system, text)"),
    ("--output-dir naming a file", _output_dir_is_a_file, "--output-dir is a file; give a folder"),
]


@pytest.mark.parametrize("case, setup, message", BAD, ids=[row[0] for row in BAD])
def test_bad_input_is_refused_with_its_message_and_nothing_is_written(tmp_path, case, setup, message):
    release, argv = setup(tmp_path)
    inputs = digests(release)
    out = tmp_path / "out"
    present = digests(out) if out.is_dir() else None
    done = convert(release, *argv)
    assert done.returncode == 1 and message in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert digests(release) == inputs  # the release is read, never written
    if out.is_dir():
        assert digests(out) == present  # the user's file kept, and no items.jsonl beside it
    elif out.exists():
        assert out.read_text() == "notes\n"
