"""Judging: how far a figure may move and whether it did. A stress result checked against a stored
baseline and against its own prediction; every tolerance and its default lives here.

Modules: tolerance.py (`Tolerance`: '+15%', '-20%', '2%'), gate_block.py (`Gate`: a scenario's
`gate:` block), agreement.py (each predicted figure against its measurement, with the default
tolerance of its kind), checks.py (the gate's checks and verdict), junit.py (the verdict as JUnit
XML), baseline.py (baselines stored and refused). Rendering for people is kvplan.report's job.
May import results and below; never stress, report, server or cli (a scenario's schema, in stress,
uses `Gate`).
"""
