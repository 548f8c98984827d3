"""Mutation testing of the trust, study and cascade verbs: small changes made by rule to calibration/trust/,
calibration/study/ and calibration/cascade/, each run against the tests that guard its file; a mutant the suite lets
through is a test that is missing, or a change that cannot matter (then benchmarks/mutation_equivalent.json says why).

Every mutation site is enumerated from the AST, in a fixed order (file, line, column, operator), and a seeded random
sample is run. The operators: comparison swaps (< <=, > >=, == !=, in / not in, is / is not), arithmetic swaps
(+ -, * /, // %, also in +=), numbers (0 -> 1, 1 -> 0, k -> k + 1, a float x -> 1.1 x, 0.0 -> 1.0), True <-> False,
and <-> or (the whole chain), a `not` removed. Text is never mutated: docstrings and strings, f-strings, the
arguments of print / logging / warnings / parser.error, the exception of a `raise`, assert messages and annotations.

The mutant replaces exactly its node's source text in a copy of the tree made once in a temporary directory (the
working tree is never written: an interrupted run leaves it as it was), the tests run there with
`python -m pytest -x -q -p no:cacheprovider` and a timeout, and the original file is put back.

Which tests: by default only those that run the mutated code. Each test file mapped to a source file in TESTS is run
once under coverage with one context per test (benchmarks/mutation_contexts.py), and the map kept in a cache keyed
by the hash of the tree outside tests/test_*.py and of that test file, so it is never stale and a new test file costs
only its own run. A mutant in a function's body runs the mapped tests that executed its statement, in the mapped
order; a test that executed it while setting up (a fixture shared by several tests) brings its whole file; code run
when a module is imported (module and class level, decorators, default arguments) or while a test module is collected
runs every mapped file, as does `--select files` (the old way). A mutant no mapped test executes survives unrun.

    python benchmarks/mutation.py                       # 150 mutants, seed 1 (about 30 minutes on 2 cores)
    python benchmarks/mutation.py --seed 7 --sample 40  # another draw
    python benchmarks/mutation.py --all                 # every site
    python benchmarks/mutation.py --select files        # every mapped test file for every mutant (no coverage map)
    python benchmarks/mutation.py --list                # count the sites, run nothing
    python benchmarks/mutation.py --survivors-of /tmp/mutation_results.json  # only the last run's survivors
    python benchmarks/mutation.py --mutants-of /tmp/mutation_results.json --select files  # the same mutants, old way
    python benchmarks/mutation.py --table /tmp/mutation_results.json         # a saved run's table again
"""

from __future__ import annotations

import argparse
import ast
import bisect
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("calibration/trust", "calibration/study", "calibration/cascade")
EQUIVALENT_FILE = ROOT / "benchmarks" / "mutation_equivalent.json"

# Each source file and the tests that guard it, fastest first (with -x the first failure ends the run).
_TRUST_CLI = ["tests/test_cli_properties.py", "tests/test_drift_guards.py", "tests/test_flag_messages.py",
              "tests/test_failure_value.py", "tests/test_audit_guards.py", "tests/test_audit_cli.py",
              "tests/test_select.py", "tests/test_drift.py", "tests/test_api.py"]
_STUDY_CLI = ["tests/test_label_files.py", "tests/test_cli_properties.py", "tests/test_cli_numbers.py",
              "tests/test_flag_messages.py", "tests/test_failure_value.py", "tests/test_estimate.py",
              "tests/test_screen.py", "tests/test_study_contract.py", "tests/test_api.py",
              "tests/test_pairwise_estimate.py"]
# The audit's verb and its estimator cores (one topic module each) are guarded by the same tests.
_AUDIT = ["tests/test_audit_branches.py", "tests/test_narrow_mutants.py", "tests/test_audit_properties.py",
          "tests/test_audit_guards.py", "tests/test_audit_cli.py", "tests/test_trust_mutants.py",
          "tests/test_audit_sim.py", "tests/test_audit.py"]
# The estimator cores of `judge estimate` (one list: they were one module).
_STUDY_ESTIMATORS = ["tests/test_estimate_branches.py", "tests/test_estimate_weighted.py",
                     "tests/test_estimate_worth.py", "tests/test_estimate_tables.py",
                     "tests/test_labels_saved.py",
                     "tests/test_estimate_bounded_written.py", "tests/test_narrow_mutants.py",
                     "tests/test_study_weighted_mutants.py", "tests/test_study_properties.py",
                     "tests/test_estimate.py", "tests/test_cli_numbers.py",
                     "tests/test_estimate_coverage.py", "tests/test_study_mutants.py",
                     "tests/test_small_n_coverage.py", "tests/test_study_contract.py",
                     "tests/test_screen_active.py", "tests/test_estimate_jury.py",
                     "tests/test_estimate_effective.py", "tests/test_two_stage.py"]
