"""The stress harness: a scenario's requests against the bundled engine or a server, measured against
the prediction made first. What is sent is kvplan.workload's, what is kept kvplan.results', how it
is judged kvplan.gate's.

Modules: scenario.py and scenario_loader.py (scenario files), overrides.py (a scenario's model
overrides), bench_flags.py (`vllm bench serve`'s load flags as a scenario), bench_serve_flags.py
(its other flags: taken with vLLM's meaning or refused with why), stress_run.py (one `kvplan
stress`: check, predict, run, result files), driver.py (one target's run), target.py (the target
interface; targets/ holds the engine and HTTP targets), runner.py and step_probe.py (driving the
engine), replica_router.py (the engine's replicas behind a router), prediction.py and simulate.py
(the prediction on the engine's own scheduler), cpu_cost.py and calibrate.py (the CPU step cost and
its calibration), machine_speed.py, cpu_waits.py and run_queue.py (how fast and how busy this
machine was), memory.py (memory probes), telemetry.py and bounded_http.py (a server's /metrics, read
within bounds), redact.py (secrets out). May import gate, perf, results, workload, engine and below;
never server, report or cli.
"""
