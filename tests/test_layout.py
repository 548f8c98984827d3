"""The floor plan (DESIGN.md, "Layout"), held by reading every import of the code (function-level ones included):

- calibration/: the root is the shared base and imports no family; each family folder imports the base and never
  another family;
- judge/ reaches calibration/ only through its command hub, calibration/cli.py;
- judge/backends/ imports no judge module above it on the ladder (cli -> run -> engine -> judging -> asking ->
  backends/), only the modules listed below as beneath or beside it;
- no module over 700 lines, no function over cyclomatic complexity 30, but for an explicit allow-list of today's
  offenders that may only shrink: whoever splits one removes its entry.

Imports are read from the syntax tree (absolute, relative and inside functions); a module path written as a string
(`importlib.import_module("calibration.study.cli")`) counts as an import too.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FAMILIES = ("calibrate", "study", "trust", "cascade", "tune")
# The base modules allowed to name families: the package's lazy public names and the command hub.
BASE_FACADES = {"calibration/__init__.py", "calibration/cli.py"}
HUB = "calibration.cli"

# What judge/backends/ may import of judge/: the modules beneath or beside it on the ladder (errors, secrets, file
# writing, the answer cache's request, run options as data, resources, settings, the judgment record's digest,
# prices), and the package itself (its __version__). Everything else of judge/ is above it: cli, api, run,
# engine, judging, asking, rubric, prompting, items, answers, results, qualification, sandbox, table, batch_cli,
# annotation/.
BACKENDS_MAY_IMPORT = {"judge", "judge.errors", "judge.secrets", "judge.outputs", "judge.cache", "judge.options",
                       "judge.resources", "judge.settings", "judge.judgment", "judge.prices"}

MAX_LINES = 700
MAX_COMPLEXITY = 30
# Modules over MAX_LINES today, with their size: an entry may not grow, and goes when its module is split.
LONG_MODULES: dict[str, int] = {}
# Functions over MAX_COMPLEXITY today (radon's cyclomatic complexity, as issue 42 measured them), with it: an entry
# may not grow, and goes when its function is brought to MAX_COMPLEXITY or below.
COMPLEX_FUNCTIONS: dict[str, int] = {}
_MODULE_PATH = re.compile(r"(calibration|judge)(\.\w+)+")


def _modules(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py"))


def _name_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    where = ROOT.joinpath(*name.split("."))
    return where.with_suffix(".py").is_file() or (where / "__init__.py").is_file()


def imports(path: Path, name: str | None = None) -> list[tuple[int, str]]:
    """(line, module) of every import in `path` (the module `name`, by default found from the path): relative ones
    resolved; `from package import module` gives the module; a string that is a whole dotted module path of this
    project counts too."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    name = name or _name_of(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            inner = [f"{base}.{alias.name}" for alias in node.names if _is_module(f"{base}.{alias.name}")]
            found += [(node.lineno, m) for m in inner] or [(node.lineno, base)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _MODULE_PATH.fullmatch(node.value):
            found.append((node.lineno, node.value))
    return found


def _family(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "calibration" and len(parts) > 1 and parts[1] in FAMILIES else None


def _where(path: Path, line: int) -> str:
    return f"{path.relative_to(ROOT)}:{line}"


def test_the_reader_finds_relative_function_level_and_string_imports(tmp_path):
    """The rules below are only as good as this reader: each kind of import it must see, seen."""
    probe = tmp_path / "probe.py"
    probe.write_text("from ..study import screen\nfrom ..io import read_text\n"
                     "import calibration.cascade.escalate as e\n"
                     "def f():\n    from .. import calibrate\n    return 'calibration.tune.cli'\n", encoding="utf-8")
    found = sorted(m for _, m in imports(probe, "calibration.trust.probe"))
    assert found == ["calibration.calibrate", "calibration.cascade.escalate", "calibration.io",
                     "calibration.study.screen", "calibration.tune.cli"]
    assert {_family(m) for m in found} == {"study", None, "cascade", "calibrate", "tune"}


def test_no_family_imports_another():
    crossings = [f"{_where(p, line)}: {module}" for family in FAMILIES
                 for p in _modules(f"calibration/{family}") for line, module in imports(p)
                 if _family(module) not in (None, family)]
    assert crossings == [], "a family imports another; move what they share to calibration/'s root"


def test_the_base_imports_no_family():
    base = [p for p in sorted((ROOT / "calibration").glob("*.py"))
            if str(p.relative_to(ROOT)) not in BASE_FACADES]
    assert len(base) >= 10  # the reader sees the base
    reaching = [f"{_where(p, line)}: {module}" for p in base for line, module in imports(p) if _family(module)]
    assert reaching == [], "the base imports a family"


def test_judge_imports_calibration_only_through_its_hub():
    seen = [(p, line, module) for p in _modules("judge") for line, module in imports(p)
            if module.split(".")[0] == "calibration"]
    assert any(module == HUB for _, _, module in seen)  # the hub is how judge reaches the statistics verbs
    assert [f"{_where(p, line)}: {module}" for p, line, module in seen if module != HUB] == []


def _above_backends(paths) -> list[str]:
    return [f"{_where(p, line)}: {module}" for p in paths for line, module in imports(p)
            if module.split(".")[0] == "judge" and not module.startswith("judge.backends")
            and module not in BACKENDS_MAY_IMPORT]


def test_backends_import_no_layer_above_them():
    """The run's identity (what a batch transport names its files by) is computed in judge/run.py and handed down."""
    paths = _modules("judge/backends")
    assert len(paths) >= 5 and ROOT / "judge/backends/batch.py" in paths
    assert _above_backends(paths) == []


def test_no_module_is_over_700_lines_but_the_listed_ones_which_only_shrink():
    sizes = {str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").splitlines())
             for p in _modules("calibration", "judge")}
    over = {name: n for name, n in sizes.items() if n > MAX_LINES}
    assert {n: c for n, c in over.items() if n not in LONG_MODULES} == {}, f"split these under {MAX_LINES} lines"
    assert {n: (c, LONG_MODULES[n]) for n, c in over.items() if n in LONG_MODULES and c > LONG_MODULES[n]} == {}, \
        "a listed module grew"
    assert [n for n in LONG_MODULES if n not in over] == [], "under the limit now: remove it from LONG_MODULES"


def test_no_function_is_over_complexity_30_but_the_listed_ones_which_only_shrink():
    visit = pytest.importorskip("radon.complexity", reason="radon (the dev extra) measures the complexity").cc_visit
    measured = {}
    for path in _modules("calibration", "judge"):
        for block in visit(path.read_text(encoding="utf-8")):
            for function in [block, *getattr(block, "methods", [])]:
                if function.complexity > MAX_COMPLEXITY:
                    measured[f"{path.relative_to(ROOT)}:{function.name}"] = function.complexity
    assert {n: c for n, c in measured.items() if n not in COMPLEX_FUNCTIONS} == {}, \
        f"bring these to complexity {MAX_COMPLEXITY} or below"
    assert {n: (c, COMPLEX_FUNCTIONS[n]) for n, c in measured.items()
            if n in COMPLEX_FUNCTIONS and c > COMPLEX_FUNCTIONS[n]} == {}, "a listed function grew"
    assert [n for n in COMPLEX_FUNCTIONS if n not in measured] == [], \
        "at or under the limit now: remove it from COMPLEX_FUNCTIONS"


def test_the_calibrate_family_is_imported_by_from_not_by_import_as():
    """`calibration.calibrate` is the verb (a function), so `import calibration.calibrate.X as m` finds the function
    first and fails; the family's modules are imported with `from calibration.calibrate import X`."""
    written = [f"{_where(p, n)}" for folder in ("calibration", "judge", "tests", "benchmarks")
               for p in _modules(folder) for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
               if re.match(r"\s*import calibration\.calibrate\.", line)]
    assert written == []
