"""Answer schemas and the strict parser: every legal answer accepted, every illegal one rejected."""

import json
import math

import jsonschema
import pytest

from judge.answers import RATIONALE_MAX, AnswerFormat, expected_score, verdict_probabilities
from judge.errors import AnswerError
from judge.rubric import available_rubrics, load_rubric

LIKERT = AnswerFormat("score", (1, 2, 3, 4, 5))


@pytest.mark.parametrize("rubric", available_rubrics())
def test_schema_accepts_every_legal_answer_and_rejects_others(rubric):
    for criterion in load_rubric(rubric).criteria:
        fmt = AnswerFormat.for_criterion(criterion)
        schema = fmt.json_schema()
        jsonschema.Draft202012Validator.check_schema(schema)
        base = {"rationale": "r"}
        if fmt.explanations:
            base["explanation"] = fmt.explanations[0]
        for value in criterion.scale.values:
            answer = {**base, fmt.verdict_key: value}
            jsonschema.validate(answer, schema)
            assert fmt.parse(json.dumps(answer))[fmt.verdict_key] == value
        illegal = [min(criterion.scale.values) - 1, max(criterion.scale.values) + 1, "3", 3.5, None] if fmt.numeric \
            else ["maybe", "", 1, None, "other"]
        for bad in illegal:
            with pytest.raises(jsonschema.ValidationError):
                jsonschema.validate({**base, fmt.verdict_key: bad}, schema)
            # The parser forgives what a schema-less server may send for a legal answer: "3" for 3, 1 for "1".
            if bad is not None and not (fmt.numeric and bad == "3") and not (not fmt.numeric and bad == 1):
                with pytest.raises(AnswerError):
                    fmt.parse(json.dumps({**base, fmt.verdict_key: bad}))
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({**base, fmt.verdict_key: criterion.scale.values[0],
                                 "rationale": "x" * (RATIONALE_MAX + 1)}, schema)
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({**base, fmt.verdict_key: criterion.scale.values[0], "extra": 1}, schema)
        if fmt.explanations:
            with pytest.raises(jsonschema.ValidationError):
                jsonschema.validate({**base, fmt.verdict_key: criterion.scale.values[0], "explanation": "made up"},
                                    schema)


@pytest.mark.parametrize(
    "text, score",
    [
        ('{"rationale": "fine", "score": 4}', 4),
        ('```json\n{"rationale": "fine", "score": 4}\n```', 4),
        ('Here you go: {"score": "2", "rationale": "meh"} thanks', 2),
        ('{"rationale": "ok", "score": 5.0}', 5),
    ],
)
def test_parser_accepts_legal_answers(text, score):
    assert LIKERT.parse(text)["score"] == score


@pytest.mark.parametrize(
    "text, problem",
    [
        ("I would say 4.", "no JSON object"),
        ('{"rationale": "ok"}', "no 'score' key"),
        ('{"rationale": "ok", "score": 7}', "not one of"),
        ('{"rationale": "ok", "score": 3.5}', "not one of"),
        ('{"rationale": "ok", "score": true}', "not one of"),
        ('{"rationale": "ok", "score": "four"}', "not one of"),
        ('{"rationale": "ok", "score": 4', "no JSON object"),  # truncated
        ('{"rationale": 12, "score": 4}', "not a string"),
    ],
)
def test_parser_rejects_illegal_answers_and_keeps_the_raw_text(text, problem):
    with pytest.raises(AnswerError, match=problem) as err:
        LIKERT.parse(text)
    assert err.value.raw == text


def test_labels_and_explanations():
    fmt = AnswerFormat("label", ("appropriate", "not appropriate", "I don't know"), ("off topic", "other"))
    parsed = fmt.parse('{"rationale": "r", "label": "Appropriate ", "explanation": "off topic"}')
    assert parsed == {"rationale": "r", "label": "appropriate", "explanation": "off topic"}
    with pytest.raises(AnswerError, match="explanation"):
        fmt.parse('{"rationale": "r", "label": "appropriate", "explanation": "rude"}')
    assert fmt.json_schema()["properties"]["explanation"]["enum"] == ["off topic", "other"]


def _token(text, logprob=-0.01, alternatives=()):
    return {"token": text, "bytes": list(text.encode()), "logprob": logprob,
            "top_logprobs": [{"token": t, "logprob": lp} for t, lp in alternatives]}


def test_verdict_probabilities_renormalise_over_allowed_points_found_by_content():
    # A ```json wrapper and a multi-byte character before the score: offsets must be found in the tokens.
    tokens = [_token(t) for t in ["```", "json", "\n{", ' "rationale', '": "', "fid", "\u00e8", "le", '",', ' "score',
                                  '":', " "]]
    tokens.append(_token("4", math.log(0.6), [("4", math.log(0.6)), ("5", math.log(0.2)), ("The", math.log(0.1)),
                                              (" 3", math.log(0.1))]))
    tokens.append(_token("}"))
    probs = verdict_probabilities(tokens, LIKERT)
    assert probs == pytest.approx({"1": 0, "2": 0, "3": 1 / 9, "4": 6 / 9, "5": 2 / 9})
    assert expected_score(probs) == pytest.approx((3 * 1 + 4 * 6 + 5 * 2) / 9)


def test_verdict_token_may_carry_the_colon_and_newlines():
    tokens = [_token('{"rationale": "x", "score"'),
              _token(":\n\n1", math.log(0.5), [(":\n\n1", math.log(0.5)), (":\n\n2", math.log(0.5))])]
    assert verdict_probabilities(tokens, LIKERT) == pytest.approx({"1": 0.5, "2": 0.5, "3": 0, "4": 0, "5": 0})


def test_verdict_probabilities_absent_when_no_score_token():
    assert verdict_probabilities([_token('{"rationale": "x"}')], LIKERT) is None
    assert verdict_probabilities([], LIKERT) is None