# The pairwise estimate's modules (one list: they were one module).
_STUDY_PAIRWISE = ["tests/test_label_files.py", "tests/test_pairwise_branches.py", "tests/test_pairwise_mutants.py",
                   "tests/test_narrow_mutants.py",
                   "tests/test_pairwise_properties.py", "tests/test_pairwise_estimate.py"]
# `judge screen`'s modules (one list: they were one module).
_STUDY_SCREEN = ["tests/test_label_files.py", "tests/test_screen_branches.py", "tests/test_study_properties.py",
                 "tests/test_screen.py", "tests/test_cli_numbers.py",
                 "tests/test_screen_selection.py", "tests/test_study_contract.py",
                 "tests/test_study_mutants.py", "tests/test_screen_active.py",
                 "tests/test_estimate_jury.py", "tests/test_screen_active_power.py",
                 "tests/test_screen_power.py", "tests/test_screen_strata.py",
                 "tests/test_two_stage.py"]
TESTS = {
    "calibration/trust/__init__.py": ["tests/test_api.py"],
    "calibration/trust/audit.py": _AUDIT,
    **{f"calibration/trust/{topic}.py": _AUDIT
       for topic in ("dialogues", "noise", "gain", "length", "position", "self_preference", "family",
                     "human_agreement")},
    "calibration/trust/probes.py": ["tests/test_probes_branches.py", "tests/test_cli_properties.py",
                                    "tests/test_audit_guards.py", "tests/test_audit_cli.py",
                                    "tests/test_trust_mutants.py"],
    "calibration/trust/drift.py": ["tests/test_drift_branches.py", "tests/test_narrow_mutants.py",
                                   "tests/test_drift_properties.py", "tests/test_drift_guards.py",
                                   "tests/test_drift.py", "tests/test_trust_mutants.py"],
    "calibration/trust/select.py": ["tests/test_select_branches.py", "tests/test_select_properties.py",
                                    "tests/test_select.py", "tests/test_select_guards.py",
                                    "tests/test_trust_mutants.py"],
    "calibration/trust/cli.py": ["tests/test_cli_branches.py"] + _TRUST_CLI + ["tests/test_trust_mutants.py"],
    "calibration/trust/report.py": ["tests/test_report_properties.py", "tests/test_audit_cli.py",
                                    "tests/test_select.py", "tests/test_drift.py", "tests/test_api.py",
                                    "tests/test_trust_mutants.py"],
    "calibration/study/__init__.py": ["tests/test_api.py"],
    "calibration/study/screen.py": _STUDY_SCREEN,
    "calibration/study/systems.py": _STUDY_SCREEN,
    "calibration/study/uncertainty.py": _STUDY_SCREEN,
    "calibration/study/designs.py": _STUDY_SCREEN,
    "calibration/study/power_table.py": _STUDY_SCREEN,
    "calibration/study/printing.py": _STUDY_SCREEN,
    "calibration/study/ppi.py": _STUDY_ESTIMATORS,
    "calibration/study/ppi_result.py": _STUDY_ESTIMATORS,
    "calibration/study/bounded.py": _STUDY_ESTIMATORS,
    "calibration/study/ppi_weighted.py": _STUDY_ESTIMATORS,
    "calibration/study/matrices.py": _STUDY_ESTIMATORS,
    "calibration/study/estimate_tables.py": _STUDY_ESTIMATORS,
    "calibration/study/estimate.py": ["tests/test_label_files.py", "tests/test_estimating_branches.py",
                                        "tests/test_study_properties.py", "tests/test_estimate.py",
                                        "tests/test_cli_numbers.py", "tests/test_study_contract.py",
                                        "tests/test_study_mutants.py", "tests/test_pairwise_estimate.py",
                                        "tests/test_screen_active.py", "tests/test_estimate_jury.py",
                                        "tests/test_two_stage.py"],
    "calibration/study/power.py": ["tests/test_power_branches.py", "tests/test_narrow_mutants.py",
                                   "tests/test_study_properties.py", "tests/test_power_small_n.py",
                                   "tests/test_screen_power.py", "tests/test_screen.py", "tests/test_study_mutants.py",
                                   "tests/test_estimate_jury.py"],
    "calibration/study/cli.py": ["tests/test_cli_branches.py"] + _STUDY_CLI + ["tests/test_study_mutants.py"],
    "calibration/study/pairwise.py": _STUDY_PAIRWISE,
    "calibration/study/pairs.py": _STUDY_PAIRWISE,
    "calibration/study/win_rates.py": _STUDY_PAIRWISE,
    "calibration/study/bradley_terry.py": _STUDY_PAIRWISE,
    "calibration/study/rank_sets.py": _STUDY_PAIRWISE,
    "calibration/study/predictor.py": ["tests/test_predictor_written.py", "tests/test_narrow_mutants.py",
                                       "tests/test_estimate_jury.py"],
    "calibration/cascade/__init__.py": ["tests/test_api.py", "tests/test_escalate.py"],
    "calibration/cascade/escalate.py": ["tests/test_label_files.py", "tests/test_escalate_branches.py",
                                        "tests/test_escalate_mutants.py", "tests/test_narrow_mutants.py",
                                        "tests/test_escalate_properties.py", "tests/test_cli_properties.py",
                                        "tests/test_escalate.py", "tests/test_escalate_real.py"],
    "calibration/cascade/threshold_tests.py": ["tests/test_escalate_branches.py", "tests/test_narrow_mutants.py",
                                               "tests/test_escalate_properties.py", "tests/test_escalate.py",
                                               "tests/test_escalate_real.py"],
    "calibration/cascade/verdicts.py": ["tests/test_label_files.py", "tests/test_escalate_branches.py",
                                        "tests/test_escalate_mutants.py", "tests/test_cli_properties.py",
                                        "tests/test_escalate.py", "tests/test_escalate_properties.py"],
    "calibration/cascade/walk.py": ["tests/test_label_files.py", "tests/test_escalate_branches.py",
                                    "tests/test_escalate_mutants.py", "tests/test_escalate_properties.py",
                                    "tests/test_escalate.py", "tests/test_escalate_runs.py"],
    "calibration/cascade/report.py": ["tests/test_escalate_mutants.py", "tests/test_escalate.py",
                                      "tests/test_escalate_properties.py"],
    "calibration/cascade/cli.py": ["tests/test_cli_branches.py", "tests/test_cli_properties.py",
                                   "tests/test_escalate.py"],
    "calibration/cascade/runs.py": ["tests/test_escalate_runs.py", "tests/test_escalate_mutants.py"],
    # Not in PACKAGES (calibration's top level is not drawn from): its changed lines are run with --mutants-of.
    "calibration/io.py": ["tests/test_label_files.py", "tests/test_calibration_bad_inputs.py",
                          "tests/test_two_stage.py", "tests/test_estimate.py", "tests/test_pairwise_estimate.py"],
    "calibration/study/report.py": ["tests/test_study_report_branches.py", "tests/test_report_properties.py",
                                    "tests/test_estimate.py", "tests/test_screen.py", "tests/test_study_report.py",
                                    "tests/test_study_contract.py", "tests/test_study_mutants.py",
                                    "tests/test_label_files.py"],
}

