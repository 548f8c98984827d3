"""The answer's token budget follows from its schema, checked with the real SmolLM2 tokenizer (llama.cpp's /tokenize):
the longest answer the schema allows always fits max_tokens, and a DialSummEval block of 14 candidates fits the
embedded server's block slot (8,192 tokens) together with its prompt; with a fixed budget of 1,024 the answer was
cut off."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import random
import string
import urllib.request
from pathlib import Path

import pytest

from judge.answers import BLOCK_RATIONALE_MAX, RATIONALE_MAX, AnswerFormat, BlockFormat, token_budget
from judge.items import Item
from judge.judging import block_letters
from judge.prompting import block_messages
from judge.rubric import load_rubric

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(importlib.util.find_spec("xllamacpp") is None,
                       reason="xllamacpp (the 'local' extra) is not installed"),
]
DATA = Path(os.environ.get("JUDGE_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


@pytest.fixture(scope="module")
def tokenize(default_model):
    """The real tokenizer of the default model (tests/conftest.py's default_model: skipped only when the model is
    truly absent; a broken fetch fails)."""
    from judge.backends import local

    assert local.resolve_model(None) == default_model  # what `judge score` would load
    with local.local_server(default_model, slots=1) as base_url:
        def count(text: str) -> int:
            request = urllib.request.Request(base_url.removesuffix("/v1") + "/tokenize",
                                             data=json.dumps({"content": text}).encode(), method="POST",
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=30) as response:
                return len(json.load(response)["tokens"])

        yield count


def _worst_text(n: int, alphabet: str, seed: int = 0) -> str:
    """n characters chosen to tokenize badly: no common words, so each costs about a token (or several, for CJK)."""
    rng = random.Random(seed)
    return "".join(rng.choice(alphabet) for _ in range(n))


LATIN = string.ascii_letters + string.digits + "éèàçôû!?;:-()"
CJK = "".join(chr(c) for c in range(0x4E00, 0x9FFF, 97))  # spread over the unified ideographs, rare ones too


def _longest_answer(fmt: AnswerFormat, text: str) -> dict:
    answer = {"rationale": text, fmt.verdict_key: max(fmt.allowed, key=lambda v: len(str(v)))}
    if fmt.explanations:
        answer["explanation"] = max(fmt.explanations, key=len)
    return answer


@pytest.mark.parametrize("rubric, language_alphabet", [
    ("dialsummeval", LATIN), ("call_centre_fr", LATIN), ("response_quality", LATIN), ("csds", CJK)])
def test_the_longest_pointwise_answer_fits_its_budget(tokenize, rubric, language_alphabet):
    r = load_rubric(rubric)
    for criterion in r.criteria:
        fmt = AnswerFormat.for_criterion(criterion)
        answer = _longest_answer(fmt, _worst_text(RATIONALE_MAX, language_alphabet))
        used = tokenize(json.dumps(answer, ensure_ascii=False))
        assert used <= token_budget(fmt, r.language), (criterion.id, used, token_budget(fmt, r.language))


def test_a_block_of_fourteen_fits_its_budget(tokenize):
    r = load_rubric("dialsummeval")
    letters = tuple(block_letters(14))
    fmt = BlockFormat(AnswerFormat.for_criterion(r.criteria[0]), letters)
    answer = {k: _longest_answer(fmt.inner, _worst_text(BLOCK_RATIONALE_MAX, LATIN, seed=n))
              for n, k in enumerate(letters)}
    assert tokenize(json.dumps(answer)) <= token_budget(fmt, r.language)


@pytest.mark.skipif(not (DATA / "dialsummeval" / "outputs.csv").is_file(),
                    reason=f"DialSummEval data not found under {DATA} (set JUDGE_SHARED_DATA)")
def test_real_dialsummeval_blocks_fit_the_embedded_servers_slot(tokenize):
    from judge.backends.local import BLOCK_CTX_PER_SLOT

    r = load_rubric("dialsummeval")
    with (DATA / "dialsummeval" / "items.csv").open(encoding="utf-8") as handle:
        dialogues = {row["item_id"]: row["dialogue"] for row in csv.DictReader(handle)}
    outputs: dict[str, list[Item]] = {}
    with (DATA / "dialsummeval" / "outputs.csv").open(encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            outputs.setdefault(row["item_id"], []).append(
                Item(id=row["item_id"], system=row["system"], dialogue=dialogues[row["item_id"]],
                     candidate=row["summary"]))
    # The three dialogues with the longest blocks: the worst case for the context.
    longest = sorted(outputs.values(), key=lambda g: len(g[0].dialogue_text) + sum(len(i.candidate) for i in g))[-3:]
    for group in longest:
        letters = block_letters(len(group))
        assert len(letters) == 14
        for criterion in r.criteria:
            messages = block_messages(r, criterion, group, letters)
            prompt = tokenize("\n".join(m["content"] for m in messages)) + 16 * len(messages)  # chat-template tokens
            budget = token_budget(BlockFormat(AnswerFormat.for_criterion(criterion), tuple(letters)), r.language)
            assert prompt + budget <= BLOCK_CTX_PER_SLOT, (group[0].id, criterion.id, prompt, budget)
