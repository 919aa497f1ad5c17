"""Time prediction for GPUs that are not present: vLLM's scheduler on a simulated clock, each step
timed by a physical GPU cost model with a few global fitted coefficients.

Modules: schedule.py (the scheduler simulation), scheduler_config.py (its settings), decode_stretch.py (its pure-decode
shortcut), request_state.py (a request's state in it), reuse_blocks.py (its block pool by id and hash
when prompts carry token ids: prefix hits, evictions, conversations' turns), cpu_offload.py (a CPU
tier behind it, vLLM's native offloading), cpu_tier_plan.py (the tier --kv-offloading-size gives),
router.py (replicas behind a router), route_rule.py (which replica: round-robin, least-loaded, session, KV-aware;
shared with `kvplan stress`),
session_plan.py (`kvplan plan-sessions`: GPU x TP x CPU tier x replicas for conversations), lockstep.py
(data-parallel MoE replicas stepping together), trace.py
(what a simulation did; replicas merged), cache_kinds.py (the cache kinds the step times, and
those it names as untimed), gpu_cost.py (`GpuStepModel`), kernel_cost.py
(`KernelStepModel`: each op from measured vLLM kernels, `--perf-model kernels`), kernel_dtypes.py
(which table times a model's weights, by its quantization), kernel_sources.py (what each of its
ops was timed from), kernel_grids.py
(its lookups per op, from the tables), kernel_tables.py (aiconfigurator-core's timing tables as
log-space grids), step_cost.py (the one step-cost interface: `StepShape` in, seconds and their
named parts out, shared with `kvplan stress`; `causal_pairs`, the one count of attention pairs),
cost_models.py (its one factory, by --perf-model),
bench_result.py (a result file it wrote,
read back as its workload and figures), bench_metrics.py (its figures), predict.py (`kvplan
predict`), explain.py (`predict --explain`: where the median TTFT and a step go),
capacity.py (`kvplan plan`: the configurations that meet SLOs), slo_watch.py (stops a simulation
once its SLO is surely missed). The coefficients are
fitted offline by benchmarks/gpu_cost_fit.py. Requests come from kvplan.workload. Pure Python + numpy:
may import workload, plan and below, never
engine, server, stress, gate, report or cli.
"""
