"""The CI gate and its baselines: a stress result checked against a stored baseline and against
its own prediction.

Modules: checks.py (the checks and the verdict), junit.py (the verdict as JUnit XML), baseline.py
(baselines stored and refused). Rendering the verdict for people is `kvplan.report.gate_view`'s
job. May import stress (results, figures, scenarios) and below; never report, server or cli.
"""
