"""Bad input, as a user could give it, through the real CLI: one line naming file, line and problem; exit 2;
nothing lost (every file in the working directory unchanged, no output file begun).

Each row is (what the user did, the files in the working directory, the command, the message expected after
`judge VERB: error: `). Rows stop before any model is called: `score` checks its inputs first, and template
rows use `render`, which calls no model.
"""

import json
import re
from pathlib import Path

import pytest

from judge.cli import main

ITEM = {"id": "d1", "system": "s1", "dialogue": "Ann: can you buy milk?\nBob: sure", "candidate": "Bob will buy milk."}
GOOD = json.dumps(ITEM) + "\n"


def jsonl(*rows) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in rows)


def template(user_body: str) -> str:
    return "{% block system %}Judge it.{% endblock %}\n{% block user %}" + user_body + "{% endblock %}"


# A bundled rubric saved in Latin-1 by an editor.
RUBRIC_LATIN1 = Path(__file__).resolve().parents[1].joinpath("rubrics", "dialsummeval.yaml").read_text(
    encoding="utf-8").replace("title:", "title: Résumé ", 1).encode("latin-1", errors="replace")
RUBRIC_BAD_SCALE = Path(__file__).resolve().parents[1].joinpath("rubrics", "dialsummeval.yaml").read_text(
    encoding="utf-8").replace("value: 1,", "value: 9,", 1)
SCORE = ["score", "--rubric", "dialsummeval", "--output", "out.jsonl", "--no-cache", "--no-progress"]
RENDER = ["render", "--rubric", "dialsummeval", "--input", "items.jsonl"]

