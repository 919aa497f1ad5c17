"""`stress --target` plans with the server's settings and names the cause of a difference."""
from __future__ import annotations

from kvplan.stress.scenario_loader import load_scenario, parse_scenario
from kvplan.stress.targets.server_settings import ServerSettings, adopt


def test_same_settings_other_pool_is_the_planners_error() -> None:
    s = load_scenario("ci-smoke")
    e = s.engine
    server = ServerSettings(
        num_gpu_blocks=s.num_gpu_blocks() + 7,
        block_size=e.block_size,
        cache_dtype=e.kv_cache_dtype,
        enable_prefix_caching=e.enable_prefix_caching,
        kv_cache_memory_bytes=e.kv_cache_memory_bytes,
        max_model_len=s.max_model_len,
    )
    data, notes = adopt(s, server)
    assert len(notes) == 1 and notes[0].startswith("planner:") and "kvplan's pool is wrong" in notes[0]
    assert parse_scenario(data).num_gpu_blocks() == s.num_gpu_blocks() + 7  # predicted with the server's pool


def test_a_server_set_up_differently_is_named_setting_by_setting() -> None:
    s = load_scenario("ci-smoke")
    server = ServerSettings(num_gpu_blocks=500, block_size=32, cache_dtype="fp8", enable_prefix_caching=True,
                            kv_cache_memory_bytes=None, max_model_len=512)
    data, notes = adopt(s, server)
    (note,) = notes
    assert note.startswith("server set up differently:")
    for words in (
        "block_size 32 (scenario: 16)",
        "kv_cache_dtype fp8 (scenario: float32)",
        "enable_prefix_caching True",
        "max_model_len 512 (scenario: 1024)",
        "num_gpu_blocks 500",
    ):
        assert words in note
    engine = parse_scenario(data).engine
    assert (engine.block_size, engine.kv_cache_dtype, engine.max_model_len, engine.num_gpu_blocks_override) == (
        32,
        "fp8",
        512,
        500,
    )


def test_a_server_that_tells_nothing_keeps_the_scenario() -> None:
    s = load_scenario("ci-smoke")
    data, notes = adopt(s, ServerSettings())
    assert data == s.to_dict() and "predicted with the scenario's engine settings" in notes[0]


def test_label_numbers_a_server_cannot_mean_are_unknown() -> None:
    from kvplan.stress.telemetry import label_int

    assert [label_int(v) for v in ("16", "1.6e1", "inf", "nan", "None", "x", None)] == [
        16,
        16,
        None,
        None,
        None,
        None,
        None,
    ]