COMPARE_SWAPS = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
                 ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}
BINOP_SWAPS = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.FloorDiv: ast.Mod,
               ast.Mod: ast.FloorDiv}
SYMBOL = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=", ast.In: "in",
          ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not", ast.Add: "+", ast.Sub: "-", ast.Mult: "*",
          ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.And: "and", ast.Or: "or"}
# Calls whose arguments are text for people: never mutated.
TEXT_CALLS = {"print", "warn", "warning", "info", "debug", "error", "exception", "critical", "log", "echo"}


@dataclass(frozen=True)
class Mutant:
    file: str
    line: int
    col: int
    operator: str  # e.g. "compare < -> <=", "number 1 -> 0", "not removed"
    start: int  # character offsets in the original text
    end: int
    replacement: str
    original_line: str = ""
    mutated_line: str = ""

    @property
    def key(self) -> tuple:  # line and column are the node's: a chain `a < b < c` has two sites at one node
        return (self.file, self.line, self.col, self.operator, self.start)


def _offsets(text: str) -> list[int]:
    starts, total = [0], 0
    for line in text.splitlines(keepends=True):
        total += len(line)
        starts.append(total)
    return starts


def _char(lines_bytes: list[bytes], starts: list[int], lineno: int, col_byte: int) -> int:
    """ast's (line, UTF-8 byte column) as an offset into the str."""
    return starts[lineno - 1] + len(lines_bytes[lineno - 1][:col_byte].decode("utf-8"))


def _skipped_nodes(tree: ast.AST) -> set[int]:
    """ids of the nodes whose whole subtree is text or annotation: never mutated."""
    roots: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                roots.append(first)
        if isinstance(node, ast.JoinedStr):
            roots.append(node)
        elif isinstance(node, ast.Raise):
            roots += [n for n in (node.exc, node.cause) if n is not None]
        elif isinstance(node, ast.Assert) and node.msg is not None:
            roots.append(node.msg)
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if name in TEXT_CALLS:
                roots.append(node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            roots += [a.annotation for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs,
                                             node.args.vararg, node.args.kwarg) if a is not None and a.annotation]
            if node.returns is not None:
                roots.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            roots.append(node.annotation)
    skipped: set[int] = set()
    for root in roots:
        skipped.update(id(n) for n in ast.walk(root))
    return skipped


