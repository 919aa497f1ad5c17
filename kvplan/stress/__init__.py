"""The stress harness: a scenario's requests against the bundled engine or a server, measured
against the prediction made first.

Modules: scenario.py and scenario_loader.py (scenario files), overrides.py, workload.py (the seeded
request stream), dataset.py (ShareGPT, custom and BurstGPT files replayed), bench_flags.py (`vllm bench
serve`'s load flags as a scenario), command.py (the run: check, predict, run, result), driver.py (one target's run),
target.py (the target interface; targets/ holds the engine and HTTP targets), runner.py and
step_probe.py (driving the engine), prediction.py and simulate.py (the prediction), cpu_cost.py and
calibrate.py (the CPU step cost and its calibration), machine_facts.py, machine_speed.py,
cpu_waits.py and run_queue.py (how fast and how busy this machine was), record.py, metrics.py and
figures.py (per-request records and the metrics named as vLLM names them), memory.py,
telemetry.py and bounded_http.py (bounded reads of a server's cold paths), result.py and result_checks.py (result.json),
vllm_result.py (result.vllm.json),
redact.py (secrets out). May import perf, engine and below; never server, gate, report or cli.
"""
