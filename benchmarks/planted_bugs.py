"""Plant bugs one at a time in the trust and study code and the judging half, run the tests that guard each, and
print the kill rate: a bug the suite lets through is a test that is missing.

Each row is a bug once found surviving (issue "trust verbs that refuse what they cannot judge"), or one in the
selection, family-wise and scale steps that replaced them. The file is restored after every run, whatever happens.

    python benchmarks/planted_bugs.py            # every bug, its tests, in about 5 minutes on 2 cores
    python benchmarks/planted_bugs.py drift      # the bugs whose name contains "drift"
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# name, file, the text to change, what it becomes, the test files that must catch it
BUGS = [
    ("audit: ties counted as decided in the first-shown share", "calibration/trust/position.py",
     'decided = (forward != "0").astype(float) + (swapped != "0").astype(float)',
     "decided = np.full(len(forward), 2.0)", ["tests/test_audit_guards.py"]),
    ("audit: the probes' shift sign", "calibration/trust/probes.py",
     'shift = (both["score_probe"] - both["score"]).to_numpy(float)',
     'shift = (both["score"] - both["score_probe"]).to_numpy(float)', ["tests/test_audit_guards.py"]),
    ("audit: the faithful/raises rule", "calibration/trust/probes.py",
     'row["faithful"] = not (row["raises"] if may_move else row["moved"])', 'row["faithful"] = not row["raises"]',
     ["tests/test_audit_guards.py"]),
    ("audit: the excess taken against its own reading (no instrument)", "calibration/trust/gain.py",
     'for pair in ("ba", "bx", "xa", "xx", "by", "xy")}',
     'for pair in ("aa", "ax", "xa", "xx", "ay", "xy")}\n        self.sums["ba"], self.sums["bx"], self.sums["by"] = '
     'self.sums["aa"], self.sums["ax"], self.sums["ay"]', ["tests/test_audit_sim.py", "tests/test_audit_cli.py"]),
    ("audit: no family-wise step", "calibration/trust/family.py",
     "adjusted = holm([p for _, _, p in found])", "adjusted = [p for _, _, p in found]",
     ["tests/test_audit_guards.py"]),
    ("audit: labels not checked against the scale", "calibration/trust/audit.py",
     "people = read_human(human, scales)", "people = read_human(human, None)", ["tests/test_audit_guards.py"]),
    ("audit: a rerun by another judge accepted", "calibration/trust/audit.py",
     "if differences and not allow_different_judge:", "if False:", ["tests/test_audit_guards.py"]),
    ("audit: an interrupted probe ignored", "calibration/trust/cli.py",
     '        if outcome.status == "interrupted":\n            raise KeyboardInterrupt',
     "        if False:\n            raise KeyboardInterrupt", ["tests/test_audit_guards.py"]),
    ("drift: TOST at the 95% level", "calibration/trust/drift.py",
     'tost_low, tost_high = mean_interval(sizes, sums[:, at["shift"]], 2 * confidence - 1)',
     'tost_low, tost_high = mean_interval(sizes, sums[:, at["shift"]], confidence)',
     ["tests/test_drift_guards.py"]),
    ("drift: a mean-shift test that never rejects", "calibration/trust/drift.py",
     "shift_drift = strict_low > 0 or strict_high < 0", "shift_drift = False", ["tests/test_drift_guards.py"]),
    ("drift: the no-drift bound on the point estimate", "calibration/trust/drift.py",
     "share_equivalent = one_sided_high <= noise + share_margin",
     "share_equivalent = changed <= noise + share_margin", ["tests/test_drift_guards.py", "tests/test_drift.py"]),
    ("drift: the provenance row hashing the wrong field", "calibration/trust/drift.py",
     'record["fingerprint"].add(hashlib.sha256(json.dumps(fingerprint, sort_keys=True)',
     'record["fingerprint"].add(hashlib.sha256(json.dumps(served, sort_keys=True)', ["tests/test_drift_guards.py"]),
    ("drift: dialogues needed 6x too small", "calibration/trust/drift.py",
     "return int(math.ceil(((_Z_ALPHA + _Z_POWER) * sd / margin) ** 2))",
     "return int(math.ceil(((_Z_ALPHA + _Z_POWER) * sd / margin) ** 2)) // 6", ["tests/test_drift_guards.py"]),
    ("drift: an unpaired change in agreement with humans", "calibration/trust/drift.py",
     'merged["score_ref"].to_numpy(), merged["human"].to_numpy(), weights)',
     'merged["score_ref"].to_numpy(), merged["human"].to_numpy(), weights[::-1])', ["tests/test_drift_guards.py"]),
    ("drift: a run answered from the cache accepted", "calibration/trust/drift.py",
     "    _check_fresh(new, new_where)\n", "", ["tests/test_drift_guards.py"]),
    ("drift: a mean of samples compared with one sample", "calibration/trust/drift.py",
     "return not isinstance(value, (int, float, np.integer, np.floating)) or float(value).is_integer()",
     "return True", ["tests/test_drift_guards.py"]),
    ("select: intervals 4x too narrow", "calibration/trust/select.py",
     "low, high = percentile_interval(replicates[name], confidence, units) if shown else (np.nan, np.nan)",
     "low, high = ((lambda lo, hi, e=estimates[name]: (e + (lo - e) / 4, e + (hi - e) / 4))("
     "*percentile_interval(replicates[name], confidence, units)) if shown else (np.nan, np.nan))",
     ["tests/test_select_guards.py"]),
    ("select/screen: no multiplicity in the best set", "calibration/stats.py",
     "tail = (1.0 - confidence) / (2 * len(pairs))", "tail = (1.0 - confidence) / 2",
     ["tests/test_select_guards.py", "tests/test_screen_selection.py"]),
    ("select: the summary-level interval unexpanded", "calibration/trust/select.py",
     'units = len(items) if level == "summary" else None  # a mean over dialogues: the expanded interval',
     "units = None", ["tests/test_select_guards.py"]),
    ("select: a cross-fitting leak in the jury", "calibration/trust/select.py",
     "        measure = ~fit\n", "        measure = np.ones_like(fit)\n", ["tests/test_select_guards.py"]),
    ("select: the plug-in label worth", "calibration/trust/select.py",
     "adjusted = np.maximum(0.0, 1.0 - (1.0 - r2) * (n - 1) / (n - 2))", "adjusted = r2",
     ["tests/test_select_guards.py", "tests/test_select.py"]),
    ("select: judges compared on their own dialogues", "calibration/trust/select.py",
     "                compared &= _varying(matrix)\n", "                pass\n", ["tests/test_select_guards.py"]),
    ("calibrate: the seed ignored", "calibration/calibrate/calibrate.py",
     "bootstrap, seed = resamples_option(bootstrap, allow_zero=True), seed_option(seed)",
     "bootstrap, seed = resamples_option(bootstrap, allow_zero=True), 0", ["tests/test_select_guards.py"]),
    ("screen: dominated when better on any criterion, not every one", "calibration/study/systems.py",
     "if all(l is not None and w is not None and lower[l, w] > 0 for l, w in pairs):",
     "if any(l is not None and w is not None and lower[l, w] > 0 for l, w in pairs):",
     ["tests/test_screen_selection.py", "tests/test_screen.py"]),
    ("judge: the cache key without the model", "judge/asking.py",
     "key = request_key(self.body(messages, fmt, sample))",
     'key = request_key({k: v for k, v in self.body(messages, fmt, sample).items() if k != "model"})',
     ["tests/test_judge_keys.py"]),
    ("judge: the batch run's fingerprint without the model", "judge/backends/batch.py",
     '"command", "rubric", "criteria", "mode", "model", "temperature",',
     '"command", "rubric", "criteria", "mode", "temperature",', ["tests/test_judge_keys.py"]),
    ("judge: --refresh reads the cache", "judge/run.py",
     "return (RefreshCache if options.refresh else AnswerCache)(options.cache or default_cache_dir())",
     "return AnswerCache(options.cache or default_cache_dir())", ["tests/test_drift_guards.py"]),
    ("outputs: a report of another verb replaced", "judge/outputs.py",
     "if verb is not None and kind == \"page\" and (other := page_verb(path)) not in (None, verb):",
     "if False:", ["tests/test_audit_guards.py"]),
]


def run(bug, python: str) -> tuple[bool, float, str]:
    name, file, old, new, tests = bug
    path = ROOT / file
    original = path.read_text(encoding="utf-8")
    if original.count(old) != 1:
        return False, 0.0, f"the text to change is not in {file} once: the list is out of date"
    start = time.monotonic()
    try:
        path.write_text(original.replace(old, new), encoding="utf-8")
        result = subprocess.run([python, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests], cwd=ROOT,
                                capture_output=True, text=True, timeout=900)
        lines = (result.stdout.strip().splitlines() or [""])
        return result.returncode != 0, time.monotonic() - start, lines[-1]
    finally:
        path.write_text(original, encoding="utf-8")


def main(argv: list[str]) -> int:
    wanted = [b for b in BUGS if not argv or any(a in b[0] for a in argv)]
    killed = 0
    for bug in wanted:
        caught, seconds, last = run(bug, sys.executable)
        killed += caught
        print(f"{'killed  ' if caught else 'SURVIVED'} {seconds:5.0f}s  {bug[0]}  ({last})", flush=True)
    print(f"\n{killed} of {len(wanted)} planted bugs killed ({100 * killed / max(len(wanted), 1):.0f}%)")
    return 0 if killed == len(wanted) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
