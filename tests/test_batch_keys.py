"""--batch-dir's key file (judge/backends/batchkeys.py): reading the answers back records each judgment from what the
writing run kept of its question, without reading the items or rendering a prompt; and never records an answer under
a judgment it was not asked for.

Each answer here is made from its own request (its rationale names the custom_id, its verdict drawn from it), so a
judgment recorded under the wrong request shows. The same folder read with its key file, without it, and the
online run must give the same lines."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from judge.cli import main
from judge.outputs import write_files
from judge.rubric import load_rubric

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "items.jsonl"
RUBRIC = "call_centre_fr"  # 4 criteria, one gated: a second round for it
UNGATED = ",".join(c.id for c in load_rubric(RUBRIC).criteria if c.gate is None)


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("JUDGE_BASE_URLS", raising=False)


def args(work: Path, *extra: str, items: Path = EXAMPLES, rubric: str = RUBRIC) -> list[str]:
    return ["score", "--rubric", rubric, "--input", str(items), "--output", str(work / "out.jsonl"), "--backend",
            "openai", "--model", "stub", "--no-cache", "--no-progress", "--batch-dir", str(work / "batches"), *extra]


def _value(spec: dict, seed: int, gate: str):
    if "enum" in spec:
        return gate if gate in spec["enum"] else spec["enum"][seed % len(spec["enum"])]
    if spec.get("type") == "object":
        return {k: _value(v, seed + n, gate) for n, (k, v) in enumerate(spec.get("properties", {}).items())}
    return 1 + seed % 5 if spec.get("type") == "integer" else None


def answer(folder: Path, only=None, edit=None) -> None:
    """A runner: every unanswered request file (or those `only` names) answered, each answer made from its request:
    the rationale names its custom_id, the verdict is drawn from it. `edit(custom_id, line)` may change a line."""
    for path in sorted(folder.glob("round*-*.jsonl")):
        out = path.with_name(path.name.removesuffix(".jsonl") + ".out.jsonl")
        if path.name.endswith(".out.jsonl") or out.exists() or (only and path.name not in only):
            continue
        rows = []
        for request in map(json.loads, path.read_text(encoding="utf-8").splitlines()):
            key = request["custom_id"]
            seed = int(key[:8], 16)
            schema = request["body"]["response_format"]["json_schema"]["schema"]
            content = {k: (f"answer to {key[:12]}" if k == "rationale" else _value(v, seed, "yes"))
                       for k, v in schema.get("properties", {}).items()}
            body = {"id": "c", "object": "chat.completion", "model": "stub",
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": json.dumps(content)}}],
                    "usage": {"prompt_tokens": 100 + seed % 7, "completion_tokens": 10}}
            row = {"id": "r", "custom_id": key, "error": None,
                   "response": {"status_code": 200, "request_id": "r", "body": body}}
            rows.append(edit(key, row) if edit else row)
        out.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def lines(path: Path) -> list[dict]:
    return sorted((json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()),
                  key=lambda r: (r["id"], r["system"], r["criterion"]))


def until_done(work: Path, *extra: str, **kw) -> None:
    """Run, answer, run again... until the run is complete (at most three rounds)."""
    for _ in range(4):
        code = main(args(work, *extra, **kw))
        if code == 0:
            return
        assert code == 3
        answer(work / "batches")
    raise AssertionError("not done after three rounds")


def key_file(work: Path, round_: int = 1) -> Path:
    return work / "batches" / f"keys-round{round_}.jsonl"


def written_and_answered(work: Path, *extra: str) -> Path:
    assert main(args(work, *extra)) == 3
    answer(work / "batches")
    return work


def test_the_key_file_lists_the_plan_and_what_each_deferred_judgment_asked(tmp_path):
    work = written_and_answered(tmp_path, "--criteria", UNGATED)
    header, *records = [json.loads(x) for x in key_file(work).read_text(encoding="utf-8").splitlines()]
    assert header["kind"] == "llm-judge-rater batch keys"
    requests = [json.loads(x) for x in (work / "batches" / "round1-001.jsonl").read_text().splitlines()]
    items = [json.loads(x) for x in EXAMPLES.read_text(encoding="utf-8").splitlines()]
    criteria = UNGATED.split(",")
    assert sorted((r[0], r[1], r[2]) for r in records) == sorted((i["id"], i["system"], c) for i in items
                                                                  for c in criteria)
    assert sorted(k for r in records for k in r[5]) == sorted(r["custom_id"] for r in requests)


def test_reading_through_the_key_file_reads_no_item_and_renders_no_prompt(tmp_path, monkeypatch):
    work = written_and_answered(tmp_path, "--criteria", UNGATED)

    def refuse(*_, **__):
        raise AssertionError("the items were read or a prompt rendered")

    monkeypatch.setattr("judge.items.iter_items", refuse)
    monkeypatch.setattr("judge.prompting.render_messages", refuse)
    monkeypatch.setattr("judge.judging.criterion_messages", refuse)
    assert main(args(work, "--criteria", UNGATED)) == 0
    judged = lines(work / "out.jsonl")
    assert len(judged) == 4 * len(UNGATED.split(","))
    assert main(args(work, "--criteria", UNGATED)) == 0  # a rerun: nothing to do, from the key file alone


@pytest.mark.parametrize("how", ["without the key file", "key file edited", "key file of another run"])
def test_the_same_lines_as_rendering_every_request_again(tmp_path, capsys, how):
    """Every criterion (the gated one takes a second round): the key file's lines against those of the same folder
    read without it (removed, edited, or another run's), which tests/test_batch.py holds to the online lines."""
    keyed = tmp_path / "keyed"
    until_done(keyed)
    other = tmp_path / "other"
    assert main(args(other)) == 3
    answer(other / "batches")
    path = key_file(other)
    if how == "without the key file":
        path.unlink()
    elif how == "key file edited":
        path.write_text(path.read_text(encoding="utf-8").replace("]\n", "] \n", 1), encoding="utf-8")
    else:  # ours, but written for other criteria
        header, rest = path.read_text(encoding="utf-8").split("\n", 1)
        write_files({path: json.dumps({**json.loads(header), "identity": "0" * 16}) + "\n" + rest}, verb="batch")
    capsys.readouterr()
    until_done(other)
    err = capsys.readouterr().err
    if how != "without the key file":
        assert f"{path}: " in err and "each answer is matched by rendering its request again" in err
    assert lines(other / "out.jsonl") == lines(keyed / "out.jsonl")


def test_answers_still_out_wait_and_the_rest_is_recorded(tmp_path):
    work = tmp_path
    assert main(args(work, "--criteria", UNGATED, "--shards", "2")) == 3
    answer(work / "batches", only={"round1-001.jsonl"})
    assert main(args(work, "--criteria", UNGATED, "--shards", "2")) == 3  # the other shard still waits
    first = lines(work / "out.jsonl")
    assert 0 < len(first) < 12
    assert not list((work / "batches").glob("round2-*"))  # nothing written again
    answer(work / "batches")
    assert main(args(work, "--criteria", UNGATED, "--shards", "2")) == 0
    assert len(lines(work / "out.jsonl")) == 12


@pytest.mark.parametrize("kind", ["error", "unparseable"])
def test_a_failed_or_unparseable_answer_takes_the_full_path(tmp_path, kind):
    """One answer a 400 (the judgment fails, as online) or not JSON (asked again in round 2); the others are
    recorded from the key file; the lines equal those of the folder read without it."""
    victim = {}

    def edit(key, row):
        if not victim:
            victim["key"] = key
            if kind == "error":
                return {**row, "response": {"status_code": 400, "request_id": "r", "body": None}, "error": "too long"}
            row["response"]["body"]["choices"][0]["message"]["content"] = "no JSON here"
        return row

    results = {}
    for name in ("keyed", "unkeyed"):
        work = tmp_path / name
        assert main(args(work, "--criteria", UNGATED)) == 3
        if name == "unkeyed":
            key_file(work).unlink()
        victim.clear()
        answer(work / "batches", edit=edit)
        code = main(args(work, "--criteria", UNGATED))
        if kind == "error":
            assert code == 1
        else:
            assert code == 3 and len((work / "batches" / "round2-001.jsonl").read_text().splitlines()) == 1
            answer(work / "batches")
            assert main(args(work, "--criteria", UNGATED)) == 0
        results[name] = lines(work / "out.jsonl")
    assert results["keyed"] == results["unkeyed"] and len(results["keyed"]) == 12
    assert sum(j["error"] is not None for j in results["keyed"]) == (kind == "error")


# -- what changed between writing and reading: refused, never recorded under another judgment ---------------------
def _items_edited(work: Path) -> list[str]:
    items = work / "items.jsonl"
    rows = EXAMPLES.read_text(encoding="utf-8").splitlines()
    items.write_text("\n".join(rows) + "\n", encoding="utf-8")
    written_and_answered_with(work, items=items)
    first = json.loads(rows[0])
    rows[0] = json.dumps({**first, "candidate": first["candidate"] + " (edited)"}, ensure_ascii=False)
    items.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return args(work, "--criteria", UNGATED, items=items)


def _rubric_edited(work: Path) -> list[str]:
    rubric = work / "rubric.yaml"
    rubric.write_text((ROOT / "rubrics" / f"{RUBRIC}.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    written_and_answered_with(work, rubric=str(rubric))
    text = rubric.read_text(encoding="utf-8")
    rubric.write_text(text.replace("n'ajoutez pas de", "n'ajoutez jamais de"), encoding="utf-8")
    assert rubric.read_text(encoding="utf-8") != text
    return args(work, "--criteria", UNGATED, rubric=str(rubric))


def _criteria_changed(work: Path) -> list[str]:
    written_and_answered_with(work)
    return args(work, "--criteria", UNGATED.split(",")[0])


def _decoding_changed(work: Path) -> list[str]:
    written_and_answered_with(work)
    return args(work, "--criteria", UNGATED, "--temperature", "0.7")


def _stale_line_in_the_output(work: Path) -> list[str]:
    """The output's line for a judgment carries another item's fingerprint: stale, not reused."""
    written_and_answered_with(work)
    assert main(args(work, "--criteria", UNGATED)) == 0
    out = work / "out.jsonl"
    rows = out.read_text(encoding="utf-8").splitlines()
    first = json.loads(rows[0])
    first["fingerprint"]["item"] = hashlib.sha256(b"another item").hexdigest()[:16]
    out.write_text("\n".join([json.dumps(first, ensure_ascii=False), *rows[1:]]) + "\n", encoding="utf-8")
    return args(work, "--criteria", UNGATED)


def written_and_answered_with(work: Path, **kw) -> None:
    assert main(args(work, "--criteria", UNGATED, **kw)) == 3
    answer(work / "batches")


CHANGED = [  # (what changed between writing and reading, setup returning the read's argv, message)
    ("the items file", _items_edited, "holds the batch files of another command"),
    ("the rubric", _rubric_edited, "holds the batch files of another command"),
    ("the criteria", _criteria_changed, "holds the batch files of another command"),
    ("the decoding", _decoding_changed, "holds the batch files of another command"),
    ("a finished line's fingerprint", _stale_line_in_the_output, "finished judgments were made differently"),
]


@pytest.mark.parametrize("case,setup,message", CHANGED, ids=[c[0] for c in CHANGED])
def test_a_change_between_writing_and_reading_is_refused_and_nothing_recorded(tmp_path, capsys, case, setup,
                                                                               message):
    argv = setup(tmp_path)
    out = tmp_path / "out.jsonl"
    before = out.read_bytes() if out.exists() else None
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert (out.read_bytes() if out.exists() else None) == before  # nothing recorded, nothing lost


# -- a new results file: the items are read and checked once, by the run's own walk --------------------------------
def test_a_bad_item_is_refused_before_any_batch_file_is_committed(tmp_path, capsys):
    """Batched into a new results file, the run reads its items once: a bad last line is found after requests were
    written to temporary files, which are dropped: nothing is committed, nothing recorded."""
    items = tmp_path / "items.jsonl"
    rows = EXAMPLES.read_text(encoding="utf-8").splitlines()
    rows.append(json.dumps({**json.loads(rows[0]), "id": "late", "candidate": 42}))
    items.write_text("\n".join(rows) + "\n", encoding="utf-8")
    capsys.readouterr()
    assert main(args(tmp_path, "--criteria", UNGATED, items=items)) == 2
    err = capsys.readouterr().err.strip()
    assert f"{items}:{len(rows)}: field 'candidate' must be text" in err and len(err.splitlines()) == 1, err
    folder = tmp_path / "batches"
    assert not folder.exists() or not [p for p in folder.iterdir() if p.name != ".judge-written.json"]
    assert not (tmp_path / "out.jsonl").exists() or not (tmp_path / "out.jsonl").read_text()


def test_long_items_are_still_warned_of_when_the_items_are_read_once(tmp_path, capsys):
    from judge.run import LONG_ITEM_CHARS

    items = tmp_path / "items.jsonl"
    rows = EXAMPLES.read_text(encoding="utf-8").splitlines()
    first = json.loads(rows[0])
    rows[0] = json.dumps({**first, "candidate": "mot " * (LONG_ITEM_CHARS // 4 + 1)}, ensure_ascii=False)
    items.write_text("\n".join(rows) + "\n", encoding="utf-8")
    assert main(args(tmp_path, "--criteria", UNGATED, items=items)) == 3
    assert f"warning: 1 item(s) of {items} hold more than" in capsys.readouterr().err


def test_the_prompt_digest_is_the_joined_messages_hash_whatever_prompt_came_before():
    """_prompt_sha hashes the system prompt once per criterion (a memo of the last one): the digest must equal the
    plain sha256 of the joined messages, across alternating system prompts and an equal-but-new string."""
    import hashlib

    from judge.judging import _prompt_sha

    def plain(messages):
        return hashlib.sha256("\x1e".join(f"{m['role']}\x1f{m['content']}" for m in messages).encode()).hexdigest()[:16]

    system_a, system_b = "Rate faithfulness.", "Rate fluency."
    prompts = [[{"role": "system", "content": s}, {"role": "user", "content": f"summary {k}"}]
               for k, s in enumerate([system_a, system_b, system_a, "".join(["Rate ", "fluency."]), system_a])]
    prompts.append([{"role": "user", "content": "no system prompt"}])
    for messages in prompts:
        assert _prompt_sha(messages) == plain(messages)
    assert len({_prompt_sha(m) for m in prompts}) == len(prompts)


# -- the key file's lines: joined from their texts, byte for byte what the general JSON encoder writes -------------
HOSTILE = ["d0", "", 'quote " and backslash \\', "new\nline\ttab\r", "\x00\x1f\x7f", "é ü ß 中文", "\u2028\u2029",
           "🙂 astral", "</script>", "a" * 300, "0" * 64]


@pytest.mark.parametrize("asked", [None, ("d2bcfbab1296e505", []), ("d2bcfbab1296e505", ["1" * 64]),
                                   ("x", ["a" * 64, "b" * 64, "c" * 64])])
def test_a_key_line_is_what_the_json_encoder_writes_for_any_text(asked):
    from judge.backends.batchkeys import _dumps, _line

    for k, text in enumerate(HOSTILE):
        key = (text, HOSTILE[-k - 1], HOSTILE[(k + 3) % len(HOSTILE)])
        fields = [*key, "221e58f8c3519ccb"] if asked is None else [*key, "221e58f8c3519ccb", asked[0]]
        record = fields if asked is None else [*fields, list(asked[1])]
        line = _line(fields, None if asked is None else list(asked[1]))
        assert line == _dumps(record) == json.dumps(record, ensure_ascii=False, separators=(",", ":"))
        assert json.loads(line) == record


def test_a_key_line_with_a_value_that_is_not_text_is_left_to_the_encoder():
    from judge.backends.batchkeys import _dumps, _line

    assert _line(["d0", 7, "c", "ab"], None) == _dumps(["d0", 7, "c", "ab"]) == '["d0",7,"c","ab"]'
    assert _line(["d0", "s", "c", "ab", "p"], ["k", None]) == '["d0","s","c","ab","p",["k",null]]'


def test_a_deferred_judgment_leaves_no_garbage_for_the_collector(tmp_path):
    """Each deferred request once left a reference cycle (the asking frame held the future holding the Deferred,
    whose traceback held the frame), ~30 objects a judgment for the garbage collector: a tenth of a --batch-dir
    write's CPU. Writing 4x more judgments must leave no more garbage."""
    import gc

    garbage = []
    for n in (8, 32):
        items = tmp_path / f"items{n}.jsonl"
        items.write_text("".join(json.dumps({"id": f"d{k // 4}", "system": f"s{k % 4}", "dialogue": f"A: hi {k // 4}",
                                             "candidate": f"summary {k}"}) + "\n" for k in range(n)), encoding="utf-8")
        work = tmp_path / str(n)
        gc.collect()
        gc.disable()
        try:
            assert main(args(work, "--criteria", "consistency", items=items, rubric="dialsummeval")) == 3
            garbage.append(gc.collect())
        finally:
            gc.enable()
    assert garbage[1] - garbage[0] < 2 * (32 - 8), garbage  # what each run leaves once, not ~30 a judgment
