"""Views for people: console tables and the HTML report; rendering only, no use case runs here.

Modules: estimate_view.py, capacity_view.py, catalog_view.py, predict_view.py,
calibration_view.py, stress_view.py and gate_view.py (console tables, one per command),
html.py, jinja.py and plots.py (the self-contained report.html), agreement_plot.py and verdict.py
(predicted vs measured, as gate.agreement judged it), formatting.py (units and missing values),
bench_plots.py (vllm bench serve's --plot-timeline and --plot-dataset-stats files).
May import gate, stress and below; never engine, server or cli.
"""
