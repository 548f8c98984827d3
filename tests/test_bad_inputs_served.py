"""The last bad inputs of `judge score` / `render` / `--version`, as a user could give them, through the real CLI and,
where a server is needed, the real OpenAI SDK against the local stub server (tests/stub_server.py).

Each row is (what the user did, the files in the working directory, the command, environment changes, the exit code,
a pattern the error output must match, a pattern it must never show, and which files the run may write). Every row
checks that nothing was lost: each input file's sha256 is unchanged and no other file or folder appeared.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import pytest

from judge.cli import main

ROOT = Path(__file__).resolve().parents[1]
ITEM = {"id": "d1", "system": "s1", "dialogue": "Ann: can you buy milk?\nBob: sure", "candidate": "Bob will buy milk."}
ITEMS = "".join(json.dumps({**ITEM, "system": s}) + "\n" for s in ("s1", "s2"))
PAIRS = (ROOT / "examples" / "pairs.jsonl").read_text(encoding="utf-8")
SECRET = "hunter2-url-password"
SDK = ["--backend", "openai", "--base-url", "{url}", "--model", "stub", "--client", "sdk"]
SCORE = ["score", "--rubric", "dialsummeval", "--input", "items.jsonl", "--output", "out.jsonl", "--no-progress"]
NO_CACHE = ["--no-cache"]


def notes_txt() -> dict:
    return {"items.jsonl": ITEMS, "notes.txt": "call back Ann\n"}


# (name, files, argv, env, exit code, stderr must match, stderr must not contain, files the run writes)
ROWS = [
    # -- part 2: data lost, unsafe, traceback -----------------------------------------------------------------
    ("--output reaches the input through a folder that does not exist", {"items.jsonl": ITEMS},
     ["score", "--rubric", "dialsummeval", "--input", "items.jsonl", "--output", "./sub/../items.jsonl", *SDK,
      *NO_CACHE],
     {}, 2, r"error: \./sub/\.\./items\.jsonl: --output is the --input file; choose another --output", None, set()),
    ("--base-url with user:password@: the SDK sends them (auto picks it), never shown", {"items.jsonl": ITEMS},
     [*SCORE, "--backend", "openai", "--base-url", "{url_with_password}", "--model", "stub", *NO_CACHE], {}, 0,
     r"^judged 8 ", SECRET, {"out.jsonl"}),
    ("--base-url with user:password@ and --client aiohttp", {"items.jsonl": ITEMS},
     [*SCORE, "--backend", "openai", "--base-url", "{url_with_password}", "--model", "stub", "--client", "aiohttp",
      *NO_CACHE], {}, 2,
     r"error: --client aiohttp: http://\[redacted\]@127\.0\.0\.1:\d+/v1 holds a user name or password, which aiohttp "
     r"cannot send beside the API key's bearer header: use --client sdk", SECRET, set()),
    ("$JUDGE_BASE_URLS with a password", {"items.jsonl": ITEMS}, [*SCORE, "--model", "stub", *NO_CACHE],
     {"JUDGE_BASE_URLS": "{url_with_password}"}, 0, r"^judged 8 ", SECRET, {"out.jsonl"}),
    ("a server with a password that does not answer: its URL shown masked", {"items.jsonl": ITEMS},
     [*SCORE, "--backend", "openai", "--base-url", f"http://ann:{SECRET}@127.0.0.1:9/v1", "--model", "stub",
      "--timeout", "1", *NO_CACHE], {}, 2,
     r"error: the server at http://\[redacted\]@127\.0\.0\.1:9/v1 cannot be used: 8 connection attempts", SECRET,
     set()),
    ("--base-url with a port that is not a number", {"items.jsonl": ITEMS},
     [*SCORE, "--backend", "openai", "--base-url", f"http://ann:{SECRET}@host:port/v1", "--model", "stub"], {}, 2,
     r"error: --base-url http://\[redacted\]@host:port/v1: not a server URL", SECRET, set()),
    # -- part 3: silently wrong ---------------------------------------------------------------------------
    ("--criteria consistency,consistency: one line per judgment", {"items.jsonl": ITEMS},
     [*SCORE, *SDK, *NO_CACHE, "--criteria", "consistency,consistency"], {}, 0, r"judged 2 ", None, {"out.jsonl"}),
    # -- part 4: unclear messages ---------------------------------------------------------------------------
    ("--output /dev/full", {"items.jsonl": ITEMS},
     ["score", "--rubric", "dialsummeval", "--input", "items.jsonl", "--output", "/dev/full", *SDK, *NO_CACHE],
     {}, 2, r"error: /dev/full: not a regular file \(a device, a pipe or a socket\); --output must be a file", None,
     set()),
    ("$OPENAI_API_KEY empty, the hosted API", {"items.jsonl": ITEMS},
     [*SCORE, "--backend", "openai", "--model", "gpt-4o-mini", *NO_CACHE], {"OPENAI_API_KEY": ""}, 2,
     r"error: \$OPENAI_API_KEY is empty: the OpenAI API needs a key: set it in the environment", None, set()),
    ("--api-key-env names an unset variable, the hosted API", {"items.jsonl": ITEMS},
     [*SCORE, "--backend", "openai", "--model", "gpt-4o-mini", "--api-key-env", "MY_KEY", *NO_CACHE],
     {"MY_KEY": None}, 2, r"error: \$MY_KEY is not set: the OpenAI API needs a key", None, set()),
    ("$OPENAI_API_KEY empty, a local server: a note, then the run", {"items.jsonl": ITEMS},
     [*SCORE, *SDK, *NO_CACHE], {"OPENAI_API_KEY": ""}, 0,
     r"^note: \$OPENAI_API_KEY is empty: no API key is sent to http://127\.0\.0\.1:\d+/v1\n", None, {"out.jsonl"}),
    ("--api-key-env names an unset variable, a local server: a note", {"items.jsonl": ITEMS},
     [*SCORE, *SDK, *NO_CACHE, "--api-key-env", "MY_KEY"], {"MY_KEY": None}, 0,
     r"^note: \$MY_KEY is not set: no API key is sent to http://127\.0\.0\.1:\d+/v1\n", None, {"out.jsonl"}),
    ("--cache is a file", {"items.jsonl": ITEMS, "cache.db": "mine\n"}, [*SCORE, *SDK, "--cache", "cache.db"], {}, 2,
     r"error: --cache cache\.db: the answer cache cannot be opened there \(it is a file; the answer cache is a "
     r"folder\)",
     None, set()),
    ("--cache under a file", notes_txt(), [*SCORE, *SDK, "--cache", "notes.txt/cache"], {}, 2,
     r"error: --cache notes\.txt/cache: the answer cache cannot be opened there \(Not a directory\)", None, set()),
    ("--cache holds a folder where the cache's database goes", {"items.jsonl": ITEMS, "c/answers.sqlite/x": "x"},
     [*SCORE, *SDK, "--cache", "c"], {}, 2,
     r"error: --cache c: the answer cache cannot be opened there \(unable to open database file\)", None, set()),
    ("--criteria ''", {"items.jsonl": ITEMS}, [*SCORE, *SDK, *NO_CACHE, "--criteria", ""], {}, 2,
     r"error: --criteria is empty: give criterion ids separated by commas", None, set()),
    ("--criteria ' , ' in render", {"items.jsonl": ITEMS},
     ["render", "--rubric", "dialsummeval", "--input", "items.jsonl", "--criteria", " , "], {}, 2,
     r"^judge render: error: --criteria is empty", None, set()),
    ("an items line with id twice", {"items.jsonl": ITEMS + '{"id": "d2", "system": "s1", "id": "d3", '
                                                           '"dialogue": "A: hi", "candidate": "x"}\n'},
     [*SCORE, *SDK, *NO_CACHE], {}, 2,
     r"error: items\.jsonl:3: field 'id' is given twice in this line \(JSON would keep only the last\); keep one",
     None, set()),
    ("an items line with candidate twice (render)", {"items.jsonl": '{"id": "d2", "candidate": "a", "dialogue": '
                                                                    '"A: hi", "candidate": "b"}\n'},
     ["render", "--rubric", "dialsummeval", "--input", "items.jsonl"], {}, 2,
     r"error: items\.jsonl:1: field 'candidate' is given twice", None, set()),
    ("render a pairs file with a pointwise rubric", {"pairs.jsonl": PAIRS},
     ["render", "--rubric", "dialsummeval", "--input", "pairs.jsonl"], {}, 2,
     r"error: pairs\.jsonl:1: item 'library-hours' is a pair .* use a pairwise rubric \(e\.g\. pairwise_summary",
     "pointwise.j2", set()),
    ("score a pairs file with a pointwise rubric", {"pairs.jsonl": PAIRS},
     ["score", "--rubric", "dialsummeval", "--input", "pairs.jsonl", "--output", "out.jsonl", *SDK, *NO_CACHE], {}, 2,
     r"error: pairs\.jsonl:1: item 'library-hours' is a pair .* use a pairwise rubric", "pointwise.j2", set()),
]


def tree(root: Path) -> dict[str, str]:
    """Every path under root: a file's sha256, or "dir"."""
    return {str(p.relative_to(root)): "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("files, argv, env, code, message, never, written", [row[1:] for row in ROWS],
                         ids=[row[0] for row in ROWS])
