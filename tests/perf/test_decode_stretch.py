"""The pure-decode shortcut's two closed forms, worked by hand: where a stretch's clock stops
(`stretch_clocks`: a step runs while the clock before it is short of the next event) and how many
decode steps the free blocks carry (`_steps_blocks_allow`: request r takes its next block at step
blocks*bs - computed + 1, then every bs steps). The step-by-step path they replace is compared
with them on whole runs in test_schedule.py."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from kvplan.perf.decode_stretch import DecodeStretches, stretch_clocks


def test_a_stretch_runs_the_steps_that_start_before_the_event() -> None:
    # steps of 1, 2, 3, 4 s from t=10 end at 11, 13, 16, 20; the third starts at 13
    assert stretch_clocks(np.array([1.0, 2, 3, 4]), 10.0, 13.5).tolist() == [11, 13, 16]
    assert stretch_clocks(np.array([1.0, 2, 3, 4]), 10.0, 13.0).tolist() == [11, 13]  # starts at 13: not short of it
    assert stretch_clocks(np.array([1.0, 2, 3, 4]), 10.0, 10.5).tolist() == [11]
    assert stretch_clocks(np.array([1.0, 2, 3, 4]), 10.0, float("inf")).tolist() == [11, 13, 16, 20]


def test_a_stretch_clock_is_the_step_by_step_sum_bit_for_bit() -> None:
    costs = [0.1, 0.7, 0.013, 1e-9, 0.3] * 4
    clock, expected = 0.2, []
    for c in costs:
        clock += c
        expected.append(clock)
    assert stretch_clocks(np.array(costs), 0.2, float("inf")).tolist() == expected


def _engine(free: int, bs: int = 4) -> SimpleNamespace:
    return SimpleNamespace(free=free, config=SimpleNamespace(block_size=bs))


def _running(*blocks_computed: tuple[int, int]) -> list[SimpleNamespace]:
    return [SimpleNamespace(blocks=b, computed=c) for b, c in blocks_computed]


def test_the_free_blocks_carry_the_decodes_up_to_the_take_that_runs_short() -> None:
    # block 4: A holds 2 blocks with 6 tokens (its 9th token, step 3, takes a block, then 7, 11, ...);
    # B holds 1 block with 4 tokens (step 1, then 5, 9, ...): takes at steps 1, 3, 5, 7, 9, ...
    running = _running((2, 6), (1, 4))
    allow = [DecodeStretches._steps_blocks_allow(_engine(free), running) for free in range(5)]
    assert allow == [0, 2, 4, 6, 8]


def test_three_requests_and_a_block_of_sixteen() -> None:
    # offsets 16 - 3 + 1 = 14, 32 - 32 + 1 = 1, 16 - 10 + 1 = 7: takes at 1, 7, 14, 17, 23, 30, ...
    running = _running((1, 3), (2, 32), (1, 10))
    allow = [DecodeStretches._steps_blocks_allow(_engine(free, 16), running) for free in range(6)]
    assert allow == [0, 6, 13, 16, 22, 29]


def test_a_request_off_its_steady_block_count_is_stepped_one_at_a_time() -> None:
    # 5 tokens in one 4-token block (not a decode's steady count): no closed form, no stretch
    assert DecodeStretches._steps_blocks_allow(_engine(8), _running((1, 5), (2, 6))) == 0
