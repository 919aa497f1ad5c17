

def test_a_named_figure_reads_in_its_unit() -> None:
    """The report's settings and cost-model tables: a float named with its unit shows in that unit,
    never as 4.083227613873163e-05."""
    from kvplan.report.formatting import fmt_named

    assert fmt_named("per_token_s", 9.473307741284027e-05) == "94.7 µs"
    assert fmt_named("intercept_s", 0.00425640823197388) == "4.26 ms"
    assert fmt_named("reference_kernel_ms", 0.6866) == "0.69 ms"
    assert fmt_named("cpu_wait_share", 4.083227613873163e-05) == "0.0%"
    assert fmt_named("residual_p90_pct", 16.974289078007015) == "+17.0%"
    assert fmt_named("r2", 0.9967227) == "0.997"
    assert fmt_named("kv_pool_bytes", 4 * 2**20) == "4.00 MiB"
    assert fmt_named("threads", 1) == "1"