def _gap_operator(text: str, start: int, end: int, symbol: str) -> tuple[int, int] | None:
    """Where the operator `symbol` is in text[start:end], the gap between two operands (only parentheses, spaces,
    line breaks and comments besides the operator), as absolute offsets; None unless found exactly once."""
    gap = re.sub(r"#[^\n]*", lambda c: " " * len(c.group()), text[start:end])  # a comment may say "and"
    if symbol[0].isalpha():
        pattern = r"\b" + r"\s+".join(symbol.split()) + r"\b"
    else:
        pattern = r"(?<![<>=!*/%+\-])" + re.escape(symbol) + r"(?![<>=*/])"
    found = list(re.finditer(pattern, gap))
    return (start + found[0].start(), start + found[0].end()) if len(found) == 1 else None


def enumerate_file(relative: str, text: str) -> list[Mutant]:
    tree = ast.parse(text)
    skipped = _skipped_nodes(tree)
    lines_bytes = [line.encode("utf-8") for line in text.splitlines(keepends=True)]
    starts = _offsets(text)

    def begin(node):
        return _char(lines_bytes, starts, node.lineno, node.col_offset)

    def finish(node):
        return _char(lines_bytes, starts, node.end_lineno, node.end_col_offset)

    found: list[Mutant] = []

    def add(node, operator, a, b, replacement):
        found.append(Mutant(relative, node.lineno, node.col_offset, operator, a, b, replacement))

    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Compare):
            left = node.left
            for op, right in zip(node.ops, node.comparators):
                where = _gap_operator(text, finish(left), begin(right), SYMBOL[type(op)])
                new = SYMBOL[COMPARE_SWAPS[type(op)]]
                if where:
                    add(node, f"compare {SYMBOL[type(op)]} -> {new}", *where, new)
                left = right
        elif isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in BINOP_SWAPS:
            left, right = (node.left, node.right) if isinstance(node, ast.BinOp) else (node.target, node.value)
            if any(isinstance(side, ast.JoinedStr) or (isinstance(side, ast.Constant) and isinstance(side.value, str))
                   for side in (left, right)):
                continue  # text built with + or %
            symbol = SYMBOL[type(node.op)] + ("=" if isinstance(node, ast.AugAssign) else "")
            new = SYMBOL[BINOP_SWAPS[type(node.op)]] + ("=" if isinstance(node, ast.AugAssign) else "")
            where = _gap_operator(text, finish(left), begin(right), symbol)
            if where:
                add(node, f"arithmetic {symbol} -> {new}", *where, new)
        elif isinstance(node, ast.BoolOp):
            a, b = begin(node), finish(node)
            old, new = SYMBOL[type(node.op)], "or" if isinstance(node.op, ast.And) else "and"
            pieces, cursor = [], a
            for left, right in zip(node.values, node.values[1:]):
                where = _gap_operator(text, finish(left), begin(right), old)
                if where is None:
                    break
                pieces += [text[cursor:where[0]], new]
                cursor = where[1]
            else:
                pieces.append(text[cursor:b])
                add(node, f"boolean {old} -> {new}", a, b, "".join(pieces))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            operand = text[begin(node.operand):finish(node.operand)]
            add(node, "not removed", begin(node), finish(node), f"({operand})")
        elif isinstance(node, ast.Constant) and isinstance(node.value, bool):
            add(node, f"boolean {node.value} -> {not node.value}", begin(node), finish(node), str(not node.value))
        elif isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            value = node.value
            if isinstance(value, int):
                new_value = 1 if value == 0 else 0 if value == 1 else value + 1
            else:
                new_value = 1.0 if value == 0.0 else value * 1.1
            add(node, f"number {value!r} -> {new_value!r}", begin(node), finish(node), repr(new_value))
    return found


def mutated_text(text: str, mutant: Mutant) -> str:
    return text[:mutant.start] + mutant.replacement + text[mutant.end:]


def all_mutants(extra=()) -> list[Mutant]:
    """Every mutation site of PACKAGES' files, and of the `extra` files (relative paths) outside them."""
    mutants: list[Mutant] = []
    paths = [path for package in PACKAGES for path in sorted((ROOT / package).glob("*.py"))]
    paths += [ROOT / name for name in sorted(set(extra)) if Path(name).parent.as_posix() not in PACKAGES]
    for path in paths:
        relative = path.relative_to(ROOT).as_posix()
        text = path.read_text(encoding="utf-8")
        for m in enumerate_file(relative, text):
            new = mutated_text(text, m)
            first = text.rfind("\n", 0, m.start) + 1
            old_end, new_end = text.find("\n", m.end), new.find("\n", m.start + len(m.replacement))
            old_line = " ".join(text[first:old_end if old_end >= 0 else None].split())
            new_line = " ".join(new[first:new_end if new_end >= 0 else None].split())
            mutants.append(Mutant(**{**asdict(m), "original_line": old_line, "mutated_line": new_line}))
    mutants.sort(key=lambda m: (m.file, m.line, m.col, m.operator, m.replacement, m.start))
    return mutants


