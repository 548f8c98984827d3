"""`judge tune` end to end through the engine, on the project's local test server made to learn from demonstrations.

The server is a TEST DOUBLE of a model that learns from demonstrations (tests/stub_server.py, StubConfig.learner):
a summary's true score is how often it says "good"; without demonstrations the double scores by length (a weak
cue); when the worked examples in the prompt follow the "good" rule, it scores by it. No real model can run here
(no GPU), so what is tested is the machinery: tune builds few-shot versions cross-fitted by dialogue, judges them
through the engine, finds the better version, rejects the useless ones (decoding variants that change nothing),
writes the accepted rubric, and the demonstration dialogues' labels are left out downstream.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
RUBRIC = ROOT / "examples" / "study" / "toy.yaml"


def _study(folder: Path, dialogues: int = 24, seed: int = 3) -> tuple[Path, Path]:
    rng = random.Random(seed)
    items, labels = [], ["item_id,system,annotator,criterion,score"]
    for d in range(dialogues):
        for system in ("a", "b", "c"):
            good = rng.randint(1, 5)
            filler = rng.randint(0, 24)  # the length cue: weakly tied to the true score
            words = ["good"] * good + ["fine"] * (filler + 2 * good)
            rng.shuffle(words)
            items.append({"id": f"d{d:02d}", "system": system, "dialogue": [{"speaker": "A", "text": "hello"}],
                          "candidate": " ".join(words)})
            for annotator in ("h1", "h2"):
                score = min(5, max(1, good + (rng.random() < 0.15) * rng.choice([-1, 1])))
                labels.append(f"d{d:02d},{system},{annotator},clarity,{score}")
    (folder / "items.jsonl").write_text("".join(json.dumps(i) + "\n" for i in items), encoding="utf-8")
    (folder / "labels.csv").write_text("\n".join(labels) + "\n", encoding="utf-8")
    return folder / "items.jsonl", folder / "labels.csv"


def _judge(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "judge.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=600)


def _judged_study(server, folder: Path) -> tuple[Path, Path, list[str], Path]:
    """A 12-dialogue study judged by the current rubric on `server`: (items, labels, the model flags, judgments)."""
    items, labels = _study(folder, dialogues=12)
    model = ["--base-url", server.base_url, "--model", "stub", "--cache", str(folder / "cache"), "--no-progress"]
    current = folder / "current.jsonl"
    assert _judge("score", "--rubric", str(RUBRIC), "--input", str(items), "--output", str(current),
                  "--criteria", "clarity", *model).returncode == 0
    return items, labels, model, current


@pytest.fixture
def learner(stub_server):
    stub_server.configure(learner=True)
    return stub_server


def test_tune_finds_the_demonstrations_that_teach_and_rejects_useless_variants(learner, tmp_path):
    items, labels = _study(tmp_path)
    model = ["--base-url", learner.base_url, "--model", "stub", "--cache", str(tmp_path / "cache"), "--no-progress"]
    current = tmp_path / "current.jsonl"
    done = _judge("score", "--rubric", str(RUBRIC), "--input", str(items), "--output", str(current),
                  "--criteria", "clarity", *model)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "tune"
    done = _judge("tune", "--judge", f"current={current}", "--human", str(labels), "--output-dir", str(out),
                  "--candidates", "few-shot,decoding", "--rubric", str(RUBRIC), "--items", str(items),
                  "--folds", "3", "--criteria", "clarity", *model)
    assert done.returncode == 0, done.stdout + done.stderr
    import pandas as pd

    table = pd.read_csv(out / "candidates.csv").set_index("candidate")
    assert table.loc["few-shot", "accepted"] and table.loc["few-shot", "lower_family"] > 0
    assert not table.loc["decoding-logprobs", "accepted"] and not table.loc["decoding-samples", "accepted"]
    assert "picked for clarity: few-shot" in done.stdout
    tuned = yaml.safe_load((out / "rubrics" / "toy.yaml").read_text(encoding="utf-8"))
    assert tuned["version"] == "2" and tuned["tuned_from"] == "toy@1"
    shown = [e["item_id"] for c in tuned["criteria"] if c["id"] == "clarity" for e in c.get("examples", [])]
    assert len(shown) == 4 and len(set(shown)) == 4
    accuracy = next(c for c in tuned["criteria"] if c["id"] == "accuracy")
    assert not accuracy.get("examples")  # only the tuned criterion changed
    # cross-fitting: each fold's version never holds a demonstration from the dialogues it judged
    for fold in range(3):
        version = yaml.safe_load((out / "runs" / "few-shot" / f"fold_{fold}.yaml").read_text(encoding="utf-8"))
        judged = {json.loads(line)["id"] for line in
                  (out / "runs" / "few-shot" / f"fold_{fold}_items.jsonl").read_text(encoding="utf-8").splitlines()}
        demos = {e["item_id"] for c in version["criteria"] for e in c.get("examples", [])}
        assert demos and not demos & judged

    # the accepted rubric in use: its demonstrations' dialogues are marked, and estimate/calibrate leave them out
    judged = tmp_path / "tuned.jsonl"
    done = _judge("score", "--rubric", str(out / "rubrics" / "toy.yaml"), "--input", str(items), "--output",
                  str(judged), "--criteria", "clarity", *model)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in judged.read_text(encoding="utf-8").splitlines()]
    marked = {j["id"] for j in lines if j.get("demonstration")}
    assert marked == set(shown)
    assert all("demonstration" not in j for j in lines if j["id"] not in marked)
    shutil_copy = (tmp_path / "toy.yaml")
    shutil_copy.write_text((out / "rubrics" / "toy.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    done = _judge("calibrate", "--judgments", str(judged), "--human", str(labels), "--bootstrap", "0")
    assert done.returncode == 0, done.stderr
    assert "4 dialogue(s) as demonstrations" in done.stderr and "left out of the labelled cells" in done.stderr
    done = _judge("estimate", "--judgments", str(judged), "--human", str(labels))
    assert "4 dialogue(s) as demonstrations" in done.stdout + done.stderr, done.stdout + done.stderr


def test_a_rubric_edit_that_changes_the_scale_points_is_discarded(learner, tmp_path):
    items, labels, model, current = _judged_study(learner, tmp_path)
    learner.configure(learner=True, proposal=json.dumps({"definition": "Count the good.",
                                                         "meanings": {"1": "a", "2": "b", "3": "c", "4": "d"}}))
    out = tmp_path / "tune"
    done = _judge("tune", "--judge", f"current={current}", "--human", str(labels), "--output-dir", str(out),
                  "--candidates", "rubric-edit", "--proposer-model", "proposer", "--rubric", str(RUBRIC),
                  "--items", str(items), "--folds", "3", "--criteria", "clarity", *model)
    assert "rubric-edit proposal for clarity discarded" in done.stderr, done.stderr
    version = yaml.safe_load((out / "runs" / "rubric-edit" / "fold_0.yaml").read_text(encoding="utf-8"))
    clarity = next(c for c in version["criteria"] if c["id"] == "clarity")
    assert clarity["definition"].startswith("How easy")  # unchanged: the proposal was discarded
    learner.configure(learner=True, proposal=json.dumps({"definition": "Count the good.", "meanings": {
        str(p): f"meaning {p}" for p in range(1, 6)}}))
    out = tmp_path / "tune2"
    done = _judge("tune", "--judge", f"current={current}", "--human", str(labels), "--output-dir", str(out),
                  "--candidates", "rubric-edit", "--proposer-model", "proposer", "--rubric", str(RUBRIC),
                  "--items", str(items), "--folds", "3", "--criteria", "clarity", *model)
    version = yaml.safe_load((out / "runs" / "rubric-edit" / "fold_0.yaml").read_text(encoding="utf-8"))
    clarity = next(c for c in version["criteria"] if c["id"] == "clarity")
    assert clarity["definition"] == "Count the good."
    assert [p["value"] for p in clarity["scale"]["points"]] == [1, 2, 3, 4, 5]
    assert [p["label"] for p in clarity["scale"]["points"]] == ["unclear", "poor", "fair", "good", "excellent"]
    assert done.returncode in (0, 1), done.stderr


def test_with_batch_dir_each_fold_writes_its_own_batch_files_and_tune_waits(learner, tmp_path):
    from judge.run import EXIT_BATCH_PENDING

    items, labels, model, current = _judged_study(learner, tmp_path)
    batches = tmp_path / "batches"
    done = _judge("tune", "--judge", f"current={current}", "--human", str(labels), "--output-dir",
                  str(tmp_path / "tune"), "--candidates", "few-shot", "--rubric", str(RUBRIC), "--items", str(items),
                  "--folds", "3", "--criteria", "clarity", "--batch-dir", str(batches), *model)
    assert done.returncode == EXIT_BATCH_PENDING, done.stderr
    assert "waits for batch answers" in done.stderr
    assert any((batches / "few-shot" / "fold_0").iterdir())
    assert not (tmp_path / "tune" / "candidates.csv").exists()


def test_dry_run_plans_every_fold_run_as_the_real_run_asks_them_and_writes_nothing(learner, tmp_path):
    items, labels, model, current = _judged_study(learner, tmp_path)
    tune = ["tune", "--judge", f"current={current}", "--human", str(labels), "--output-dir", str(tmp_path / "tune"),
            "--candidates", "few-shot,decoding", "--rubric", str(RUBRIC), "--items", str(items), "--folds", "3",
            "--criteria", "clarity", *model]
    before = sorted(p.name for p in tmp_path.iterdir())
    cache_before = sorted((tmp_path / "cache").rglob("*"))
    learner.reset()
    planned = _judge(*tune, "--dry-run")
    assert planned.returncode == 0, planned.stderr
    numbers = json.loads(planned.stdout.strip().splitlines()[-1])
    assert learner.stats.total == 0  # no model called
    assert sorted(p.name for p in tmp_path.iterdir()) == before and sorted((tmp_path / "cache").rglob("*")) == \
        cache_before  # nothing written: no output dir, no run folder, no cache entry
    # few-shot: 3 folds; decoding: one run per variant on every labelled dialogue
    assert numbers["runs"] == 3 + sum(r["candidate"].startswith("decoding") for r in numbers["per_run"])
    assert numbers["judgments"] == 36 * (numbers["runs"] - 3) + 36 and numbers["proposer_calls"] == 0
    done = _judge(*tune)
    assert done.returncode in (0, 1), done.stderr
    assert learner.stats.total == numbers["requests"]  # the plan is what the real run asked


@pytest.mark.parametrize(("extra", "message"), [
    ([], "--dry-run plans the runs of built candidates (--candidates)"),
    (["--candidates", "few-shot", "--folds", "30"], "6 labelled dialogue(s) for --folds 30: building candidates needs"),
])
def test_dry_run_bad_input_exits_2_and_writes_nothing(tmp_path, extra, message):
    items, labels = _study(tmp_path, dialogues=6)
    current = tmp_path / "current.csv"
    lines = ["item_id,system,criterion,score"] + [f"d{d:02d},{s},clarity,3" for d in range(6) for s in "abc"]
    current.write_text("\n".join(lines) + "\n", encoding="utf-8")
    before = sorted(p.name for p in tmp_path.iterdir())
    done = _judge("tune", "--judge", f"current={current}", "--human", str(labels), "--output-dir",
                  str(tmp_path / "tune"), "--rubric", str(RUBRIC), "--items", str(items), "--criteria", "clarity",
                  "--model", "stub", "--base-url", "http://127.0.0.1:9/v1", "--scale", "1,5", "--dry-run", *extra)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before
