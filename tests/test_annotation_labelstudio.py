"""The Label Studio package against Label Studio's own code.

- With the Label Studio SDK importable (here, or in the interpreter named by JUDGE_LABEL_STUDIO_PYTHON, since
  `label-studio-sdk` is kept out of the project's environment), every rubric's labeling config passes the SDK's
  validation, every task has the data the config names, and the simulated annotations are valid regions.
- With a running Label Studio server (JUDGE_LABEL_STUDIO_URL and JUDGE_LABEL_STUDIO_TOKEN, a legacy API token),
  every rubric's package is imported into a new project, annotated through the API, exported by the server,
  and read back by `judge import`, for all five rubrics (pointwise, per segment, pairwise). The server is not
  started by the test: .ci/run installs `label-studio` in an environment of its own, starts it on loopback with a
  user and token made non-interactively, and runs this file against it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from annotation_sim import Annotator, fill_label_studio  # noqa: E402
from test_annotation import RUBRICS, as_set, export, read_labels  # noqa: E402

from judge.cli import main  # noqa: E402

SDK_CHECK = r"""
import json, sys
from label_studio_sdk.label_interface import LabelInterface
out = []
for pkg, export in zip(sys.argv[1::2], sys.argv[2::2]):
    li = LabelInterface(open(pkg + "/labeling_config.xml", encoding="utf-8").read())
    li.validate()  # raises on a schema, name or toName error
    tasks = json.load(open(pkg + "/tasks.json", encoding="utf-8"))
    annotated = json.load(open(export, encoding="utf-8"))
    errors = [e for t in annotated for a in t["annotations"] for e in li.validate_prediction(a, return_errors=True)]
    out.append({"controls": len(li.controls), "tasks_ok": all(li.validate_task(t) for t in tasks), "errors": errors})
print(json.dumps(out))
"""


def _sdk_python() -> str | None:
    named = os.environ.get("JUDGE_LABEL_STUDIO_PYTHON")
    if named:
        return named
    try:
        import label_studio_sdk  # noqa: F401
    except ImportError:
        return None
    return sys.executable


def test_configs_and_annotations_pass_label_studio_sdk_validation(tmp_path):
    python = _sdk_python()
    if python is None:
        pytest.skip("label-studio-sdk is not installed (set JUDGE_LABEL_STUDIO_PYTHON to a Python that has it)")
    args = []
    for rubric, items in RUBRICS.items():
        pkg = export(tmp_path, rubric, "label-studio", name=rubric)
        annotated = tmp_path / f"{rubric}-export.json"
        fill_label_studio(pkg / "tasks.json", annotated, {"a": Annotator(rubric, items, seed=1)})
        args += [str(pkg), str(annotated)]
    done = subprocess.run([python, "-c", SDK_CHECK, *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(done.stdout)
    assert len(results) == len(RUBRICS)
    for rubric, result in zip(RUBRICS, results):
        assert result["tasks_ok"], rubric
        assert result["errors"] == [], (rubric, result["errors"][:3])
        assert result["controls"] > 0


class _Server:
    def __init__(self, url: str, token: str):
        self.url, self.token = url.rstrip("/"), token

    def call(self, method: str, path: str, body=None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers={"Authorization": f"Token {self.token}",
                                                  "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as response:
            text = response.read().decode()
        return json.loads(text) if text else None


@pytest.mark.parametrize("rubric", list(RUBRICS))
def test_package_imports_into_a_running_label_studio_and_its_export_reads_back(tmp_path, rubric):
    url, token = os.environ.get("JUDGE_LABEL_STUDIO_URL"), os.environ.get("JUDGE_LABEL_STUDIO_TOKEN")
    if not (url and token):
        pytest.skip("no Label Studio server: set JUDGE_LABEL_STUDIO_URL and JUDGE_LABEL_STUDIO_TOKEN to run this")
    server = _Server(url, token)
    pkg = export(tmp_path, rubric, "label-studio")
    body = json.loads((pkg / "project.json").read_text(encoding="utf-8"))
    body["title"] = f"judge test {rubric} {tmp_path.name}"[:50]
    project = server.call("POST", "/api/projects", body)
    try:
        tasks = json.loads((pkg / "tasks.json").read_text(encoding="utf-8"))
        imported = server.call("POST", f"/api/projects/{project['id']}/import", tasks)
        assert imported["task_count"] == len(tasks)
        # Annotate through the API with the simulated annotator's answers, then let the server export them.
        who = Annotator(rubric, RUBRICS[rubric], seed=7)
        stored = server.call("GET", f"/api/projects/{project['id']}/tasks?page_size=1000")
        stored = stored["tasks"] if isinstance(stored, dict) else stored
        local = tmp_path / "local.json"
        answers = fill_label_studio(pkg / "tasks.json", local, {"a": who})
        by_task_id = {t["data"]["task_id"]: t["annotations"][0]["result"] for t in answers}
        for task in stored:
            server.call("POST", f"/api/tasks/{task['id']}/annotations",
                        {"result": by_task_id[task["data"]["task_id"]], "was_cancelled": False})
        exported = server.call("GET", f"/api/projects/{project['id']}/export?exportType=JSON")
        export_file = tmp_path / "ls-export.json"
        export_file.write_text(json.dumps(exported, ensure_ascii=False), encoding="utf-8")
        labels = tmp_path / "labels.csv"
        assert main(["import", "--from", str(export_file), "--key", str(pkg / "key.json"),
                     "--output", str(labels)]) == 0
        me = server.call("GET", "/api/current-user/whoami")
        annotator = me.get("email") or f"user-{me['id']}"
        got = {(r[0], r[1], r[3], r[4], r[5], r[6]) for r in as_set(read_labels(labels))}
        want = {(r[0], r[1], r[3], r[4], r[5], r[6]) for r in who.expected_rows(annotator)}
        assert got == want
        assert {r["annotator"] for r in read_labels(labels)} <= {annotator, f"user-{me['id']}"}
    finally:
        server.call("DELETE", f"/api/projects/{project['id']}/")
