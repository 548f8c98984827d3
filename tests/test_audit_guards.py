"""`judge audit` refuses what it cannot judge, and its probes measure what they claim.

- Probes against a real HTTP server (tests/stub_server.py) whose judge is swayed by the filler sentence: the filler
  probe must come out as moving every verdict up (sign and the faithful/raises rule), the attribution probe as not
  moving; an interrupted or failed probe run prints no audit (exit 130 / 2); `--batch-dir` keeps each probe's batch
  files apart and waits for both.
- The study loop's guards: labels off the rubric's scale, a --rerun by another judge (unless --allow-different-judge,
  said in the output), a negative seed, a report of another verb: refused in one line, exit 2, nothing written.
- Real releases' shapes: per-segment criteria (CSDS) are not re-asks; Chinese candidates are measured in characters;
  empty candidates are length 0; `judge compare`'s every-pair items are accepted.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_audit_cli import _audit_probes, _judge, write_items, write_judgments, write_labels

import judge.cli
import judge.engine
from calibration.errors import CalibrationError
from calibration.items import read_items
from calibration.trust.audit import audit
from judge.cli import main
from judge.judgment import Judgment

FILLER_TEXT = "I hope this summary is helpful."


# -- probes ----------------------------------------------------------------------------------------------------------


def test_a_judge_swayed_by_filler_is_caught_with_the_right_sign(stub_server, tmp_path, capsys):
    items = write_items(tmp_path / "items.jsonl", dialogues=6)
    judgments = _judge(stub_server, tmp_path, items, "j.jsonl")
    stub_server.configure(swayed_by=FILLER_TEXT)  # the filler sentence now earns the top score
    assert _audit_probes(stub_server, tmp_path, judgments, items, "filler,attribution") == 0
    printed = capsys.readouterr().out
    probes = pd.read_csv(tmp_path / "audit" / "probes.csv").set_index(["probe", "criterion"])
    filler = probes.loc[("filler", "coherence")]
    assert filler["mean_shift"] == pytest.approx(4.0) and filler["ci_low"] > 0  # 1 -> 5: up, not down
    assert bool(filler["raises"]) and not bool(filler["faithful"]) and filler["robustness"] == 0
    attribution = probes.loc[("attribution", "coherence")]
    assert attribution["mean_shift"] == 0 and bool(attribution["faithful"]) and not bool(attribution["moved"])
    assert "coherence: the filler probe leaves 0% of 4 verdicts unchanged" in printed
    assert "the judge RAISES it" in printed


@pytest.mark.parametrize("status, exit_code, message", [
    ("interrupted", 130, ""),
    ("failed", 2, "probe attribution: some perturbed candidates could not be judged"),
], ids=["interrupted", "failed"])
def test_a_probe_run_that_did_not_finish_prints_no_audit(stub_server, tmp_path, capsys, monkeypatch, status,
                                                          exit_code, message):
    import judge.run

    items = write_items(tmp_path / "items.jsonl", dialogues=6)
    judgments = _judge(stub_server, tmp_path, items, "j.jsonl")
    real = judge.run.run
    calls = []

    def second_stops(options, **given):
        # A test double for the second probe's run only (a real Ctrl-C inside `judge score` is tested in
        # test_api.py and test_batch.py): what the probes do with its outcome is what is tested here.
        calls.append(options.output)
        if len(calls) == 1:
            return real(options, **given)
        return judge.run.Outcome(status, Path(options.output), tally=judge.engine.Tally(failed=1, planned=1))

    monkeypatch.setattr(judge.run, "run", second_stops)
    capsys.readouterr()
    assert _audit_probes(stub_server, tmp_path, judgments, items, "filler,attribution") == exit_code
    out = capsys.readouterr()
    assert out.out == "" and message in out.err and len(calls) == 2
    assert not (tmp_path / "audit" / "probes.csv").exists() and not (tmp_path / "audit" / "length.csv").exists()


def test_batch_dir_keeps_each_probes_files_apart_and_waits_for_both(stub_server, tmp_path, capsys):
    items = write_items(tmp_path / "items.jsonl", dialogues=6)
    judgments = _judge(stub_server, tmp_path, items, "j.jsonl")
    capsys.readouterr()
    code = _audit_probes(stub_server, tmp_path, judgments, items, "filler,attribution", "--batch-dir",
                         str(tmp_path / "batches"))
    out = capsys.readouterr()
    assert code == judge.run.EXIT_BATCH_PENDING and out.out == ""
    for name in ("filler", "attribution"):
        shards = list((tmp_path / "batches" / f"probe_{name}").glob("round*.jsonl"))
        assert shards, f"no batch file for the {name} probe"
        bodies = [json.loads(line)["body"] for s in shards for line in s.read_text().splitlines()]
        assert len(bodies) == 8  # 4 candidates x 2 criteria
    assert "the probes wait for batch answers" in out.err and "probe_attribution" in out.err


# -- guards: one line, exit 2, nothing written ------------------------------------------------------------------------


def _rerun_by(path: Path, source: Path, **change) -> Path:
    lines = [Judgment.model_validate_json(line) for line in source.read_text().splitlines()]
    path.write_text("".join(j.model_copy(update=change).to_line() + "\n" for j in lines))
    return path


def _setup(tmp_path: Path) -> dict[str, Path]:
    files = {"items": write_items(tmp_path / "items.jsonl"), "judgments": write_judgments(tmp_path / "j.jsonl"),
             "labels": write_labels(tmp_path / "labels.csv")}
    prints = tmp_path / "printed.jsonl"  # the same judge with fingerprints, and a re-run by another model
    lines = [Judgment.model_validate_json(line) for line in files["judgments"].read_text().splitlines()]
    prints.write_text("".join(j.model_copy(update={"fingerprint": {"model": "m", "temperature": 1.0}}).to_line()
                              + "\n" for j in lines))
    files["printed"] = prints
    files["other"] = _rerun_by(tmp_path / "other.jsonl", prints, fingerprint={"model": "m2", "temperature": 1.0},
                               model="m2")
    bad = pd.read_csv(files["labels"])
    bad.loc[5, "score"] = 9
    bad.to_csv(tmp_path / "bad_labels.csv", index=False)
    (tmp_path / "calibrate.html").write_text("")  # replaced below by a real calibrate page
    return files


def _calibrate_page(tmp_path: Path, files) -> Path:
    page = tmp_path / "calibrate.html"
    page.unlink()
    assert main(["calibrate", "--judgments", str(files["judgments"]), "--human", str(files["labels"]),
                 "--bootstrap", "0", "--report", str(page)]) == 0
    return page


BAD = [
    ("labels off the rubric's 1-5 scale", lambda t, f: ["--human", str(t / "bad_labels.csv")],
     "bad_labels.csv:7", ""),
    ("a rerun by another model", lambda t, f: ["--judgments", str(f["printed"]), "--rerun", str(f["other"])],
     "is not a re-run of the judge of", "model 'm' -> 'm2'"),
    ("a negative bootstrap seed", lambda t, f: ["--bootstrap-seed", "-2"],
     "argument --bootstrap-seed: must be a whole number of at least 0, got '-2'", ""),
    ("a report of another verb", lambda t, f: ["--report", str(_calibrate_page(t, f))],
     "holds the report `judge calibrate` wrote", ""),
]


@pytest.mark.parametrize("extra, message, also", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_one_line_exit_2_nothing_written(tmp_path, capsys, extra, message, also):
    files = _setup(tmp_path)
    flags = extra(tmp_path, files)
    capsys.readouterr()
    before = {p: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    argv = ["audit", "--judgments", str(files["judgments"]), "--items", str(files["items"]), "--bootstrap", "100",
            "--output-dir", str(tmp_path / "out")]
    if "--judgments" in flags:
        argv[2] = flags[flags.index("--judgments") + 1]
        flags = [f for i, f in enumerate(flags) if f != "--judgments" and (i == 0 or flags[i - 1] != "--judgments")]
    try:
        code = main(argv + flags)
    except SystemExit as exc:  # argparse: its usage line, then one error line
        code = exc.code
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err.splitlines()[-1] and also in err and "Traceback" not in err, err
    assert {p: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before
    assert not (tmp_path / "out").exists()


def test_a_rerun_by_another_judge_on_purpose_is_said(tmp_path):
    files = _setup(tmp_path)
    result = audit(files["printed"], files["items"], rerun=files["other"], allow_different_judge=True, bootstrap=100)
    assert any("--rerun is another judge, used as the noise floor on purpose" in w and "model 'm' -> 'm2'" in w
               for w in result.warnings)
    with pytest.raises(CalibrationError, match="is not a re-run of the judge"):
        audit(files["printed"], files["items"], rerun=files["other"], bootstrap=100)
    # The same judge re-run is accepted as before.
    same = _rerun_by(tmp_path / "same.jsonl", files["printed"])
    assert not audit(files["printed"], files["items"], rerun=same, bootstrap=100).warnings


# -- real releases' shapes ---------------------------------------------------------------------------------------------


def _items(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def test_chinese_candidates_are_measured_in_characters_and_said(tmp_path):
    rows = [{"id": f"d{d}", "system": s, "dialogue": "用户：你好", "candidate": "退款" * n}
            for d in range(8) for s, n in (("a", 3), ("b", 6), ("c", 9))]
    lengths = read_items(_items(tmp_path / "zh.jsonl", rows))
    assert lengths.attrs["length_unit"] == "characters"
    assert sorted(lengths.query("item_id == 'd0'")["words"]) == [6, 12, 18]
    english = read_items(write_items(tmp_path / "en.jsonl"))
    assert english.attrs["length_unit"] == "words"
    judgments = tmp_path / "j.jsonl"
    judgments.write_text("".join(Judgment(id=r["id"], system=r["system"], criterion="coherence",
                                          score=float(len(r["candidate"]) % 5 + 1), rubric="csds@1",
                                          model="m").to_line() + "\n" for r in rows))
    text = audit(judgments, tmp_path / "zh.jsonl", bootstrap=100).text()
    assert "characters)" in text and "words)" not in text


def test_an_empty_candidate_is_length_zero_with_a_note(tmp_path):
    rows = [{"id": f"d{d}", "system": s, "dialogue": "A: hi", "candidate": "" if (d, s) == (2, "a") else w}
            for d in range(8) for s, w in (("a", "one two"), ("b", "one two three four"))]
    lengths = read_items(_items(tmp_path / "items.jsonl", rows)).set_index(["item_id", "system"])["words"]
    assert lengths[("d2", "a")] == 0 and lengths[("d3", "a")] == 2
    judgments = tmp_path / "j.jsonl"
    judgments.write_text("".join(Judgment(id=r["id"], system=r["system"], criterion="coherence", score=3.0,
                                          rubric="dialsummeval@1", model="m").to_line() + "\n" for r in rows))
    result = audit(judgments, tmp_path / "items.jsonl", bootstrap=100)
    assert "1 empty candidate(s) in --items: length 0" in result.warnings


def test_per_segment_scores_are_not_reasks(tmp_path):
    rows = [{"id": f"d{d}", "system": s, "dialogue": "A: hi", "candidate": "x " * (3 + k)}
            for d in range(8) for k, s in enumerate(("a", "b"))]
    items = _items(tmp_path / "items.jsonl", rows)
    judgments = tmp_path / "j.jsonl"
    judgments.write_text("".join(
        Judgment(id=r["id"], system=r["system"], criterion="coherence", score=2.0, samples=[1.0, 3.0],
                 segments=[{"text": "one", "score": 1.0}, {"text": "two", "score": 3.0}], rubric="csds@1",
                 model="m").to_line() + "\n" for r in rows))
    noise = audit(judgments, items, bootstrap=100).noise
    assert noise.empty or not (noise["changed_share"] > 0).any()  # segments disagreeing is not re-run noise


def test_every_pair_of_a_dialogues_systems_is_accepted(tmp_path):
    systems = ["a", "b", "c"]
    pairs = [(x, y) for i, x in enumerate(systems) for y in systems[i + 1:]]
    rows = [{"id": f"p{d}", "dialogue": "A: hi", "system_1": x, "system_2": y, "candidate_1": "short " * (1 + i),
             "candidate_2": "a longer one " * (2 + i)} for d in range(6) for i, (x, y) in enumerate(pairs)]
    items = _items(tmp_path / "pairs.jsonl", rows)
    judgments = tmp_path / "j.jsonl"
    judgments.write_text("".join(
        Judgment(id=r["id"], system=f"{r['system_1']}|{r['system_2']}", system_1=r["system_1"],
                 system_2=r["system_2"], criterion="overall", label="2", samples=["2", "2"],
                 orders={"forward": "2", "swapped": "2"}, rubric="pairwise_summary@1", model="m").to_line() + "\n"
        for r in rows))
    result = audit(judgments, items, bootstrap=100)
    assert result.mode == "pairwise" and len(result.length) == 1


# -- each rule alone -------------------------------------------------------------------------------------------------


def test_ties_are_not_decided_in_the_first_shown_share():
    from calibration.trust.dialogues import Dialogues
    from calibration.trust.position import pairwise_position

    # forward / swapped verdicts read back in the input's order; "0" is a tie. First-shown wins: forward "1",
    # swapped "2". Decided: every verdict that is not a tie.
    verdicts = [("1", "0"), ("1", "1"), ("0", "0"), ("2", "2"), ("1", "2"), ("0", "2")] * 3
    judge = pd.DataFrame([{"item_id": f"p{k // 2}", "system": "a|b", "system_1": "a", "system_2": "b",
                           "criterion": "overall", "label": f, "forward": f, "swapped": s, "status": "label"}
                          for k, (f, s) in enumerate(verdicts)])
    rows = pairwise_position(judge, None, Dialogues(judge["item_id"], 100, 0), "overall")
    overall = next(r for r in rows if r["stratum"] == "all")
    first = sum((f == "1") + (s == "2") for f, s in verdicts)
    decided = sum((f != "0") + (s != "0") for f, s in verdicts)
    assert overall["first_shown_wins"] == pytest.approx(first / decided)
    assert overall["flip_rate"] == pytest.approx(sum(f != s for f, s in verdicts) / len(verdicts))


@pytest.mark.parametrize("criterion, probe_score, faithful, raises", [
    ("coherence", 2.0, False, False),  # moved down on a criterion filler must not move: not faithful
    ("coherence", 4.0, False, True),
    ("concision", 2.0, True, False),  # filler may lower concision: moving down is faithful there
    ("concision", 4.0, False, True),
])
def test_the_probe_rule_moved_raises_faithful(criterion, probe_score, faithful, raises):
    from calibration.trust.dialogues import Dialogues
    from calibration.trust.probes import probe_table

    keys = [(f"d{i}", "s") for i in range(12)]
    judge = pd.DataFrame([{"item_id": i, "system": s, "criterion": criterion, "score": 3.0, "label": None,
                           "status": "ok"} for i, s in keys])
    probed = judge.assign(score=probe_score)
    table = probe_table(judge, {"filler": (probed, keys)}, pd.DataFrame(columns=["criterion", "changed_share"]),
                        Dialogues(judge["item_id"], 100, 0), [criterion])
    row = table.iloc[0]
    assert bool(row["moved"]) and bool(row["faithful"]) == faithful and bool(row["raises"]) == raises
    assert np.sign(row["mean_shift"]) == np.sign(probe_score - 3.0)


def test_the_family_is_holm_over_every_finding():
    from statsmodels.stats.multitest import multipletests

    from calibration.trust.family import _p_from_interval, family_wise

    # Twelve findings each just significant alone (p ~ 0.02), and one strong one: Holm keeps only the strong one.
    length = pd.DataFrame({"criterion": [f"c{k}" for k in range(12)], "excess_slope": 0.5, "excess_ci_low": 0.05,
                           "excess_ci_high": 0.95, "human_slope": 0.3})
    strong = pd.DataFrame({"criterion": ["c0"], "self_preference": [1.0], "ci_low": [0.8], "ci_high": [1.2]})
    tested = family_wise(length, pd.DataFrame(columns=["position_slope"]), strong, dialogues=40)
    p = [_p_from_interval(0.5, 0.05, 0.95, 40)] * 12 + [_p_from_interval(1.0, 0.8, 1.2, 40)]
    assert tested == 13 and 0.01 < p[0] < 0.05
    assert list(length["p_adjusted"]) + list(strong["p_adjusted"]) == pytest.approx(
        list(multipletests(p, method="holm")[1]))
    assert not length["effect"].any() and strong["effect"].all()