def equivalents() -> dict[tuple[str, str, str], str]:
    if not EQUIVALENT_FILE.exists():
        return {}
    rows = json.loads(EQUIVALENT_FILE.read_text(encoding="utf-8"))
    return {(r["file"], r["original_line"], r["mutated_line"]): r["reason"] for r in rows}


def copy_tree(target: Path) -> None:
    ignore = shutil.ignore_patterns(".git", "__pycache__", "*.pyc", ".pytest_cache", "*.egg-info", "out")
    for entry in ROOT.iterdir():
        if entry.name in (".git", ".venv", "venv", "out", "dist", "build"):
            continue
        if entry.is_dir():
            shutil.copytree(entry, target / entry.name, ignore=ignore)
        else:
            shutil.copy2(entry, target / entry.name)


def run_tests(copy: Path, tests: list[str], timeout: float) -> tuple[str, float, str]:
    env = _environment(copy)
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
                            cwd=copy, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return "timeout", time.monotonic() - start, ""
    except BaseException:  # Ctrl-C or kill: the tests run in their own session and would outlive the run
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    seconds = time.monotonic() - start
    lines = out.strip().splitlines() or [""]
    failed = [line for line in lines if line.startswith(("FAILED", "ERROR"))]
    if proc.returncode == 0:
        return "survived", seconds, lines[-1]
    if proc.returncode in (1, 2, 3):  # tests failed, interrupted, internal error: the mutant was noticed
        return "killed", seconds, (failed[0] if failed else lines[-1])[:200]
    if proc.returncode in (4, 5):  # a usage error or no test found: the tool's fault, not the mutant's
        raise RuntimeError(f"pytest exit {proc.returncode} on {' '.join(tests)[:300]}: {lines[-1][:200]}")
    return "killed", seconds, f"exit {proc.returncode}: {lines[-1][:160]}"


# -- which tests run a mutant: the coverage map -----------------------------------------------------------------------

COVERAGE_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "judge-mutation"
# The tool's own files and outputs: changing them changes no line a test runs.
_NOT_HASHED = {"benchmarks/mutation.py", "benchmarks/mutation_equivalent.json", "benchmarks/mutation_table.txt"}
_RCFILE = """[run]
source_pkgs = {packages}
parallel = true
patch = subprocess
data_file = {data}
"""


def tree_digest(copy: Path) -> str:
    """The hash of every file of the copy but the test modules (each keyed by its own hash) and this tool's own."""
    digest = hashlib.sha256()
    for path in sorted(p for p in copy.rglob("*") if p.is_file()):
        relative = path.relative_to(copy).as_posix()
        if relative in _NOT_HASHED or (relative.startswith("tests/test_") and relative.endswith(".py")):
            continue
        digest.update(relative.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _environment(copy: Path) -> dict[str, str]:
    # The tests find the shared data sets beside the repository; the copy is elsewhere.
    return {"JUDGE_SHARED_DATA": str(ROOT.parent / "shared" / "data"), **os.environ, "PYTHONPATH": str(copy),
            "PYTHONDONTWRITEBYTECODE": "1"}


def test_file_coverage(copy: Path, test_file: str, base: str, cache: Path) -> dict:
    """One test file run under coverage in the unmutated copy: {"tests": {node id: {seconds, outcome}} in the order
    run, "lines": {source file: {line: [[node id, phase], ...]}}, "collect": {source file: [lines]}} (lines run
    while collecting the module); cached under the tree's and the test file's hashes."""
    key = hashlib.sha256((base + hashlib.sha256((copy / test_file).read_bytes()).hexdigest()).encode()).hexdigest()
    cached = cache / f"{Path(test_file).stem}-{key[:24]}.json"
    if cached.exists():
        return json.loads(cached.read_text(encoding="utf-8"))
    import coverage

    work = Path(tempfile.mkdtemp(prefix="mutation-coverage-"))
    try:
        rc = work / "coveragerc"
        rc.write_text(_RCFILE.format(packages=", ".join(p.replace("/", ".") for p in PACKAGES),
                                     data=work / ".coverage"), encoding="utf-8")
        times = work / "times.json"
        env = {**_environment(copy), "PYTHONPATH": f"{copy}{os.pathsep}{copy / 'benchmarks'}",
               "MUTATION_TIMES": str(times)}
        started = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "coverage", "run", f"--rcfile={rc}", "-m", "pytest", "-q",
                               "-p", "no:cacheprovider", "-p", "mutation_contexts", test_file],
                              cwd=copy, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        tests = json.loads(times.read_text(encoding="utf-8")) if times.exists() else {}
        failed = [t for t, row in tests.items() if row["outcome"] == "failed"]
        if proc.returncode not in (0, 5) or failed:
            raise RuntimeError(f"the unmutated {test_file} fails in the copy: "
                               f"{failed[:3] or proc.stdout.strip().splitlines()[-1:]}")
        cov = coverage.Coverage(config_file=str(rc), data_file=str(work / ".coverage"))
        cov.combine(data_paths=[str(work)], keep=False)
        data = cov.get_data()
        lines: dict[str, dict[str, list]] = {}
        collect: dict[str, list[int]] = {}
        for measured in data.measured_files():
            parts = Path(measured).as_posix().split("/calibration/")
            if len(parts) < 2:
                continue
            source = "calibration/" + parts[-1]
            for line, contexts in data.contexts_by_lineno(measured).items():
                for context in contexts:
                    test, _, phase = context.rpartition("|")
                    if test:
                        lines.setdefault(source, {}).setdefault(str(line), []).append([test, phase])
                    else:
                        collect.setdefault(source, []).append(line)
        result = {"tests": tests, "lines": lines, "collect": collect}
        cache.mkdir(parents=True, exist_ok=True)
        # Written whole then renamed: two runs sharing the cache never read half a map.
        partial = cached.with_suffix(f".{os.getpid()}.part")
        partial.write_text(json.dumps(result), encoding="utf-8")
        os.replace(partial, cached)
        print(f"  coverage {time.monotonic() - started:6.1f}s  {test_file} ({len(tests)} tests)", flush=True)
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _function_bodies(text: str) -> tuple[list[tuple[int, int]], list[tuple[int, int, int, bool]]]:
    """Character spans of the function and lambda bodies (code run when called, not when the module is imported),
    and every statement's (start, end, first line, compound)."""
    tree = ast.parse(text)
    lines_bytes = [line.encode("utf-8") for line in text.splitlines(keepends=True)]
    starts = _offsets(text)

    def span(first, last):
        return (_char(lines_bytes, starts, first.lineno, first.col_offset),
                _char(lines_bytes, starts, last.end_lineno, last.end_col_offset))

    bodies, statements = [], []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            bodies.append(span(node.body[0], node.body[-1]))
        elif isinstance(node, ast.Lambda):
            bodies.append(span(node.body, node.body))
        if isinstance(node, ast.stmt):
            statements.append((*span(node, node), node.lineno, hasattr(node, "body")))
    return bodies, statements


