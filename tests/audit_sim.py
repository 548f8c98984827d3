"""Plant and recover for `judge audit`'s length and self-preference findings on the hard cases: a judge on another
scale (gain 0.5-1.5) with no taste, length going with quality, skewed Likert labels from two annotators with gaps,
deterministic or noisy judges. Used by tests/test_audit_sim.py (reduced) and run by hand for the full table:

    python tests/audit_sim.py 400
"""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd

from calibration.trust.dialogues import Dialogues
from calibration.trust.family import family_wise
from calibration.trust.length import length_slopes
from calibration.trust.self_preference import self_preference

SYSTEMS = [f"s{k}" for k in range(5)]


def study(rng, dialogues=20, gain=1.0, length_quality=0.45, judge_length=0.0, self_bonus=0.0, judge_noise=0.3,
          likert=True, gaps=0.2, read_twice=1.0):
    """One simulated audit input: judge frame, words frame, humans (mean and two readings), planted b (points)."""
    n = len(SYSTEMS)
    ids = np.repeat([f"d{d:03d}" for d in range(dialogues)], n)
    quality = rng.normal(0, 1, (dialogues, n)) + np.linspace(-0.4, 0.4, n)
    quality -= quality.mean(axis=1, keepdims=True)
    z = length_quality * quality + np.sqrt(1 - length_quality ** 2) * rng.normal(0, 1, (dialogues, n))
    words = np.round(40 + 10 * z + 8 * rng.normal(0, 1, (dialogues, 1))).clip(3)
    own = np.tile(np.arange(n) == 0, (dialogues, 1))
    judge = 3 + gain * quality + judge_length * z + self_bonus * own + judge_noise * rng.normal(0, 1, quality.shape)

    def reading():
        value = 3.4 + 0.8 * quality + 0.6 * rng.normal(0, 1, quality.shape)
        return np.clip(np.round(value), 1, 5) if likert else value

    a, b = reading(), reading()
    b[rng.random(b.shape) < gaps] = np.nan  # a second annotator on most summaries, not all
    b[rng.random(dialogues) >= read_twice] = np.nan  # ... and only on this share of the dialogues
    if likert:
        judge = np.clip(np.round(judge), 1, 5)
    human = np.where(np.isnan(b), a, (a + b) / 2)
    frame = lambda values: values.ravel()  # noqa: E731
    judge_frame = pd.DataFrame({"item_id": ids, "system": np.tile(SYSTEMS, dialogues), "criterion": "c",
                                "score": frame(judge), "status": "ok"})
    words_frame = judge_frame[["item_id", "system"]].assign(words=frame(words), item_system=judge_frame["system"])
    human_frame = judge_frame[["item_id", "system", "criterion"]].assign(human=frame(human), human_a=frame(a),
                                                                        human_b=frame(b))
    return judge_frame, words_frame, human_frame


def rates(repetitions: int, dialogues: int, seed: int = 0, **planted) -> dict:
    """Share of audits whose length / self-preference interval excludes 0, covers the planted b, and whose
    Holm-corrected family (length + self-preference) raises any flag."""
    rng = np.random.default_rng(seed)
    out = {"length_flag": [], "self_flag": [], "length_covers": [], "self_covers": [], "any_flag": [],
           "printed": []}
    for rep in range(repetitions):
        judge, words, human = study(rng, dialogues, **planted)
        boot = Dialogues(judge["item_id"], 400, rep)
        length = pd.DataFrame([length_slopes(judge, words, human, boot, "c")])
        own = pd.DataFrame([self_preference(judge, human, boot, "c", ["s0"])])
        low, high = length["excess_ci_low"].iloc[0], length["excess_ci_high"].iloc[0]
        out["printed"].append(np.isfinite(low))
        want_length = planted.get("judge_length", 0.0) * _z_scale(words)
        out["length_flag"].append(bool(np.isfinite(low) and (low > 0 or high < 0)))
        out["length_covers"].append(bool(np.isfinite(low) and low <= want_length <= high))
        s_low, s_high = own["ci_low"].iloc[0], own["ci_high"].iloc[0]
        out["self_flag"].append(bool(np.isfinite(s_low) and (s_low > 0 or s_high < 0)))
        out["self_covers"].append(bool(np.isfinite(s_low) and s_low <= planted.get("self_bonus", 0.0) <= s_high))
        family_wise(length, pd.DataFrame(columns=["position_slope"]), own, boot.counts.shape[1])
        out["any_flag"].append(bool(length["effect"].any() or own["effect"].any()))
    printed = np.array(out["printed"])
    summary = {k: float(np.mean(v)) for k, v in out.items()}
    for name in ("length_covers", "self_covers"):  # coverage where an interval is printed
        summary[name] = float(np.mean(np.array(out[name])[printed])) if printed.any() else float("nan")
    return summary