ROWS = [
    # -- items files --------------------------------------------------------------------------------------
    ("items file in Latin-1",
     {"items.jsonl": GOOD.encode()
      + jsonl({**ITEM, "system": "s2", "candidate": "Bob achète du café."}).encode("latin-1")},
     SCORE + ["--input", "items.jsonl"],
     r"items.jsonl:2: not UTF-8 text \(byte \d+ is 0xe8\); save the file as UTF-8"),
    ("--input is a directory", {"data/keep.txt": "x"}, SCORE + ["--input", "data"],
     r"data: is a directory, not a file"),
    ("--input does not exist", {}, SCORE + ["--input", "itmes.jsonl"], r"itmes.jsonl: no such file"),
    ("dialogue is a number", {"items.jsonl": jsonl(ITEM, {**ITEM, "system": "s2", "dialogue": 42})},
     SCORE + ["--input", "items.jsonl"],
     r"items.jsonl:2: field 'dialogue' must be a string or a list of \{\"speaker\": \.\.\., \"text\": \.\.\.\} turns, "
     r"got the number 42"),
    ("a dialogue turn without text", {"items.jsonl": jsonl({**ITEM, "dialogue": [{"speaker": "Ann", "txt": "hi"}]})},
     SCORE + ["--input", "items.jsonl"], r"items.jsonl:1: dialogue turn 1 has no 'text'"),
    ("candidate is a number", {"items.jsonl": jsonl({**ITEM, "candidate": 4.5})}, SCORE + ["--input", "items.jsonl"],
     r"items.jsonl:1: field 'candidate' must be text \(a JSON string\), got the number 4.5; "
     r"quote it if it is meant as text"),
    ("misspelt candidate key",
     {"items.jsonl": jsonl({k if k != "candidate" else "candiate": v for k, v in ITEM.items()})},
     SCORE + ["--input", "items.jsonl"],
     r"items.jsonl:1: needs 'candidate' .*\(is 'candiate' a misspelt 'candidate'\?\)"),
    ("a line that is not JSON", {"items.jsonl": GOOD + '{"id": "d2", "dialogue": "x", \n'},
     SCORE + ["--input", "items.jsonl"], r"items.jsonl:2: not valid JSON \(.* at column \d+\)"),
    ("a JSON array instead of JSONL", {"items.jsonl": json.dumps([ITEM, ITEM])},
     SCORE + ["--input", "items.jsonl"], r"items.jsonl:1: expected one JSON object per line, got a list"),
    ("the same item twice", {"items.jsonl": jsonl(ITEM, ITEM)}, SCORE + ["--input", "items.jsonl"],
     r"items.jsonl:2: duplicate item \(id='d1', system='s1'\), first on line 1"),
    ("an empty items file", {"items.jsonl": "\n\n"}, SCORE + ["--input", "items.jsonl"], r"items.jsonl: no items"),
    ("CSV row with an unquoted comma", {"items.csv": "id,system,dialogue,candidate\nd1,s1,A: hi,Bob, Ann greet.\n"},
     SCORE + ["--input", "items.csv"],
     r"items.csv:2: 5 values for 4 columns \(a ',' inside a text that is not quoted\?\)"),
    ("CSV in Latin-1 (Excel's default)",
     {"items.csv": "id,system,dialogue,candidate\nd1,s1,A: où?,Bob répond.\n".encode("cp1252")},
     SCORE + ["--input", "items.csv"], r"items.csv:2: not UTF-8 text \(byte 39 is 0xf9\)"),
    ("an Excel workbook", {"items.xlsx": b"PK\x03\x04binary"}, SCORE + ["--input", "items.xlsx"],
     r"items.xlsx: a spreadsheet or binary table; export it as CSV \(UTF-8\) or JSONL"),
    ("a field the rubric needs is missing", {"items.jsonl": jsonl({**ITEM, "lang": "zh"})},
     ["score", "--rubric", "csds", "--input", "items.jsonl", "--output", "out.jsonl", "--no-cache"],
     r"items.jsonl:1: the rubric needs field 'reference', which is missing or empty"),
    ("one id, two different dialogues",
     {"items.jsonl": jsonl(ITEM, {**ITEM, "system": "s2", "dialogue": "Ann: hello"})},
     SCORE + ["--input", "items.jsonl"], r"items.jsonl:2: item id 'd1' has a different dialogue than on line 1"),
    ("CSV header with a column twice", {"items.csv": "id,system,dialogue,candidate,candidate\nd1,s1,A: hi,x,y\n"},
     SCORE + ["--input", "items.csv"], r"items.csv:1: column 'candidate' appears more than once in the header"),
    # -- rubrics ------------------------------------------------------------------------------------------
    ("unknown rubric name", {"items.jsonl": GOOD},
     ["score", "--rubric", "dialsumeval", "--input", "items.jsonl", "--output", "out.jsonl", "--no-cache"],
     r"unknown rubric 'dialsumeval': not a bundled rubric \(call_centre_fr, csds, dialsummeval, "),
    ("unknown criterion", {"items.jsonl": GOOD}, SCORE + ["--input", "items.jsonl", "--criteria", "coherence,clarity"],
     r"rubric 'dialsummeval' has no criterion 'clarity'; it has: coherence, consistency, fluency, relevance"),
    ("rubric with a scale out of order", {"items.jsonl": GOOD, "mine.yaml": RUBRIC_BAD_SCALE},
     ["score", "--rubric", "mine.yaml", "--input", "items.jsonl", "--output", "out.jsonl", "--no-cache"],
     r"mine.yaml:\d+: field criteria.0.scale.likert.points: point values must be unique and ascending"),
    ("rubric in Latin-1", {"items.jsonl": GOOD, "mine.yaml": RUBRIC_LATIN1},
     ["score", "--rubric", "mine.yaml", "--input", "items.jsonl", "--output", "out.jsonl", "--no-cache"],
     r"mine.yaml:\d+: not UTF-8 text \(byte \d+ is 0xe9\)"),
    ("rubric path that does not exist", {"items.jsonl": GOOD},
     ["score", "--rubric", "mine.yaml", "--input", "items.jsonl", "--output", "out.jsonl", "--no-cache"],
     r"mine.yaml: no such file"),
    ("rubric with a YAML error", {"items.jsonl": GOOD, "mine.yaml": "name: x\ncriteria: [a, b\n"},
     ["score", "--rubric", "mine.yaml", "--input", "items.jsonl", "--output", "out.jsonl", "--no-cache"],
     r"mine.yaml:3: not valid YAML: expected ',' or '\]', but got '<stream end>' at column 1 "
     r"\(while parsing a flow sequence\)"),
    # -- templates ----------------------------------------------------------------------------------------
    ("template in Latin-1", {"items.jsonl": GOOD, "t.j2": template("Résumé: {{ candidate }}").encode("latin-1")},
     RENDER + ["--template", "t.j2"], r"t.j2:2: not UTF-8 text \(byte \d+ is 0xe9\)"),
    ("template with a huge range", {"items.jsonl": GOOD, "t.j2": template("\n{% for i in range(10**9) %}{% endfor %}")},
     RENDER + ["--template", "t.j2"], r"t.j2:3: the sandbox forbids this: range\(\) may not exceed 100000 items"),
    ("template including a missing file", {"items.jsonl": GOOD, "t.j2": template("{% include 'mine.j2' %}")},
     RENDER + ["--template", "t.j2"],
     r"t.j2:2: included template 'mine.j2' not found; the bundled ones are _criterion.j2, "),
    ("template with a typo in a variable", {"items.jsonl": GOOD, "t.j2": template("\n\n{{ candidat }}")},
     RENDER + ["--template", "t.j2"], r"t.j2:4: 'candidat' is undefined"),
    ("template file that does not exist", {"items.jsonl": GOOD}, RENDER + ["--template", "mine.j2"],
     r"mine.j2: no such file"),
    # -- the local model ----------------------------------------------------------------------------------
    ("--model .gguf that does not exist", {"items.jsonl": GOOD},
     SCORE + ["--input", "items.jsonl", "--model", "qwen.gguf"],
     r"--model qwen.gguf: no such file$"),
    ("--model a file that is not GGUF", {"items.jsonl": GOOD, "qwen.gguf": "<html>404 Not Found</html>"},
     SCORE + ["--input", "items.jsonl", "--model", "qwen.gguf"],
     r"--model qwen.gguf: not a .gguf file \(it does not start with the GGUF magic bytes\)"),
    ("--model a server's model name with the local backend", {"items.jsonl": GOOD},
     SCORE + ["--input", "items.jsonl", "--model", "Qwen/Qwen2.5-7B-Instruct"],
     r"--model Qwen/Qwen2.5-7B-Instruct: no such file "
     r"\(a model name on a server needs --backend openai --base-url URL"),
    ("--model a directory", {"items.jsonl": GOOD, "models/readme.txt": "x"},
     SCORE + ["--input", "items.jsonl", "--model", "models"],
     r"--model models: is a directory, not a .gguf file"),
    # -- model flags: meaningless values are refused, not passed through ---------------------------------------
    ("--timeout 0", {"items.jsonl": GOOD}, SCORE + ["--input", "items.jsonl", "--timeout", "0"],
     r"^--timeout must be more than 0 seconds, got 0$"),
    ("--max-tokens 0", {"items.jsonl": GOOD}, SCORE + ["--input", "items.jsonl", "--max-tokens", "0"],
     r"^--max-tokens must be at least 1, got 0$"),
    ("--temperature -3", {"items.jsonl": GOOD}, SCORE + ["--input", "items.jsonl", "--temperature", "-3"],
     r"^--temperature must be between 0 and 2, got -3$"),
    ("--samples 0", {"items.jsonl": GOOD}, SCORE + ["--input", "items.jsonl", "--samples", "0"],
     r"^--samples must be at least 1, got 0$"),
    ("--concurrency 0", {"items.jsonl": GOOD}, SCORE + ["--input", "items.jsonl", "--concurrency", "0"],
     r"^--concurrency must be at least 1, got 0$"),
    ("--base-url with --backend local", {"items.jsonl": GOOD},
     SCORE + ["--input", "items.jsonl", "--backend", "local", "--base-url", "http://127.0.0.1:8000/v1"],
     r"--base-url names a server, but --backend local starts the embedded one"),
    ("--backend openai without --model", {"items.jsonl": GOOD},
     SCORE + ["--input", "items.jsonl", "--backend", "openai", "--base-url", "http://127.0.0.1:9/v1"],
     r"--backend openai needs --model"),
    ("--logprobs in block mode", {"items.jsonl": GOOD},
     SCORE + ["--input", "items.jsonl", "--mode", "block", "--logprobs"],
     r"--logprobs needs --mode pointwise"),
    # -- the output: never a file that is not ours, never a half-begun one ----------------------------------------
    ("--output is a directory", {"items.jsonl": GOOD, "out/keep.txt": "x"},
     ["score", "--rubric", "dialsummeval", "--input", "items.jsonl", "--output", "out", "--no-cache"],
     r"out: is a directory; --output must be a file"),
    ("--output under a file", {"items.jsonl": GOOD, "notes.txt": "x"},
     ["score", "--rubric", "dialsummeval", "--input", "items.jsonl", "--output", "notes.txt/out.jsonl", "--no-cache"],
     r"notes.txt/out.jsonl: cannot be created: notes.txt is a file, not a directory"),
    ("--output is the --input", {"items.jsonl": GOOD},
     ["score", "--rubric", "dialsummeval", "--input", "items.jsonl", "--output", "items.jsonl", "--no-cache"],
     r"items.jsonl: --output is the --input file; choose another --output"),
    ("--output is a one-line notes file", {"items.jsonl": GOOD, "out.jsonl": "call back Ann on Monday\n"},
     SCORE + ["--input", "items.jsonl"], r"out.jsonl:1: not valid JSON .*not a judgments file written by judge"),
    ("--output holds another tool's JSON lines", {"items.jsonl": GOOD, "out.jsonl": jsonl({"id": "d1", "note": "x"})},
     SCORE + ["--input", "items.jsonl"], r"out.jsonl:1: not a judgment: field 'system': Field required; this is not a"),
    ("score with a template that does not render", {"items.jsonl": GOOD, "t.j2": template("{{ candidat }}")},
     SCORE + ["--input", "items.jsonl", "--template", "t.j2"], r"t.j2:2: 'candidat' is undefined"),
    ("compare an item without a pair", {"pairs.jsonl": GOOD},
     ["compare", "--rubric", "pairwise_summary", "--input", "pairs.jsonl", "--output", "out.jsonl", "--no-cache"],
     r"pairs.jsonl:1: the rubric needs field 'candidate_1', which is missing or empty"),
]


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("files, argv, message", [row[1:] for row in ROWS], ids=[row[0] for row in ROWS])
def test_bad_input_is_one_clear_line_and_nothing_is_lost(tmp_path, monkeypatch, capsys, files, argv, message):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / ".cache"))  # never the user's real cache
    for name, content in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    before = snapshot(tmp_path)

    code = main(argv)

    err = capsys.readouterr().err
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected one line, got:\n{err}"
    prefix = f"judge {argv[0]}: error: "
    assert lines[0].startswith(prefix), lines[0]
    assert re.search(message, lines[0][len(prefix):]), f"{lines[0][len(prefix):]!r} does not match {message!r}"
    assert snapshot(tmp_path) == before  # inputs unchanged, no output begun


def test_an_excel_csv_with_a_byte_order_mark_is_read(tmp_path, monkeypatch, capsys):
    """Excel's "CSV UTF-8" starts with a BOM: `id` must still be `id`, not '\\ufeffid' reported as missing."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "items.csv").write_bytes("\ufeffid,system,dialogue,candidate\nd1,s1,Ann: où ?,Bob répond.\n".encode())
    assert main(["render", "--rubric", "dialsummeval", "--input", "items.csv", "--json"]) == 0
    [first, *_] = json.loads(capsys.readouterr().out)
    assert "Bob répond." in first["messages"][-1]["content"]
