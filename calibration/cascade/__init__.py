"""Selective judging with a guarantee (`escalate`): which verdicts may stand without a human, judges in a cascade.

(A package of its own, not `calibration/escalate.py`: a submodule named like the function would replace
`calibration.escalate` the function with the module once imported.)
"""