class Selector:
    """The tests to run for a mutant, from the coverage maps of its mapped test files."""

    def __init__(self, copy: Path, cache: Path):
        self.copy, self.cache, self.base = copy, cache, tree_digest(copy)
        self.maps: dict[str, dict] = {}
        self.shapes: dict[str, tuple] = {}

    def coverage_of(self, test_file: str) -> dict:
        if test_file not in self.maps:
            self.maps[test_file] = test_file_coverage(self.copy, test_file, self.base, self.cache)
        return self.maps[test_file]

    def select(self, m: Mutant, test_files: list[str]) -> tuple[list[str], float] | None:
        """(pytest arguments, seconds they took unmutated), or None when every mapped file must run."""
        if m.file not in self.shapes:
            text = (self.copy / m.file).read_text(encoding="utf-8")
            self.shapes[m.file] = (*_function_bodies(text), _offsets(text))
        bodies, statements, starts = self.shapes[m.file]
        if not any(a <= m.start and m.end <= b for a, b in bodies):
            return None  # run when the module is imported: every test that imports it depends on it
        a, b, first, compound = min((s for s in statements if s[0] <= m.start and m.end <= s[1]),
                                    key=lambda s: s[1] - s[0])
        last = bisect.bisect_right(starts, m.end - 1) if compound else bisect.bisect_right(starts, b - 1)
        wanted = {str(line) for line in range(first, last + 1)}
        chosen, seconds = [], 0.0
        for test_file in test_files:
            found = self.coverage_of(test_file)
            if any(int(line) in found["collect"].get(m.file, []) for line in wanted):
                return None  # run while a test module is collected
            runs = [hit for line in wanted for hit in found["lines"].get(m.file, {}).get(line, [])]
            if any(phase == "setup" for _, phase in runs):  # a fixture's value may be shared by the whole file
                chosen.append(test_file)
                seconds += sum(row["seconds"] for row in found["tests"].values())
                continue
            tests = {test for test, _ in runs}
            for test, row in found["tests"].items():  # in the order they ran
                if test in tests:
                    chosen.append(test)
                    seconds += row["seconds"]
        return chosen, seconds


def clopper_pearson(k: int, n: int) -> tuple[float, float]:
    from scipy.stats import binomtest

    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    return ci.low, ci.high


def _rate(k: int, n: int) -> str:
    return f"{100 * k / n:5.1f}%" if n else "    -"