def _z_scale(words: pd.DataFrame) -> float:
    """Planted length taste is per SD of z; the audit's length unit is per pooled within-dialogue SD of words,
    which is ~10 words of z's 10 words per SD: the planted slope in the audit's unit."""
    centred = words["words"] - words.groupby("item_id")["words"].transform("mean")
    sd = np.sqrt((centred ** 2).sum() / (len(words) - words["item_id"].nunique()))
    return float(sd / 10.0)


if __name__ == "__main__":
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    for dialogues in (10, 20, 60):
        for gain in (0.5, 1.0, 1.5):
            r = rates(reps, dialogues, gain=gain, length_quality=0.6)
            print(f"nothing planted, gain {gain}, {dialogues} dialogues: "
                  + ", ".join(f"{k} {v:.3f}" for k, v in r.items()), flush=True)
        # Continuous scores: on a rounded 1-5 scale the planted b of the latent score is not the rounded score's.
        # One annotator on most dialogues: the excess's interval stands on the dialogues read twice only.
        r = rates(reps, 4 * dialogues, gain=1.0, length_quality=0.6, read_twice=0.25)
        print(f"nothing planted, a second reading on 1 dialogue in 4, {4 * dialogues} dialogues: "
              + ", ".join(f"{k} {v:.3f}" for k, v in r.items()), flush=True)
        r = rates(reps, dialogues, judge_length=0.5, self_bonus=0.5, likert=False)
        print(f"planted length 0.5 and self 0.5 (continuous scores), {dialogues} dialogues: "
              + ", ".join(f"{k} {v:.3f}" for k, v in r.items()), flush=True)


# -- the stats grid's block case: 4 criteria, shuffled letters, one own system, 3 annotators -----------------------

CRITERIA = ("coherence", "consistency", "fluency", "relevance")


def block_study(rng, dialogues=20, systems=5, annotators=3, judge_noise=0.5, offsets=(0.4, -0.2, 0.0, 0.2, -0.4),
                length_quality=0.45, human_noise=0.7, own_bonus=0.0, letter_slope=0.0, judge_length=0.0,
                judge=None):
    """One audit input of the stats grid's block case, nothing planted by default: every criterion's quality is a
    system offset plus dialogue noise; the judge scores all systems of a dialogue in one block under shuffled
    letters, on a rounded 1-5 scale; `annotators` label every summary on 1-5. Returns (judge frame with letters,
    words frame, labels per annotator)."""
    ids = np.repeat([f"d{d:03d}" for d in range(dialogues)], systems)
    names = np.tile([f"s{k}" for k in range(systems)], dialogues)
    base = rng.normal(0, 1, (dialogues, systems)) + np.asarray(offsets[:systems])
    z = length_quality * base + np.sqrt(1 - length_quality ** 2) * rng.normal(0, 1, base.shape)
    words = np.round(40 + 10 * z + 8 * rng.normal(0, 1, (dialogues, 1))).clip(3)
    letters = np.argsort(rng.random(base.shape), axis=1)  # a shuffled letter per candidate, per dialogue
    judged, labels = [], []
    for criterion in CRITERIA:
        quality = base + 0.5 * rng.normal(0, 1, base.shape)
        latent = 3 + 0.9 * quality + judge_noise * rng.normal(0, 1, base.shape)
        latent += own_bonus * (np.arange(systems) == 0) + letter_slope * letters + judge_length * z
        if judge is not None:
            latent = judge(quality, rng)
        score = np.clip(np.round(latent), 1, 5)
        judged.append(pd.DataFrame({"item_id": ids, "system": names, "criterion": criterion, "score": score.ravel(),
                                    "status": "ok", "position": [chr(65 + k) for k in letters.ravel()]}))
        for a in range(annotators):
            reading = np.clip(np.round(3.2 + 0.9 * quality + human_noise * rng.normal(0, 1, base.shape)), 1, 5)
            labels.append(pd.DataFrame({"item_id": ids, "system": names, "criterion": criterion,
                                        "annotator": f"a{a}", "score": reading.ravel()}))
    judge_frame = pd.concat(judged, ignore_index=True)
    words_frame = pd.DataFrame({"item_id": ids, "system": names, "words": words.ravel(), "item_system": names})
    return judge_frame, words_frame, pd.concat(labels, ignore_index=True)


