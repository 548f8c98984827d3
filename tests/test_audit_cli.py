"""`judge audit` end to end: judgments JSONL as `score` (with --samples), block mode and `compare` write them, the
tables and sentences, the report in a real headless browser, bad input table-driven (one line, exit 2, nothing
written), and DECODA's DeepSeek-R1 judge: its length slopes beside the humans'."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import browser_dom, needs_chromium

from calibration.errors import CalibrationError
from calibration.trust.audit import audit
from calibration.trust.probes import FILLER
from judge.cli import main
from judge.judgment import Judgment

SYSTEMS = ["short", "mid", "long"]


def _candidate(system: str, dialogue: int) -> str:
    words = {"short": 6, "mid": 12, "long": 20}[system] + dialogue % 3
    return " ".join(["word"] * words) + "."


def write_items(path: Path, dialogues: int = 12) -> Path:
    with path.open("w", encoding="utf-8") as out:
        for d in range(dialogues):
            for system in SYSTEMS:
                out.write(json.dumps({"id": f"d{d}", "system": system, "dialogue": f"A: hello {d}\nB: bye",
                                      "candidate": _candidate(system, d)}) + "\n")
    return path


def write_judgments(path: Path, dialogues: int = 12, rubric: str = "dialsummeval@1", block: bool = False,
                    other_rubric_on: int | None = None) -> Path:
    """Scores rising with length; three samples each, one of them a changed re-ask on every other judgment."""
    rng = np.random.default_rng(0)
    with path.open("w", encoding="utf-8") as out:
        for d in range(dialogues):
            letters = rng.permutation(["A", "B", "C"])
            for k, system in enumerate(SYSTEMS):
                for criterion in ("coherence", "relevance"):
                    score = float(2 + k + (d % 2))
                    samples = [score, score, score + 1] if (d + k) % 2 else [score] * 3
                    judgment = Judgment(id=f"d{d}", system=system, criterion=criterion, score=float(np.mean(samples)),
                                        samples=samples, rubric="other@1" if d == other_rubric_on else rubric,
                                        model="m", position=str(letters[k]) if block else None)
                    out.write(judgment.to_line() + "\n")
    return path


def write_labels(path: Path, dialogues: int = 12) -> Path:
    # Quality mostly follows length (the system), not always ((d + k) % 3), so length and quality can be told apart.
    rows = [{"item_id": f"d{d}", "system": s, "annotator": a, "criterion": c,
             "score": 2 + k + ((d + k) % 3 == 0) - (k == 2) * ((d + k) % 3 == 0) + (a == "x") * (d % 2)}
            for d in range(dialogues) for k, s in enumerate(SYSTEMS) for a in ("x", "y")
            for c in ("coherence", "relevance")]
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def write_pairs(tmp_path: Path, dialogues: int = 10) -> tuple[Path, Path]:
    items, judgments = tmp_path / "pairs.jsonl", tmp_path / "pair_judgments.jsonl"
    with items.open("w") as i_out, judgments.open("w") as j_out:
        for d in range(dialogues):
            i_out.write(json.dumps({"id": f"p{d}", "dialogue": "A: hi", "system_1": "terse", "system_2": "wordy",
                                    "candidate_1": "Short one.", "candidate_2": "A much longer summary " * 3}) + "\n")
            forward = "2" if d % 3 else "1"  # the first shown wins in the forward order every third pair
            swapped = "2"
            j_out.write(Judgment(id=f"p{d}", system="terse|wordy", system_1="terse", system_2="wordy",
                                 criterion="overall", label=forward if forward == swapped else "0",
                                 samples=[forward, swapped], orders={"forward": forward, "swapped": swapped},
                                 order_disagreement=forward != swapped, rubric="pairwise_summary@1").to_line() + "\n")
    return items, judgments


def test_cli_writes_every_table_and_one_sentence_per_finding(tmp_path, capsys):
    items, judgments = write_items(tmp_path / "items.jsonl"), write_judgments(tmp_path / "j.jsonl", block=True)
    labels = write_labels(tmp_path / "labels.csv")
    out = tmp_path / "audit"
    code = main(["audit", "--judgments", str(judgments), "--items", str(items), "--human", str(labels),
                 "--self", "long", "--output-dir", str(out), "--bootstrap", "200"])
    printed = capsys.readouterr().out
    assert code == 0
    assert sorted(p.name for p in out.glob("*.csv")) == ["agreement.csv", "length.csv", "length_controlled.csv",
                                                         "noise.csv", "position.csv", "self_preference.csv"]
    length = pd.read_csv(out / "length.csv")
    for column in ("criterion", "judge_slope", "judge_slope_ci_low", "judge_slope_ci_high", "human_slope",
                   "human_slope_ci_low", "human_slope_ci_high", "excess_slope", "excess_ci_low", "excess_ci_high"):
        assert column in length.columns
    assert (length["judge_slope"] > 0).all() and length["excess_slope"].notna().all()
    position = pd.read_csv(out / "position.csv")
    for column in ("criterion", "mode", "n", "flip_rate", "ci_low", "ci_high", "first_shown_wins"):
        assert column in position.columns
    assert set(position["mode"]) == {"block"} and position["position_slope"].notna().all()
    # Noise from the samples: every other judgment has one changed re-ask in three (2 of 3 pairs differ).
    noise = pd.read_csv(out / "noise.csv")
    assert set(noise["source"]) == {"samples"}
    assert noise["changed_share"].to_numpy() == pytest.approx([1 / 3, 1 / 3], abs=0.02)
    assert ("beyond what quality explains, the judge adds" in printed
            and "re-run noise changes 33% of verdicts" in printed)
    assert "each later letter in the block" in printed and "the judge rates long" in printed
    assert printed.count("\n") == len(audit(judgments, items, labels, self_systems="long", bootstrap=200).sentences)


def test_rerun_is_the_noise_floor_and_the_python_function_takes_dataframes(tmp_path):
    from calibration.io import load_judge_scores

    items, judgments = write_items(tmp_path / "items.jsonl"), write_judgments(tmp_path / "j.jsonl")
    frame = load_judge_scores(judgments)
    rerun = frame.copy()
    changed = rerun.index % 4 == 0
    rerun.loc[changed, "score"] += 1
    result = audit(frame, pd.read_json(items, lines=True), rerun=rerun, bootstrap=100)
    noise = result.noise.set_index("criterion")
    assert set(noise["source"]) == {"rerun"}
    expected = pd.Series(changed, index=frame.index).groupby(frame["criterion"]).mean()
    assert noise["changed_share"].to_dict() == pytest.approx(expected.to_dict())
    assert "without human labels this cannot separate" in result.text()
    # A judge on another scale than the humans' (a 0-1 metric against 1-5 labels) is warned about.
    labels = write_labels(tmp_path / "labels.csv")
    scaled = audit(frame.assign(score=frame["score"] / 50), items, labels, bootstrap=50)
    assert any("on different scales" in w for w in scaled.warnings)
    assert not audit(frame, items, labels, bootstrap=50).warnings
    assert set(result.files()) == {"noise.csv", "length.csv", "length_controlled.csv", "position.csv",
                                   "self_preference.csv"}


def test_pairwise_flip_rate_first_shown_and_longer(tmp_path, capsys):
    items, judgments = write_pairs(tmp_path)
    result = audit(judgments, items, bootstrap=200)
    row = result.position.iloc[0]
    forward = ["2" if d % 3 else "1" for d in range(10)]
    assert row["mode"] == "pairwise" and row["n"] == 10
    assert row["flip_rate"] == pytest.approx(np.mean([f != "2" for f in forward]))
    # forward "1" and swapped "2" are first-shown wins; every verdict is decided.
    assert row["first_shown_wins"] == pytest.approx((sum(f == "1" for f in forward) + 10) / 20)
    length = result.length.iloc[0]
    assert length["prefers_longer"] == pytest.approx(1.0) and length["n_pairs"] == 6  # the agreeing pairs
    assert "prefers the longer candidate in 100%" in result.text()
    assert "lengths differ by more than 10% of the longer" in result.text()
    assert "more than 20% of the longer" in audit(judgments, items, bootstrap=50, length_threshold=0.2).text()
    # One sample per order: the two orders are not re-asks of one prompt, so there is no noise floor.
    assert result.noise.iloc[0]["source"] == "none" and "re-run noise unknown" in result.text()
    # With labels: the humans' rate beside the judge's, and position broken down by the human quality gap.
    labels = tmp_path / "pair_labels.csv"
    pd.DataFrame([{"item_id": f"p{d}", "system": s, "annotator": "x", "criterion": "overall",
                   "score": {"terse": 3, "wordy": 3 + (d % 2) * 2}[s]} for d in range(10) for s in ("terse", "wordy")]
                 ).to_csv(labels, index=False)
    labelled = audit(judgments, items, labels, bootstrap=200)
    strata = labelled.position.set_index("stratum")
    assert strata.loc["human gap < 0.5", "n"] == 5 and strata.loc["human gap >= 1.5", "n"] == 5
    assert labelled.length.iloc[0]["human_prefers_longer"] == pytest.approx(1.0)  # humans decided 5, all longer
    assert "(humans 100%" in labelled.text()
    # Self-preference on pairs: the judge always picks "wordy" (forward "2" twice in three), humans half the time.
    own = audit(judgments, items, labels, self_systems="wordy", bootstrap=200).self_preference.iloc[0]
    judge_win = np.array([1.0 if f == "2" else 0.5 for f in forward])  # a flip is a tie
    human_win = np.array([1.0 if d % 2 else 0.5 for d in range(10)])
    assert own["judge_gap"] == pytest.approx(judge_win.mean() - 0.5)
    assert own["self_preference"] == pytest.approx((judge_win - human_win).mean())


def test_a_dataframe_of_judgments_mixing_rubrics_is_refused(tmp_path):
    from calibration.io import load_judge_scores

    items, judgments = write_items(tmp_path / "items.jsonl"), write_judgments(tmp_path / "j.jsonl")
    frame = load_judge_scores(judgments)
    frame.loc[frame.index[:3], "rubric"] = "other@1"
    with pytest.raises(CalibrationError, match=r"judgments of 2 judges in one file: rubric other@1"):
        audit(frame, items)


@needs_chromium
def test_the_report_renders_every_plot_in_a_browser(tmp_path, capsys):
    items, judgments = write_items(tmp_path / "items.jsonl"), write_judgments(tmp_path / "j.jsonl", block=True)
    labels = write_labels(tmp_path / "labels.csv")
    report = tmp_path / "audit.html"
    assert main(["audit", "--judgments", str(judgments), "--items", str(items), "--human", str(labels),
                 "--self", "long", "--report", str(report), "--bootstrap", "200"]) == 0
    dom, images = browser_dom(report, tmp_path)
    assert images >= 4 and "Judge audit" in dom and "Audit: self-preference" in dom
    assert f'data-images-rendered="{images}/{images}"' in dom
    assert "beyond what quality explains" in dom


# -- bad input: one line naming the problem, exit 2, nothing written -------------------------------------------------
BAD = [
    ("mixed rubrics", lambda t: ["--judgments", str(write_judgments(t / "j.jsonl", other_rubric_on=3))],
     "judgments of 2 judges in one file: rubric dialsummeval@1 / model m (from line 1); rubric other@1"),
    ("--self system that does not exist", lambda t: ["--self", "gpt-9"], "--self: no system 'gpt-9'"),
    ("items not matching the judgments", lambda t: ["--items", str(write_items(t / "few.jsonl", dialogues=5))],
     "base.jsonl:31: no item with id 'd5' and system 'short' in --items (and 41 more judgments)"),
    ("items lacking exactly one judgment's summary", lambda t: _one_judgment_unmatched(t),
     "in --items: the items file must be the one that was judged"),  # one missing: no "(and 0 more ...)"
    ("a rerun with no judgment in common", lambda t: ["--rerun", str(write_pairs(t)[1])],
     "has no judgment in common"),
    ("labels with no criterion in common", lambda t: ["--human", str(_other_criterion_labels(t))],
     "--human: no criterion in common"),
    ("--bootstrap 0", lambda t: ["--bootstrap", "0"], "--bootstrap must be a whole number of at least 40, got 0"),
    ("a missing judgments file", lambda t: ["--judgments", str(t / "nope.jsonl")], "nope.jsonl: no such file"),
    ("an unknown criterion", lambda t: ["--criteria", "fluency"], "--criteria: no judgments for criterion 'fluency'"),
]


def _one_judgment_unmatched(tmp_path: Path) -> list[str]:
    """The last summary left out of the items and its last criterion out of the judgments: one judgment (its other
    criterion's) has no item."""
    items, judgments = write_items(tmp_path / "all_but_one.jsonl"), write_judgments(tmp_path / "one_criterion.jsonl")
    for path in (items, judgments):
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        path.write_text("".join(lines[:-1]), encoding="utf-8")
    return ["--items", str(items), "--judgments", str(judgments)]


def _other_criterion_labels(tmp_path: Path) -> Path:
    path = tmp_path / "other.csv"
    pd.DataFrame([{"item_id": "d0", "system": "short", "annotator": "x", "criterion": "fluency", "score": 3}]).to_csv(
        path, index=False)
    return path


@pytest.mark.parametrize("name, extra, message", BAD, ids=[row[0] for row in BAD])
def test_bad_input_one_line_exit_2_nothing_written(tmp_path, capsys, name, extra, message):
    items, judgments = write_items(tmp_path / "items.jsonl"), write_judgments(tmp_path / "base.jsonl")
    args = {"--judgments": str(judgments), "--items": str(items)}
    given = extra(tmp_path)
    for flag, value in zip(given[::2], given[1::2]):
        args[flag] = value
    out, report = tmp_path / "out", tmp_path / "r.html"
    argv = ["audit", *[x for pair in args.items() for x in pair], "--output-dir", str(out), "--report", str(report)]
    before = {p: p.read_bytes() for p in tmp_path.glob("*") if p.is_file()}
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err, err
    assert not out.exists() and not report.exists()
    assert {p: p.read_bytes() for p in tmp_path.glob("*") if p.is_file()} == before


def test_a_wide_metric_csv_is_read_as_calibrate_reads_it(tmp_path, capsys):
    """--score-column: one metric column stands for every labelled criterion."""
    items, labels = write_items(tmp_path / "items.jsonl"), write_labels(tmp_path / "labels.csv")
    metric = tmp_path / "metric_scores.csv"
    frame = pd.read_json(items, lines=True)
    pd.DataFrame({"id": frame["id"], "system": frame["system"],
                  "words_metric": frame["candidate"].str.split().str.len() / 4}).to_csv(metric, index=False)
    assert main(["audit", "--judgments", str(metric), "--score-column", "words_metric", "--items", str(items),
                 "--human", str(labels), "--output-dir", str(tmp_path / "out"), "--bootstrap", "100"]) == 0
    length = pd.read_csv(tmp_path / "out" / "length.csv").set_index("criterion")
    assert set(length.index) == {"coherence", "relevance"}
    # The metric is a quarter of the words: its slope is a quarter of the length SD in words, exactly.
    assert length["judge_slope"].to_numpy() == pytest.approx(length["length_sd_words"].to_numpy() / 4)
    assert "beyond what quality explains" in capsys.readouterr().out


def test_python_function_raises_the_clis_message_and_never_exits(tmp_path):
    items, judgments = write_items(tmp_path / "items.jsonl"), write_judgments(tmp_path / "j.jsonl")
    with pytest.raises(CalibrationError, match="--self: no system 'nope'"):
        audit(judgments, items, self_systems="nope")
    with pytest.raises(CalibrationError, match="--length-threshold"):
        audit(judgments, items, length_threshold=2)


# -- real data: DECODA's DeepSeek-R1 judge ---------------------------------------------------------------------------
SHARED = Path(os.environ.get("JUDGE_SHARED_DATA", Path(__file__).resolve().parents[1].parent / "shared" / "data"))
DECODA = SHARED / "decoda_llm_sum_guidelines"


def _iv_excess(units: pd.DataFrame, z: pd.Series, criterion: str) -> float:
    from statsmodels.sandbox.regression.gmm import IV2SLS

    raw = pd.read_csv(DECODA / "annotations.csv")
    raw = raw[raw["criterion"] == criterion].sort_values("annotator")
    grouped = raw.groupby(["item_id", "system"])["score"]
    halves = pd.DataFrame({"a": grouped.first(), "b": grouped.apply(lambda s: s.iloc[1:].mean() if len(s) > 1
                                                                     else np.nan)}).reset_index()
    data = units.assign(z=z.to_numpy()).merge(halves, on=["item_id", "system"]).dropna(subset=["a", "b"])
    demeaned = {c: data[c] - data.groupby("item_id")[c].transform("mean") for c in ("score", "a", "b", "z")}
    fit = IV2SLS(demeaned["score"].to_numpy(), np.column_stack([demeaned["a"], demeaned["z"]]),
                 np.column_stack([demeaned["b"], demeaned["z"]])).fit()
    return fit.params[1]  # b: the judge's length effect beyond quality, in its points


@pytest.mark.skipif(not (DECODA / "annotations.csv").exists(),
                    reason=f"DECODA data not found at {DECODA} (set JUDGE_SHARED_DATA)")
def test_decoda_judge_length_slopes_beside_the_humans(tmp_path, capsys):
    """Items built from the release's items.csv (dialogues) and outputs.csv (summaries), in the test's scratch."""
    dialogues = pd.read_csv(DECODA / "items.csv").set_index("item_id")["dialogue"]
    outputs = pd.read_csv(DECODA / "outputs.csv")
    items = pd.DataFrame({"id": outputs["item_id"], "system": outputs["system"],
                          "dialogue": outputs["item_id"].map(dialogues), "candidate": outputs["summary"]})
    path = tmp_path / "items.jsonl"
    items.to_json(path, orient="records", lines=True, force_ascii=False)
    code = main(["audit", "--judgments", str(DECODA / "judge_scores.csv"), "--items", str(path),
                 "--human", str(DECODA / "annotations.csv"), "--output-dir", str(tmp_path / "out")])
    printed = capsys.readouterr().out
    assert code == 0
    length = pd.read_csv(tmp_path / "out" / "length.csv").set_index("criterion")
    assert set(length.index) == {"faithfulness", "main_issues", "resolution", "sub_issues"}
    # Independent check: the within-dialogue least-squares slope (numpy lstsq with dialogue dummies).
    judge = pd.read_csv(DECODA / "judge_scores.csv")
    labels = pd.read_csv(DECODA / "annotations.csv").groupby(["item_id", "system", "criterion"], as_index=False)[
        "score"].mean().rename(columns={"score": "human"})
    words = outputs.assign(words=outputs["summary"].str.split().str.len())[["item_id", "system", "words"]]
    for criterion in length.index:
        units = judge[judge["criterion"] == criterion].merge(labels, on=["item_id", "system", "criterion"]).merge(
            words, on=["item_id", "system"])
        centred = units["words"] - units.groupby("item_id")["words"].transform("mean")
        z = centred / np.sqrt((centred ** 2).sum() / (len(units) - units["item_id"].nunique()))
        design = np.column_stack([z, pd.get_dummies(units["item_id"], dtype=float)])
        for column, key in (("score", "judge_slope"), ("human", "human_slope")):
            slope = np.linalg.lstsq(design, units[column], rcond=None)[0][0]
            assert length.loc[criterion, key] == pytest.approx(slope, abs=1e-9)
        row = length.loc[criterion]
        assert row["judge_slope_ci_low"] < row["judge_slope"] < row["judge_slope_ci_high"]
        # The excess: the judge's length effect beyond quality, by 2SLS with dialogue effects (statsmodels' IV2SLS
        # on dialogue-demeaned data): judge ~ g h_a + b z, instruments h_b and z, where h_a is the first annotator
        # (by name) and h_b the mean of the others; excess = b.
        if np.isfinite(row["excess_slope"]):
            assert row["excess_slope"] == pytest.approx(_iv_excess(units, z, criterion), rel=1e-8)
            assert f"{criterion}: beyond what quality explains" in printed
        else:  # too few dialogues with two readings (N/A-heavy sub-issues), or readings that do not agree
            assert ("not identified here" in row["note"] or "fewer than 8 dialogues" in row["note"]) \
                and not row["effect"]
    # Both the judge and the humans reward longer summaries on DECODA; the judge never more than quality explains.
    assert (length["judge_slope"] > 0).all() and (length["human_slope"] > 0).all()
    assert not (length["excess_ci_low"] > 0).any()


# -- probes: perturbed copies judged through the engine against a real HTTP server (tests/stub_server.py) ----------


def _judge(stub, tmp_path: Path, items: Path, output: str, *extra: str) -> Path:
    assert main(["score", "--rubric", "dialsummeval", "--input", str(items), "--output", str(tmp_path / output),
                 "--criteria", "coherence,relevance", "--backend", "openai", "--base-url", stub.base_url,
                 "--model", "stub", "--cache", str(tmp_path / "cache"), "--no-progress", *extra]) == 0
    return tmp_path / output


def _audit_probes(stub, tmp_path, judgments, items, probes: str, *extra: str) -> int:
    return main(["audit", "--judgments", str(judgments), "--items", str(items), "--probe", probes,
                 "--rubric", "dialsummeval", "--probe-sample", "4", "--output-dir", str(tmp_path / "audit"),
                 "--bootstrap", "100", "--backend", "openai", "--base-url", stub.base_url, "--model", "stub",
                 "--cache", str(tmp_path / "cache"), "--no-progress", *extra])


def test_probes_judge_perturbed_copies_and_a_rerun_asks_nothing(stub_server, tmp_path, capsys):
    items = write_items(tmp_path / "items.jsonl", dialogues=6)
    judgments = _judge(stub_server, tmp_path, items, "j.jsonl")
    asked = stub_server.stats.total
    assert _audit_probes(stub_server, tmp_path, judgments, items, "filler,attribution") == 0
    printed = capsys.readouterr().out
    probes = pd.read_csv(tmp_path / "audit" / "probes.csv")
    assert set(probes["probe"]) == {"filler", "attribution"} and set(probes["criterion"]) == {"coherence",
                                                                                              "relevance"}
    assert (probes["n"] == 4).all()
    # The stub answers every question alike: nothing moves, and the table says the judge is faithful.
    assert (probes["robustness"] == 1.0).all() and (probes["mean_shift"] == 0).all() and probes["faithful"].all()
    assert "the filler probe leaves 100% of 4 verdicts unchanged" in printed
    # The perturbed copies were really asked: 4 candidates x 2 criteria x 2 probes new prompts.
    assert stub_server.stats.total - asked == 16
    probed = [json.loads(line) for line in (tmp_path / "audit" / "probe_filler_items.jsonl").read_text().splitlines()]
    assert all(r["candidate"].endswith("I hope this summary is helpful.") for r in probed)
    attributed = (tmp_path / "audit" / "probe_attribution_items.jsonl").read_text().splitlines()
    assert all(json.loads(r)["candidate"].startswith("Summary written by GPT-4") for r in attributed)
    # A rerun resumes from the kept probe judgments: no request at all; its report draws the probes' shifts.
    before = stub_server.stats.total
    report = tmp_path / "probes.html"
    assert _audit_probes(stub_server, tmp_path, judgments, items, "filler,attribution", "--report", str(report)) == 0
    assert stub_server.stats.total == before
    page = report.read_text()
    assert "Audit: probes" in page and 'alt="probe shifts"' in page and "the attribution probe leaves 100%" in page


def test_order_probe_reshuffles_blocks(stub_server, tmp_path, capsys):
    items = write_items(tmp_path / "items.jsonl", dialogues=6)
    judgments = _judge(stub_server, tmp_path, items, "j.jsonl", "--mode", "block")
    assert _audit_probes(stub_server, tmp_path, judgments, items, "order") == 0
    probes = pd.read_csv(tmp_path / "audit" / "probes.csv")
    assert (probes["n"] == 12).all()  # 4 dialogues x 3 candidates, every one compared
    shown = {}
    for line in (tmp_path / "audit" / "probe_order.jsonl").read_text().splitlines():
        j = json.loads(line)
        shown[(j["id"], j["system"])] = j["position"]
    original = {(j["id"], j["system"]): j["position"] for j in map(json.loads, judgments.read_text().splitlines())}
    assert any(original[k] != v for k, v in shown.items())  # another shuffle
    # filler in block mode: each sampled block is shown whole, with one candidate perturbed and compared.
    assert _audit_probes(stub_server, tmp_path, judgments, items, "filler") == 0
    probed = [json.loads(line) for line in (tmp_path / "audit" / "probe_filler_items.jsonl").read_text().splitlines()]
    assert len(probed) == 12 and sum(r["candidate"].endswith(FILLER) for r in probed) == 4
    assert (pd.read_csv(tmp_path / "audit" / "probes.csv").query("probe == 'filler'")["n"] == 4).all()


PROBE_BAD = [  # (case, --probe, flags dropped, flags added, message)
    ("order on pointwise judgments", "order", [], [], "--probe order reshuffles a block"),
    ("an unknown probe", "padding", [], [], "--probe: unknown probe 'padding'"),
    ("a probe without --output-dir", "filler", ["--output-dir"], [], "--probe needs --output-dir"),
    ("other --samples than the judgments'", "filler", [], ["--samples", "3"],
     "--samples 3, but the judgments were made with samples 1: probe with the same settings"),
    ("another temperature", "filler", [], ["--temperature", "0.7"],
     "--temperature 0.7, but the judgments were made with temperature 0.0"),
]


@pytest.mark.parametrize("name, probes, drop, extra, message", PROBE_BAD, ids=[row[0] for row in PROBE_BAD])
def test_probe_bad_input(stub_server, tmp_path, capsys, name, probes, drop, extra, message):
    items = write_items(tmp_path / "items.jsonl", dialogues=4)
    judgments = _judge(stub_server, tmp_path, items, "j.jsonl")
    asked = stub_server.stats.total
    argv = ["audit", "--judgments", str(judgments), "--items", str(items), "--probe", probes, "--rubric",
            "dialsummeval", "--output-dir", str(tmp_path / "audit"), "--base-url", stub_server.base_url,
            "--model", "stub", "--cache", str(tmp_path / "cache"), *extra]
    for flag in drop:
        at = argv.index(flag)
        del argv[at:at + 2]
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err, err
    assert not (tmp_path / "audit").exists() and stub_server.stats.total == asked


def test_pairwise_rubric_cannot_take_a_probe(tmp_path, capsys):
    items, judgments = write_pairs(tmp_path)
    assert main(["audit", "--judgments", str(judgments), "--items", str(items), "--probe", "filler", "--rubric",
                 "pairwise_summary", "--output-dir", str(tmp_path / "audit")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "compares pairs; probes perturb the candidates" in err, err
    assert not (tmp_path / "audit").exists()


def test_probe_items_are_kept_as_utf8_and_rewritten_when_the_sample_changes(stub_server, tmp_path, capsys):
    """The probes' perturbed items are kept in --output-dir as readable UTF-8 JSON lines (an accented candidate
    stays accented, not \\u-escaped); a rerun with another --probe-sample rewrites them, and the probes are judged
    on the new sample (5 candidates, not the 4 kept from before)."""
    items = write_items(tmp_path / "items.jsonl", dialogues=6)
    records = [json.loads(line) for line in items.read_text(encoding="utf-8").splitlines()]
    items.write_text("".join(json.dumps({**r, "candidate": r["candidate"] + " Café crème."}, ensure_ascii=False)
                             + "\n" for r in records), encoding="utf-8")
    judgments = _judge(stub_server, tmp_path, items, "j.jsonl")
    assert _audit_probes(stub_server, tmp_path, judgments, items, "filler") == 0
    kept = tmp_path / "audit" / "probe_filler_items.jsonl"
    assert "Café crème." in kept.read_text(encoding="utf-8")
    assert len(kept.read_text(encoding="utf-8").splitlines()) == 4
    assert _audit_probes(stub_server, tmp_path, judgments, items, "filler", "--probe-sample", "5") == 0
    assert len(kept.read_text(encoding="utf-8").splitlines()) == 5
    assert (pd.read_csv(tmp_path / "audit" / "probes.csv")["n"] == 5).all()


def test_a_judge_scoring_every_summary_alike_is_said_to_show_no_length_effect_not_to_have_none(tmp_path):
    """The quick start's embedded model gave every summary a 1: the length slope is exactly 0 in every resample.
    The sentence says the judge cannot show a length effect (and points at qualify), instead of reporting a
    measured +0.00 [+0.00, +0.00] as if the judge had been found free of one."""
    quick = Path(__file__).resolve().parents[1] / "examples" / "quickstart"
    result = audit(quick / "judgments.jsonl", quick / "items.jsonl", bootstrap=50)
    length = result.length.set_index("criterion")
    assert (length[["judge_slope", "judge_slope_ci_low", "judge_slope_ci_high"]] == 0).all().all()
    said = [s for s in result.sentences if "length effect can show" in s]
    assert sorted(s.split(":")[0] for s in said) == sorted(length.index) and all("judge qualify" in s for s in said)
    assert not any("+0.00 points per SD" in s for s in result.sentences)
