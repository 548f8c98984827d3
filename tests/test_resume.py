"""Resuming into an existing --output: a line is reused only when it answers the very same question, and a file
that is not ours is never touched. The real CLI against the local stub server (tests/stub_server.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from judge.cli import main
from judge.results import ResultsFile

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "items.jsonl"
TEMPLATE = ("{% block system %}Judge {{ criterion.name }}.{% endblock %}\n"
            "{% block user %}{{ candidate | fence('candidate') }}{% endblock %}\n")


def score(stub, tmp_path: Path, *extra: str, items: Path = EXAMPLES, output: str = "out.jsonl") -> int:
    return main(["score", "--rubric", "dialsummeval", "--input", str(items), "--output", str(tmp_path / output),
                 "--criteria", "coherence", "--backend", "openai", "--base-url", stub.base_url, "--model", "stub",
                 "--cache", str(tmp_path / "cache"), "--no-progress", *extra])


def edited_items(tmp_path: Path) -> Path:
    lines = [json.loads(x) for x in EXAMPLES.read_text(encoding="utf-8").splitlines()]
    lines[1]["candidate"] += " (edited)"
    path = tmp_path / "edited.jsonl"
    path.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines), encoding="utf-8")
    return path


# Each row: what the user changes between two runs into the same --output, and the words the refusal must use.
CHANGES = [
    ("an edited candidate", lambda tmp: ["--input", str(edited_items(tmp))], "item content (1)"),
    ("another template", lambda tmp: ["--template", str(_template(tmp))], "template"),
    ("more samples", lambda tmp: ["--samples", "3"], "samples 1 -> 3"),
    ("another temperature", lambda tmp: ["--temperature", "0.7"], "temperature 0.0 -> 0.7"),
    ("block mode", lambda tmp: ["--mode", "block"], "mode 'pointwise' -> 'block'"),
    ("another model", lambda tmp: ["--model", "stub-2"], "model 'stub' -> 'stub-2'"),
    ("logprobs", lambda tmp: ["--logprobs"], "logprobs False -> True"),
]


def _template(tmp: Path) -> Path:
    path = tmp / "mine.j2"
    path.write_text(TEMPLATE, encoding="utf-8")
    return path


@pytest.mark.parametrize("what, flags, words", CHANGES, ids=[c[0] for c in CHANGES])
def test_a_changed_run_is_refused_with_what_changed_then_redone_on_request(stub_server, tmp_path, capsys, what,
                                                                           flags, words):
    assert score(stub_server, tmp_path) == 0
    out = tmp_path / "out.jsonl"
    before = out.read_bytes()
    extra = flags(tmp_path)
    if "--input" in extra:  # the flag replaces the default input
        i = extra.index("--input")
        items, extra = Path(extra[i + 1]), extra[:i] + extra[i + 2:]
    else:
        items = EXAMPLES
    capsys.readouterr()
    assert score(stub_server, tmp_path, *extra, items=items) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "made differently" in err and words in err and "--redo-changed" in err
    assert out.read_bytes() == before  # refused untouched

    assert score(stub_server, tmp_path, *extra, "--redo-changed", items=items) == 0
    lines = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert len(lines) == 4 and len({(x["id"], x["system"]) for x in lines}) == 4
    # Now the file answers for this run: the same command again reuses every line.
    total = stub_server.stats.total
    assert score(stub_server, tmp_path, *extra, items=items) == 0
    assert stub_server.stats.total == total


# Each row: a second run into the same --output by another judge, on other criteria (nothing in common to redo).
OTHER_JUDGE = [
    ("another model", ["--criteria", "fluency", "--model", "stub-2"], "rubric dialsummeval@1 with model stub"),
    ("another rubric", ["--rubric", "pairwise_summary", "--criteria", "faithfulness",
                        "--input", str(ROOT / "examples" / "pairs.jsonl")], "this run is rubric pairwise_summary@1"),
]


@pytest.mark.parametrize("what, flags, words", OTHER_JUDGE, ids=[r[0] for r in OTHER_JUDGE])
def test_a_second_judge_is_not_mixed_into_a_results_file(stub_server, tmp_path, capsys, what, flags, words):
    assert score(stub_server, tmp_path) == 0
    out = tmp_path / "out.jsonl"
    before = out.read_bytes()
    capsys.readouterr()
    argv = ["score", "--rubric", "dialsummeval", "--input", str(EXAMPLES), "--output", str(out), "--criteria",
            "coherence", "--backend", "openai", "--base-url", stub_server.base_url, "--model", "stub", "--cache",
            str(tmp_path / "cache"), "--no-progress"]
    for flag, value in zip(flags[::2], flags[1::2]):  # later flags win in argparse
        argv += [flag, value]
    argv = ["compare" if "pairwise_summary" in flags else "score", *argv[1:]]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "a results file holds one judge" in err and words in err, err
    assert out.read_bytes() == before


def test_same_run_again_reuses_every_line(stub_server, tmp_path):
    assert score(stub_server, tmp_path) == 0
    total = stub_server.stats.total
    assert score(stub_server, tmp_path) == 0 and stub_server.stats.total == total


# Each row: an existing --output that is not a judgments file written by judge; it must come out byte-identical.
NOT_OURS = [
    ("a one-line notes file", "remember to check call-17\n"),
    ("a notes file without a final newline", "one line of notes"),
    ("a JSON object that is not a judgment", '{"id": "call-17", "note": "check this"}\n'),
    ("a JSON array", "[1, 2, 3]\n"),
    ("judgments then a foreign line", None),
    ("not UTF-8", b"\xff\xfe notes in UTF-16\n"),
]


@pytest.mark.parametrize("what, content", NOT_OURS, ids=[r[0] for r in NOT_OURS])
def test_a_file_that_is_not_ours_is_refused_untouched(stub_server, tmp_path, capsys, what, content):
    out = tmp_path / "out.jsonl"
    if content is None:
        assert score(stub_server, tmp_path) == 0
        content = (out.read_text(encoding="utf-8") + "my own notes\n"
                   + out.read_text(encoding="utf-8").splitlines()[0] + "\n")
    out.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    before = out.read_bytes()
    capsys.readouterr()
    assert score(stub_server, tmp_path) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(out) in err and ("not a judgments file" in err or "not a judgment" in err)
    assert out.read_bytes() == before


def test_output_equal_to_input_is_refused_and_the_input_kept(stub_server, tmp_path, capsys):
    items = tmp_path / "items.jsonl"
    items.write_text(EXAMPLES.read_text(encoding="utf-8").splitlines()[0] + "\n", encoding="utf-8")
    before = items.read_bytes()
    rc = score(stub_server, tmp_path, items=items, output="items.jsonl")
    assert rc == 2 and "--output is the --input file" in capsys.readouterr().err
    assert items.read_bytes() == before


def test_a_torn_last_line_after_judgments_is_dropped_and_redone(stub_server, tmp_path):
    assert score(stub_server, tmp_path) == 0
    out = tmp_path / "out.jsonl"
    lines = out.read_text(encoding="utf-8").splitlines()
    out.write_text("\n".join(lines[:3]) + "\n" + lines[3][: len(lines[3]) // 2], encoding="utf-8")  # a kill -9
    assert score(stub_server, tmp_path) == 0
    strip = lambda x: json.dumps({k: v for k, v in json.loads(x).items() if k not in ("usage", "from_cache")},  # noqa: E731
                                 sort_keys=True)
    # The same judgments (the redone one from the cache, so it cost no tokens now, and says it came from there).
    assert sum('"from_cache":true' in line for line in out.read_text(encoding="utf-8").splitlines()) == 1
    assert sorted(map(strip, out.read_text(encoding="utf-8").splitlines())) == sorted(map(strip, lines))


def test_a_lone_torn_first_line_is_ours_and_redone(stub_server, tmp_path):
    assert score(stub_server, tmp_path) == 0
    out = tmp_path / "out.jsonl"
    first = out.read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith('{"id":"')
    out.write_text(first[:40], encoding="utf-8")  # killed while writing the very first judgment
    assert score(stub_server, tmp_path) == 0
    assert len(out.read_text(encoding="utf-8").splitlines()) == 4


def test_results_file_keeps_one_line_per_key_and_drops_failures(tmp_path):
    path = tmp_path / "out.jsonl"
    ok = {"id": "d0", "system": "a", "criterion": "coherence", "score": 3.0, "rubric": "r@1", "model": "m"}
    failed = {**ok, "system": "b", "score": None, "error": "boom"}
    path.write_text("".join(json.dumps(x) + "\n" for x in (ok, failed, ok)), encoding="utf-8")
    results = ResultsFile(path)
    assert set(results.done) == {("d0", "a", "coherence")}
    assert path.read_text().count("\n") == 3  # nothing changes before start()
    results.start()
    results.close()
    assert [json.loads(x)["system"] for x in path.read_text().splitlines()] == ["a"]


@pytest.mark.parametrize("where, message", [
    ("a-directory", "is a directory"),
    ("a-file/out.jsonl", "is a file, not a directory"),
])
def test_unwritable_outputs_are_refused(tmp_path, where, message):
    (tmp_path / "a-directory").mkdir()
    (tmp_path / "a-file").write_text("x")
    from judge.errors import OutputError

    with pytest.raises(OutputError, match=message):
        ResultsFile(tmp_path / where)


PRINTS = [  # (case, a finished judgment's fingerprint as read back, this run's, the same question?)
    ("equal", {"model": "m", "seed": 0, "item": "ab12"}, {"model": "m", "seed": 0, "item": "ab12"}, True),
    ("other key order", {"seed": 0, "model": "m"}, {"model": "m", "seed": 0}, True),
    ("1.0 read back for 1", {"temperature": 1.0, "samples": 3}, {"temperature": 1, "samples": 3}, True),
    ("a changed value", {"model": "m", "seed": 0}, {"model": "m", "seed": 1}, False),
    ("a changed item", {"item": "ab12"}, {"item": "ab13"}, False),
    ("null against a value", {"max_tokens": None}, {"max_tokens": 0}, False),
    ("a key more", {"model": "m"}, {"model": "m", "swap": None}, False),
    ("a list inside (an older file)", {"template": ["a", "b"]}, {"template": ["a", "b"]}, True),
    ("a list changed", {"template": ["a", "b"]}, {"template": ["b", "a"]}, False),
    ("an object inside", {"x": {"a": 1, "b": 2}}, {"x": {"b": 2, "a": 1}}, True),
    ("no fingerprint (an old line)", None, {"model": "m"}, False),
]


@pytest.mark.parametrize("case,found,planned,same", PRINTS, ids=[p[0] for p in PRINTS])
def test_the_resume_index_tells_the_same_question_from_another(case, found, planned, same):
    from judge.results import print_digest

    assert (print_digest(found) == print_digest(planned)) is same
    assert print_digest(planned) == print_digest(dict(reversed(list(planned.items()))))


@pytest.mark.parametrize("offset,digest,flags", [
    (0, 0, 0), (2**40 + 3, 2**64 - 1, 1), (1, 2**63, (7 << 2) | 0b11), (2**63, 12345, 2**32 - 1)])
def test_an_index_entry_keeps_its_offset_digest_and_flags(offset, digest, flags):
    """The resume index packs each judgment's (line offset, fingerprint digest, flags) into one int; none of the three
    may spill into another, whatever the sizes (a digest is 64 bits; Python's hash is negative half the time)."""
    from judge.results import _entry, _fields, print_digest

    assert _fields(_entry(offset, digest, flags)) == (offset, digest, flags)
    assert all(0 <= print_digest({"seed": s}) < 2**64 for s in range(200))
