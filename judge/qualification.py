"""Judge qualification: a rubric's own small test with expected answers, scored per criterion.

Annotators in the pairwise guideline had to pass a qualification test before the real work; a judge must too.
A Likert answer counts as agreeing when it is within the rubric's `tolerance` of the expected point; a label
must be the expected one. An N/A or failed judgment counts as disagreeing.
"""

from __future__ import annotations

from judge.errors import JudgeError
from judge.judgment import Judgment
from judge.rubric import Rubric


def qualification_report(rubric: Rubric, judgments: list[Judgment]) -> tuple[str, bool]:
    spec = rubric.qualification
    if spec is None:
        raise JudgeError(f"rubric {rubric.name!r} ships no qualification set")
    judged = {(j.id, j.criterion): j for j in judgments}
    rows, passed = [], True
    for criterion in rubric.criteria:
        expected = [((q.model_extra or {})["id"], q.expected[criterion.id]) for q in spec.items
                    if criterion.id in q.expected]
        if not expected:
            continue
        agree = sum(_agrees(judged.get((item_id, criterion.id)), answer, spec.tolerance)
                    for item_id, answer in expected)
        share = agree / len(expected)
        ok = share >= spec.threshold
        passed &= ok
        rows.append(f"{criterion.id:<20} {agree:>3}/{len(expected):<3} {share:6.0%}  {'pass' if ok else 'FAIL'}")
    header = f"{'criterion':<20} {'agree':>7} {'share':>6}  threshold {spec.threshold:.0%}"
    verdict = f"judge {'PASSES' if passed else 'FAILS'} the {rubric.name} qualification"
    return "\n".join([header, *rows, verdict]), passed


def _agrees(judgment: Judgment | None, expected, tolerance: int) -> bool:
    if judgment is None or judgment.failed or judgment.na:
        return False
    if judgment.label is not None:
        return judgment.label == str(expected)
    return judgment.score is not None and abs(judgment.score - float(expected)) <= tolerance
