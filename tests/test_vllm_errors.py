"""Bad input for the vLLM paths: one clear line, exit code 2, and the judgments already in --output untouched.

Most rows are refused before vLLM is imported, so they run in every environment; the row for a missing vLLM
runs where vLLM is absent, the row for a folder vLLM cannot load where it is present.
"""

from __future__ import annotations

import http.server
import importlib.util
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from stub_server import StubServer

from judge.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "items.jsonl"
HAS_VLLM = importlib.util.find_spec("vllm") is not None


class NotAnOpenAIServer(http.server.BaseHTTPRequestHandler):
    """A web server that is not a model server: every request gets an HTML 404."""

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        page = b"<html><body><h1>404 Not Found</h1></body></html>"
        self.send_response(404)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)

    do_GET = do_POST

    def log_message(self, *args):
        pass


class QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        pass  # a client that hangs up once it has seen the 404 is expected here, not a traceback for the CI log


@pytest.fixture
def web_server():
    server = QuietServer(("127.0.0.1", 0), NotAnOpenAIServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


@pytest.fixture
def judged(tmp_path, monkeypatch):
    """An output file already holding four finished judgments (from a stub model server)."""
    monkeypatch.delenv("JUDGE_BASE_URLS", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    stub = StubServer().start()
    out = tmp_path / "judgments.jsonl"
    try:
        rc = main(["score", "--rubric", "dialsummeval", "--input", str(EXAMPLES), "--output", str(out),
                   "--criteria", "coherence", "--backend", "openai", "--base-url", stub.base_url, "--model", "stub",
                   "--no-cache", "--no-progress"])
    finally:
        stub.stop()
    assert rc == 0 and len(out.read_text().splitlines()) == 4
    return out


def model_folder(tmp_path: Path, config: str | None) -> str:
    folder = tmp_path / "model"
    folder.mkdir()
    if config is not None:
        (folder / "config.json").write_text(config)
    return str(folder)


def a_file(path: Path) -> str:
    path.write_bytes(b"GGUF\x03\x00")
    return str(path)


ROWS = [  # (row id, --model made from tmp_path, words the one-line error must hold, runs when)
    ("no --model", lambda tmp: None, "--backend vllm needs --model", True),
    ("missing folder", lambda tmp: str(tmp / "no-such-model"), "no such model folder", True),
    ("folder without config.json", lambda tmp: model_folder(tmp, None), "not a Hugging Face model folder", True),
    ("a GGUF file", lambda tmp: a_file(tmp / "model.gguf"), "not GGUF files", True),
    ("a plain file", lambda tmp: a_file(tmp / "weights.bin"), "not a model folder", True),
    ("vLLM not installed", lambda tmp: model_folder(tmp, json.dumps({"architectures": ["LlamaForCausalLM"]})),
     "--backend vllm needs vLLM", not HAS_VLLM),
    ("a folder vLLM cannot load", lambda tmp: model_folder(tmp, '{"model_type": "no-such-architecture"}'),
     "vLLM could not load", HAS_VLLM),
]


@pytest.mark.parametrize("make_model, expected, runs", [
    pytest.param(*row[1:], id=row[0], marks=[pytest.mark.vllm] if "vLLM cannot" in row[0] else []) for row in ROWS])
def test_bad_vllm_model(judged, tmp_path, capsys, make_model, expected, runs):
    if not runs:
        pytest.skip("this row needs vLLM installed" if not HAS_VLLM else "this row needs vLLM absent")
    before = judged.read_bytes()
    model = make_model(tmp_path)
    args = ["score", "--rubric", "dialsummeval", "--input", str(EXAMPLES), "--output", str(judged),
            "--criteria", "coherence,fluency", "--backend", "vllm", "--no-cache", "--no-progress"]
    assert main(args + (["--model", model] if model else [])) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("judge score: error: ") and expected in err[0], err
    assert judged.read_bytes() == before


def test_a_server_that_is_not_a_model_server(judged, web_server, capsys):
    before = judged.read_bytes()
    rc = main(["score", "--rubric", "dialsummeval", "--input", str(EXAMPLES), "--output", str(judged),
               "--criteria", "coherence,fluency", "--backend", "openai", "--base-url", web_server, "--model", "stub",
               "--no-cache", "--no-progress"])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("judge score: error: ") and web_server in err[0] and "404" in err[0]
    assert judged.read_bytes().startswith(before), "the judgments finished before are kept"


# Records every attempt to import one of the heavy packages, found or not: the check holds where they are absent
# (the main environment) as well as where they are installed (the vLLM one, which runs this test through -m vllm).
IMPORT_PROBE = """
import sys
HEAVY = ("torch", "vllm", "transformers")
tried = set()
class Probe:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HEAVY:
            tried.add(name.split(".")[0])
        return None
sys.meta_path.insert(0, Probe())
"""


@pytest.mark.vllm
def test_other_backends_import_neither_torch_nor_vllm(stub_process, tmp_path):
    _, base_url = stub_process()
    code = (IMPORT_PROBE + "from judge.cli import main\n"
            f"rc = main(['score', '--rubric', 'dialsummeval', '--input', {str(EXAMPLES)!r}, '--output', "
            f"{str(tmp_path / 'out.jsonl')!r}, '--criteria', 'coherence', '--backend', 'openai', '--base-url', "
            f"{base_url!r}, '--base-url', {base_url.replace('127.0.0.1', 'localhost')!r}, '--model', 'stub', "
            "'--no-cache', '--no-progress'])\n"
            "print(rc, sorted(tried), sorted(m for m in HEAVY if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.stdout.strip().splitlines()[-1] == "0 [] []", done.stdout + done.stderr
    # The probe itself works: a look-up of vllm is recorded, whether or not vllm is installed.
    probe = IMPORT_PROBE + "import importlib.util\nimportlib.util.find_spec('vllm')\nprint(sorted(tried))\n"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert "'vllm'" in done.stdout.strip().splitlines()[-1], done.stdout + done.stderr
