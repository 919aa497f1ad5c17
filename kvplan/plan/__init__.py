"""The planner: KV bytes, vLLM-style memory budget, cost model, scheduler simulation."""
