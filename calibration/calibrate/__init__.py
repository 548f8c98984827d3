"""The calibrate family: `judge calibrate` (calibrate.py), the human ceiling, isotonic maps, the paired comparison of
two judges, its HTML report and its command line.

`calibration.calibrate` stays the verb (a function): reach this folder's modules with
`from calibration.calibrate import maps` or `from calibration.calibrate.maps import fit_maps`.
"""
