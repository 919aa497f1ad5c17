"""What is sent: one request record, the workload a scenario or `vllm bench serve`'s flags
describe, arrivals as a tagged union, datasets in a registry.

Modules: request.py (`Request`, the one request record), workload.py (`Workload`: classes of drawn
lengths or a dataset file, and the seeded request stream), classes.py (a request class and its
shared prefix), lengths.py (length distributions), arrivals.py (poisson, constant or closed loop),
prefix_cache.py (which prompt blocks a prefix cache already holds), prefix_repetition.py (vLLM's
synthetic prefix_repetition dataset), sessions.py (multi-turn conversations and agent loops), conversations.py
(conversations read from a ShareGPT-format file), turns.py (who
sends a conversation's next turn, when, with which prompt),
limits.py (the bounds that keep a workload finite); datasets/ (one module per dataset,
`vllm bench serve --dataset-name`).

Below perf (which times requests) and stress (which sends them); imports neither.
"""
