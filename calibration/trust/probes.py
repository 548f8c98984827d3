"""Probes: perturbed copies of a random sample of candidates, made by fixed rules that keep every fact, judged again.

The rules (documented, deterministic; the sample is drawn with the audit's --seed):
- filler: the candidate gets a closing sentence that says nothing: FILLER. A faithful judge may lower conciseness
  or non-redundancy; it must not raise anything.
- attribution: the candidate gets a first line naming a famous model as its author: ATTRIBUTION. Nothing may move.
- order (block mode only): the sampled dialogues' blocks are shown in another shuffle (the run's --seed + 1), the
  candidates unchanged. Nothing may move.

Each probe's judgments are compared with the original judgments of the same (item, system, criterion): the share
unchanged (robustness) and the mean shift with a dialogue-bootstrap CI, beside the re-run noise floor.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..errors import CalibrationError

PROBES = ("filler", "attribution", "order")
FILLER = "I hope this summary is helpful."
ATTRIBUTION = "Summary written by GPT-4, a leading AI model."
# Criteria a filler sentence may lower (it adds words that carry nothing); it may raise none.
MAY_LOWER_WITH_FILLER = ("concis", "redundan", "brevity", "length")
PROBE_COLUMNS = ["probe", "criterion", "n", "robustness", "changed_share", "mean_shift", "ci_low", "ci_high",
                 "noise_changed_share", "may_move", "moved", "raises", "faithful"]


def parse_probes(value) -> list[str]:
    names = [n.strip() for n in (value.split(",") if isinstance(value, str) else value) if n.strip()]
    unknown = [n for n in names if n not in PROBES]
    if not names or unknown:
        raise CalibrationError(f"--probe: unknown probe {unknown[0]!r}; choose from {', '.join(PROBES)}" if unknown
                               else f"--probe must name probes, comma-separated: {', '.join(PROBES)}")
    return list(dict.fromkeys(names))


def check_probes(names: list[str], rubric, mode: str) -> None:
    """A probe the rubric's mode cannot take is refused before any request."""
    if rubric.task == "pairwise" or mode == "pairwise":
        raise CalibrationError(f"--probe {names[0]}: rubric {rubric.name!r} compares pairs; probes perturb the "
                               "candidates of `judge score` (pairwise order is already measured by both orders)")
    if "order" in names and mode != "block":
        raise CalibrationError("--probe order reshuffles a block, but the judgments were not judged in block mode "
                               "(no shown letters): judge with --mode block, or leave order out")


def perturb(text: str, probe: str) -> str:
    if probe == "filler":
        return f"{text.rstrip()} {FILLER}"
    if probe == "attribution":
        return f"{ATTRIBUTION}\n{text}"
    return text


def probe_items(items: list, judge: pd.DataFrame, probe: str, sample: int, seed: int, mode: str):
    """(item records to judge, the (item_id, system) keys to compare) for one probe.

    Pointwise: a random sample of the judged candidates, each perturbed. Block: a random sample of dialogues,
    each shown whole (a block is judged whole) with one candidate, drawn at random, perturbed; for order, nothing
    perturbed and every candidate of the sampled dialogues compared.
    """
    rng = np.random.default_rng(seed)
    judged = judge[judge["status"].isin(["ok", "label"])]
    records = {(i.id, i.system): i for i in items}
    if mode == "block":
        dialogues = sorted(set(judged["item_id"]))
        chosen = sorted(rng.choice(dialogues, size=min(sample, len(dialogues)), replace=False))
        out, keys = [], []
        for dialogue in chosen:
            group = [i for i in items if i.id == dialogue]
            target = group[rng.integers(len(group))].system if probe != "order" else None
            for item in group:
                record = _record(item)
                if probe == "order" or item.system == target:
                    keys.append((item.id, item.system))
                if item.system == target:
                    record["candidate"] = perturb(item.candidate, probe)
                out.append(record)
        return out, keys
    candidates = sorted(set(zip(judged["item_id"], judged["system"])))
    picked = rng.choice(len(candidates), size=min(sample, len(candidates)), replace=False)
    keys = [candidates[k] for k in sorted(picked)]
    out = []
    for key in keys:
        record = _record(records[key])
        record["candidate"] = perturb(record["candidate"], probe)
        out.append(record)
    return out, keys


def _record(item) -> dict:
    return {**item.model_dump(exclude_none=True), **item.extra}


def probe_table(judge: pd.DataFrame, runs: dict, noise: pd.DataFrame, boot, criteria) -> pd.DataFrame:
    """One row per (probe, criterion): robustness, mean shift with CI, the noise floor beside it."""
    rows = []
    noise_share = noise.set_index("criterion")["changed_share"].to_dict() if not noise.empty else {}
    for probe, (probed, keys) in runs.items():
        wanted = pd.DataFrame(keys, columns=["item_id", "system"]).astype(str)
        for criterion in criteria:
            original = judge[(judge["criterion"] == criterion) & judge["status"].isin(["ok", "label"])]
            again = probed[(probed["criterion"] == criterion) & probed["status"].isin(["ok", "label"])]
            both = wanted.merge(original, on=["item_id", "system"]).merge(
                again, on=["item_id", "system", "criterion"], suffixes=("", "_probe"))
            may_move = probe == "filler" and any(word in criterion.lower() for word in MAY_LOWER_WITH_FILLER)
            row = {"probe": probe, "criterion": criterion, "n": len(both), "may_move": may_move,
                   "noise_changed_share": noise_share.get(criterion, math.nan)}
            if both.empty:
                rows.append(row)
                continue
            shift = (both["score_probe"] - both["score"]).to_numpy(float)
            numeric = np.isfinite(shift)
            changed = np.where(numeric, ~np.isclose(np.nan_to_num(shift), 0.0),
                               both["label"].astype(str) != both["label_probe"].astype(str))
            index = boot.index(both["item_id"].to_numpy())
            row["changed_share"] = float(changed.mean())
            row["robustness"] = 1.0 - row["changed_share"]
            if numeric.any():
                row["mean_shift"], row["ci_low"], row["ci_high"] = boot.ratio(
                    index[numeric], shift[numeric], np.ones(numeric.sum()))
            low, high = row.get("ci_low", math.nan), row.get("ci_high", math.nan)
            row["moved"] = bool(np.isfinite(low) and (low > 0 or high < 0))
            row["raises"] = bool(np.isfinite(low) and low > 0)
            row["faithful"] = not (row["raises"] if may_move else row["moved"])
            rows.append(row)
    return pd.DataFrame(rows).reindex(columns=PROBE_COLUMNS)


def probe_sentences(table: pd.DataFrame) -> list[str]:
    out = []
    for row in table.itertuples():
        if row.n == 0:
            out.append(f"{row.criterion}: the {row.probe} probe has no judgment to compare")
            continue
        noise = ("re-run noise unknown" if not np.isfinite(row.noise_changed_share)
                 else f"re-run noise changes {row.noise_changed_share:.0%}")
        shift = "" if not np.isfinite(row.mean_shift) else (
            f", mean shift {row.mean_shift:+.2f} [{row.ci_low:+.2f}, {row.ci_high:+.2f}]")
        verdict = "" if row.faithful else (" — the judge RAISES it" if row.raises else " — the judge moves it")
        out.append(f"{row.criterion}: the {row.probe} probe leaves {row.robustness:.0%} of {row.n} verdicts "
                   f"unchanged{shift}; {noise}{verdict}")
    return out