def block_flags(judge, words, labels, seed, resamples=400, self_systems=("s0",)):
    """Each finding's raw flag (its interval excludes 0) and Holm's flag, as audit() tests them."""
    from calibration.trust.audit import read_human
    from calibration.trust.position import block_position

    human = read_human(labels.assign(label=None))
    boot = Dialogues(judge["item_id"], resamples, seed)
    length, position, own = [], [], []
    for criterion in CRITERIA:
        length.append({"mode": "block", **length_slopes(judge, words, human, boot, criterion)})
        position.append(block_position(judge, boot, criterion))
        own.append(self_preference(judge, human, boot, criterion, list(self_systems)))
    length, position, own = pd.DataFrame(length), pd.DataFrame(position), pd.DataFrame(own)
    raw = {"length": _excludes(length, "excess_ci_low", "excess_ci_high"),
           "position": _excludes(position, "position_slope_ci_low", "position_slope_ci_high"),
           "self": _excludes(own, "ci_low", "ci_high")}
    family_wise(length, position, own, len(boot.ids))
    raw["any"] = bool(length["effect"].any() or position["effect"].any() or own["effect"].any())
    return raw, (length, position, own)


def _excludes(table, low, high) -> int:
    lows, highs = table[low].to_numpy(float), table[high].to_numpy(float)
    return int(np.sum(np.isfinite(lows) & ((lows > 0) | (highs < 0))))


def noise_judge(quality, rng):
    """A judge of pure noise: its scores have nothing to do with the summaries."""
    return 3 + 1.2 * rng.normal(0, 1, quality.shape)


def good_judge(quality, rng):
    """A judge whose item-level r with the mean of 3 annotators is about 0.6 (block_study's humans)."""
    return 3 + 0.9 * quality + 0.95 * rng.normal(0, 1, quality.shape)


def agreement_rates(repetitions: int, dialogues: int, systems: int, judge, seed: int = 0) -> dict:
    """Share of (audit, criterion) whose agreement finding is flagged, of audits with any flag (the family), and
    the mean item-level r of the judge with the human mean."""
    from calibration.trust.audit import read_human
    from calibration.trust.human_agreement import agreement_table, human_agreement
    from calibration.trust.position import block_position

    rng = np.random.default_rng(seed)
    flagged, family, rs = [], [], []
    offsets = (0.4, -0.2, 0.0, 0.2, -0.4)[:systems]
    for rep in range(repetitions):
        judged, words, labels = block_study(rng, dialogues, systems=systems, offsets=offsets, judge=judge)
        human = read_human(labels.assign(label=None))
        boot = Dialogues(judged["item_id"], 400, rep)
        length, position, own, agree = [], [], [], []
        for criterion in CRITERIA:
            length.append({"mode": "block", **length_slopes(judged, words, human, boot, criterion)})
            position.append(block_position(judged, boot, criterion))
            own.append(self_preference(judged, human, boot, criterion, ["s0"]))
            agree.append(human_agreement(judged, human, boot, criterion, rep))
        tables = [pd.DataFrame(length), pd.DataFrame(position), pd.DataFrame(own)]
        agreement = agreement_table(agree)
        family_wise(*tables, len(boot.ids), agreement=agreement)
        flagged += list(agreement["effect"].astype(bool))
        rs += list(agreement["judge_r"])
        family.append(bool(any(t["effect"].astype(bool).any() for t in tables + [agreement])))
    return {"agreement_flag": float(np.mean(flagged)), "any_flag": float(np.mean(family)),
            "mean_r": float(np.nanmean(rs)), "flag_trials": len(flagged)}
