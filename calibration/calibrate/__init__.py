"""The calibrate family: `judge calibrate` (calibrate.py), the human ceiling, the paired comparison of two judges, its
HTML report and its command line (the isotonic maps, which `estimate --apply-map` reads too, are the base's).

`calibration.calibrate` stays the verb (a function): reach this folder's modules with
`from calibration.calibrate import ceiling` or `from calibration.calibrate.ceiling import human_ceiling`.
"""
