"""Performance prediction for GPUs that are not present: vLLM's scheduler simulated on a
simulated clock (`schedule`), each step timed by a physical GPU cost model with a few global
fitted coefficients (`cost`, `coefficients`), turned into `vllm bench serve` figures (`figures`).
Pure Python + numpy: `kvplan predict` and `kvplan plan` import neither torch nor transformers.
"""
