"""The stress harness: scenario files, seeded workloads, per-request records and metrics."""
