"""What a run measured, kept: per-request records, the run's result file, its figures and metrics.

Modules: record.py (`RequestRecord`: what was seen of one request), metrics.py (serving metrics
from records, keyed as vLLM keys them), figures.py (the one registry of a run's figures: name,
unit, how the gate treats it), slo.py (`Slo`: latency limits at a percentile), result.py
(`RunResult`, result.json), result_checks.py (what a result file's numbers may be),
vllm_result.py (result.vllm.json, as `vllm bench serve --save-result` writes it), machine_facts.py
(the machine a run or a calibration was made on), merge.py (several hosts' results as one run).

Written by stress, read by gate, report and `kvplan predict --vllm-result`; imports only files,
validation and errors.
"""