def test_a_bad_input_is_refused_clearly_or_judged_right_and_nothing_is_lost(
        tmp_path, monkeypatch, capsys, stub_server, files, argv, env, code, message, never, written):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path.parent / f"{tmp_path.name}-cache"))  # never the user's
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key")
    for name in ("JUDGE_BASE_URLS", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    for name, content in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
    before = tree(tmp_path)

    with_password = stub_server.base_url.replace("://", f"://ann:{SECRET}@")
    for name, value in env.items():
        if value is not None:
            monkeypatch.setenv(name, value.replace("{url_with_password}", with_password))
    got = main([a.replace("{url}", stub_server.base_url).replace("{url_with_password}", with_password) for a in argv])

    err = capsys.readouterr().err
    assert got == code, err
    assert re.search(message, err, re.MULTILINE), f"{err!r} does not match {message!r}"
    assert "Traceback" not in err
    if never:
        assert never not in err
        for path in tmp_path.rglob("*"):
            assert not path.is_file() or never.encode() not in path.read_bytes(), path
    after = tree(tmp_path)
    assert {k: v for k, v in after.items() if k in before} == before, "an input changed"
    assert set(after) - set(before) == written, "a stray file, or a missing output"
    if code == 2:
        assert len(err.strip().splitlines()) == 1, err
    if "out.jsonl" in written:  # one line per (id, system, criterion), none failed
        lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()]
        keys = [(r["id"], r["system"], r["criterion"]) for r in lines]
        assert len(keys) == len(set(keys)) and all(r["error"] is None for r in lines)


def test_version_is_the_installed_package_version(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"judge (llm-judge-rater) {version('llm-judge-rater')}\n"


def test_an_unwritable_cache_folder_names_the_flag(tmp_path, monkeypatch, capsys):
    """A folder this user cannot write (a read-only mount when root, where permissions do not bind)."""
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    where = locked / "cache"
    if os.access(locked, os.W_OK):  # root: permission bits do not stop it; sysfs refuses root too
        where = Path("/sys/judge-test-cache")
        try:
            where.mkdir()
        except OSError:
            pass  # as wanted
        else:
            where.rmdir()
            pytest.skip("no folder here that this user cannot write")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "items.jsonl").write_text(ITEMS, encoding="utf-8")
    got = main([*SCORE, "--backend", "openai", "--base-url", "http://127.0.0.1:9/v1", "--model", "m",
                "--cache", str(where)])
    err = capsys.readouterr().err
    assert got == 2
    assert re.fullmatch(rf"judge score: error: --cache {re.escape(str(where))}: the answer cache cannot be opened "
                        r"there \((Permission denied|Operation not permitted|Read-only file system)\); give --cache "
                        r"a folder this user can write, or run with --no-cache\n", err), err
    assert not (tmp_path / "out.jsonl").exists() and not where.exists()
