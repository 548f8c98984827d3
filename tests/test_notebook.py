"""examples/quickstart.ipynb runs top to bottom in a real Jupyter kernel (nbclient + ipykernel): judging with the
embedded default model, calibrate, screen, estimate, a plot, then audit, drift and select. Fails if any cell raises."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "examples" / "quickstart.ipynb"


@pytest.mark.e2e
@pytest.mark.slow
def test_quickstart_notebook_runs_in_a_real_kernel(default_model, tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat", reason="the dev extra installs nbformat")
    nbclient = pytest.importorskip("nbclient", reason="the dev extra installs nbclient")
    pytest.importorskip("ipykernel", reason="the dev extra installs ipykernel")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # a fresh answer cache: the model really judges
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(ROOT / "examples")}})
    client.execute()  # raises CellExecutionError naming the cell if any cell raises
    outputs = {i: cell.get("outputs", []) for i, cell in enumerate(notebook.cells) if cell.cell_type == "code"}
    text = "\n".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/plain", ""))
                     for cell in outputs.values() for o in cell)
    assert "coherence" in text and "Correlation, system level" in text
    assert "the judge's score moves" in text and "in_best_set" in text  # audit's sentences, select's table
    assert any("image/png" in o.get("data", {}) for cell in outputs.values() for o in cell)  # the plot
    assert not (ROOT / "examples" / "judgments.jsonl").exists()  # it writes only into its working folder