def report(results: list[dict], equivalent: dict) -> str:
    out = []
    files = sorted({r["file"] for r in results})
    header = f"{'file':34} {'mutants':>7} {'killed':>6} {'survived':>8} {'timeout':>7} {'kill rate':>9} {'equiv':>5} " \
             f"{'rate w/o equiv':>14}"
    out += [header, "-" * len(header)]

    def row(name, rows):
        n = len(rows)
        killed = sum(r["status"] == "killed" for r in rows)
        timeout = sum(r["status"] == "timeout" for r in rows)
        survived = sum(r["status"] == "survived" for r in rows)
        eq = sum(r["status"] == "survived" and r.get("equivalent") is not None for r in rows)
        return (f"{name:34} {n:7d} {killed:6d} {survived:8d} {timeout:7d} {_rate(killed + timeout, n):>9} {eq:5d} "
                f"{_rate(killed + timeout, n - eq):>14}")

    for f in files:
        out.append(row(f, [r for r in results if r["file"] == f]))
    out.append("-" * len(header))
    out.append(row("overall", results))
    n = len(results)
    detected = sum(r["status"] in ("killed", "timeout") for r in results)
    eq = sum(r["status"] == "survived" and r.get("equivalent") is not None for r in results)
    if n:
        low, high = clopper_pearson(detected, n)
        out.append(f"\nraw kill rate: {detected}/{n} = {100 * detected / n:.1f}% "
                   f"(95% Clopper-Pearson {100 * low:.1f}-{100 * high:.1f}%); timeouts count as killed")
    if n - eq:
        low, high = clopper_pearson(detected, n - eq)
        out.append(f"kill rate among non-equivalent mutants: {detected}/{n - eq} = {100 * detected / (n - eq):.1f}% "
                   f"(95% Clopper-Pearson {100 * low:.1f}-{100 * high:.1f}%); {eq} survivors judged equivalent")
    survivors = [r for r in results if r["status"] == "survived"]
    if survivors:
        out.append(f"\nsurvivors ({len(survivors)}):")
        for r in survivors:
            out.append(f"  {r['file']}:{r['line']}  [{r['operator']}]")
            out.append(f"      - {r['original_line']}")
            out.append(f"      + {r['mutated_line']}")
            if r.get("equivalent"):
                out.append(f"      not a gap: {r['equivalent']}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sample", type=int, default=150, help="how many mutants to draw (default 150)")
    parser.add_argument("--seed", type=int, default=1, help="the draw's seed (default 1)")
    parser.add_argument("--all", action="store_true", help="every mutation site, no sample")
    parser.add_argument("--file", action="append", default=[], help="only sites in files whose path contains this")
    parser.add_argument("--list", action="store_true", help="count the sites per file and operator; run nothing")
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds per mutant (default: 3 x the unmutated run of its tests + 60); given, the "
                             "unmutated tests are not run first")
    parser.add_argument("--select", choices=("coverage", "files"), default="coverage",
                        help="run each mutant's tests that execute its statement, from a cached coverage map "
                             "(default), or every test file mapped to its source file (the old way)")
    parser.add_argument("--coverage-cache", default=str(COVERAGE_CACHE), metavar="DIR",
                        help=f"where the coverage maps are kept (default {COVERAGE_CACHE})")
    parser.add_argument("--json", default="/tmp/mutation_results.json", help="every result, survivors included")
    parser.add_argument("--survivors-of", metavar="JSON",
                        help="run only the mutants that survived in an earlier run's --json (same sites)")
    parser.add_argument("--mutants-of", metavar="JSON",
                        help="run the same mutants as an earlier run's --json, all of them (e.g. the other --select)")
    parser.add_argument("--table", metavar="JSON", help="print the table of an earlier run's --json, with the "
                        "equivalent survivors as benchmarks/mutation_equivalent.json says now; run nothing")
    args = parser.parse_args(argv)

    if args.table:
        equivalent = equivalents()
        earlier = json.loads(Path(args.table).read_text(encoding="utf-8"))
        results = [{**r, "equivalent": equivalent.get((r["file"], r["original_line"], r["mutated_line"]))
                    if r["status"] == "survived" else None} for r in earlier["results"]]
        print(f"seed {earlier['seed']}, {earlier['sample']} of {earlier['sites']} sites\n")
        print(report(results, equivalent))
        return 0
    earlier = json.loads(Path(args.survivors_of or args.mutants_of).read_text(encoding="utf-8"))["results"] \
        if args.survivors_of or args.mutants_of else []
    mutants = [m for m in all_mutants({r["file"] for r in earlier})
               if not args.file or any(f in m.file for f in args.file)]
    unmapped = sorted({m.file for m in mutants} - set(TESTS))
    if unmapped:  # found before any mutant runs, not as a KeyError midway through a draw
        parser.error(f"no tests mapped for {', '.join(unmapped)}: add them to TESTS in {Path(__file__).name}")
    if args.list:
        by_file: dict[str, int] = {}
        by_op: dict[str, int] = {}
        for m in mutants:
            by_file[m.file] = by_file.get(m.file, 0) + 1
            kind = m.operator.split()[0] if not m.operator.startswith("compare") else m.operator
            by_op[kind] = by_op.get(kind, 0) + 1
        for name, count in sorted(by_file.items()):
            print(f"{name:34} {count:5d}")
        print(f"{'total':34} {len(mutants):5d}\n")
        for name, count in sorted(by_op.items(), key=lambda kv: -kv[1]):
            print(f"{name:34} {count:5d}")
        return 0
    chosen = mutants if args.all else random.Random(args.seed).sample(mutants, min(args.sample, len(mutants)))
    if args.survivors_of or args.mutants_of:
        wanted = {(r["file"], r["line"], r["col"], r["operator"], r.get("start")) for r in earlier
                  if args.mutants_of or r["status"] == "survived"}
        chosen = [m for m in mutants if m.key in wanted or m.key[:4] + (None,) in wanted]
    chosen.sort(key=lambda m: (m.file, m.line, m.col, m.operator))
    equivalent = equivalents()
    print(f"{len(mutants)} mutation sites; running {len(chosen)} (seed {args.seed})", flush=True)

    # An interrupted run (Ctrl-C, kill) still removes the copy; the working tree is never written.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    copy = Path(tempfile.mkdtemp(prefix="mutation-"))
    results: list[dict] = []
    started = time.monotonic()
    try:
        copy_tree(copy)
        baseline: dict[tuple, float] = {}
        selector = Selector(copy, Path(args.coverage_cache)) if args.select == "coverage" else None
        for i, m in enumerate(chosen, 1):
            tests = [t for t in TESTS[m.file] if (copy / t).exists()]
            picked = selector.select(m, tests) if selector else None
            if selector and picked is None:  # every mapped file; the coverage runs checked them and timed them
                picked = tests, sum(row["seconds"] for t in tests for row in selector.coverage_of(t)["tests"].values())
            if picked is not None:
                tests, seconds = picked
                baseline[tuple(tests)] = seconds
            if not tests:
                results.append({**{k: v for k, v in asdict(m).items() if k != "end"}, "status": "survived",
                                "seconds": 0.0, "detail": "no mapped test executes this statement",
                                "equivalent": equivalent.get((m.file, m.original_line, m.mutated_line)), "tests": 0})
                print(f"[{i:3d}/{len(chosen)}] survived   0.0s  {m.file}:{m.line}  [{m.operator}]  "
                      f"(no mapped test executes it)", flush=True)
                continue
            if tuple(tests) not in baseline and not args.timeout:  # the unmutated tests must pass, and time them
                status, seconds, last = run_tests(copy, tests, 1800)
                if status != "survived":
                    print(f"the unmutated tests fail in the copy ({' '.join(tests)}): {last}", file=sys.stderr)
                    return 2
                baseline[tuple(tests)] = seconds
                print(f"  baseline {seconds:5.1f}s  {' '.join(tests)}", flush=True)
            timeout = args.timeout or 3 * baseline[tuple(tests)] + 60
            target = copy / m.file
            original = target.read_text(encoding="utf-8")
            mutated = mutated_text(original, m)
            try:
                same = ast.dump(ast.parse(mutated)) == ast.dump(ast.parse(original))
            except SyntaxError:
                same = True
            if same:  # cannot happen by construction; never counted
                print(f"[{i:3d}/{len(chosen)}] not a valid mutant: {m.file}:{m.line} [{m.operator}]", flush=True)
                continue
            try:
                target.write_text(mutated, encoding="utf-8")
                status, seconds, last = run_tests(copy, tests, timeout)
            finally:
                target.write_text(original, encoding="utf-8")
            reason = equivalent.get((m.file, m.original_line, m.mutated_line))
            results.append({**{k: v for k, v in asdict(m).items() if k != "end"}, "status": status,
                            "seconds": round(seconds, 1), "detail": last, "equivalent": reason, "tests": len(tests)})
            print(f"[{i:3d}/{len(chosen)}] {status:8} {seconds:5.1f}s  {m.file}:{m.line}  [{m.operator}]  "
                  f"{len(tests)} test{'s' * (len(tests) != 1)}  {'' if status != 'killed' else last}", flush=True)
    finally:
        shutil.rmtree(copy, ignore_errors=True)
        if results:
            Path(args.json).write_text(json.dumps({"seed": args.seed, "sample": len(chosen), "sites": len(mutants),
                                                   "select": args.select,
                                                   "results": results}, indent=1), encoding="utf-8")
    print()
    print(report(results, equivalent))
    print(f"\n{len(results)} mutants in {(time.monotonic() - started) / 60:.1f} minutes; results in {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
