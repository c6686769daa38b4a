import pytest

from rllib_agentgym.callbacks.scaling_inter import HorizonSchedule


def test_staged_schedule_follows_iteration():
    s = HorizonSchedule.from_config({"schedule": [10, 20, 30], "interval": 100}, default_max_turns=5)
    assert [s.horizon(t) for t in (0, 99, 100, 199, 200, 10_000)] == [10, 10, 20, 20, 30, 30]


def test_linear_schedule_grows_by_delta_every_interval_up_to_max():
    s = HorizonSchedule.from_config({"start": 4, "delta": 2, "interval": 3, "max": 9}, default_max_turns=5)
    # h(t) = min(9, 4 + 2 * (t // 3))
    assert [s.horizon(t) for t in range(0, 12)] == [4, 4, 4, 6, 6, 6, 8, 8, 8, 9, 9, 9]


def test_no_schedule_is_the_fixed_max_turns():
    s = HorizonSchedule.from_config(None, default_max_turns=7)
    assert {s.horizon(t) for t in range(50)} == {7}


def test_one_stage_is_a_fixed_horizon():
    s = HorizonSchedule.from_config({"schedule": [12]}, default_max_turns=3)
    assert {s.horizon(t) for t in range(50)} == {12}


def test_restored_run_gets_exactly_h_of_t():
    # Pure function of t: no drift however the run got to t.
    s = HorizonSchedule.from_config({"schedule": [2, 4], "interval": 2}, default_max_turns=1)
    assert s.horizon(2) == 4 and s.horizon(1) == 2


@pytest.mark.parametrize(
    "cfg",
    [{"schedule": []}, {"schedule": [3, 0]}, {"interval": 0, "schedule": [1]}, {"delta": 1}, {"shedule": [1]}],
)
def test_bad_schedules_are_rejected(cfg):
    with pytest.raises(ValueError):
        HorizonSchedule.from_config(cfg, default_max_turns=3)
