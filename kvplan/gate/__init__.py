"""The CI gate and its baselines: a stress result checked against a stored baseline and against
its own prediction (`checks`), written as JUnit XML (`junit`); baselines stored and refused
(`baseline`). Rendering the verdict for people is `kvplan.report.gate_view`'s job.
May import stress (results, figures, scenarios) and below; never report, server or cli."""
