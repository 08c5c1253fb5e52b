import time

import pytest
import torch

from suite.measure.stats import ratio_of_medians_ci, summarize
from suite.measure.timing import measure
from suite.measure.policy import TimingPolicy


def test_summary_of_known_samples():
    s = summarize([5.0, 1.0, 4.0, 2.0, 3.0])
    assert (s["n"], s["median"], s["q1"], s["q3"], s["iqr"]) == (5, 3.0, 2.0, 4.0, 2.0)
    assert s["mean"] == 3.0
    assert s["std"] == pytest.approx(1.5811388, rel=1e-6)
    assert s["cv"] == pytest.approx(1.5811388 / 3, rel=1e-6)
    assert s["min"] <= s["ci_low"] <= s["median"] <= s["ci_high"] <= s["max"]
    assert s["ci_low"] < s["ci_high"]
    # the tail percentiles, interpolated between samples as numpy does
    assert (s["p50"], s["p90"], s["p99"]) == pytest.approx((3.0, 4.6, 4.96))


def test_ci_narrows_with_more_samples():
    import numpy as np

    rng = np.random.default_rng(0)
    few = summarize(rng.normal(10, 1, 10))
    many = summarize(rng.normal(10, 1, 1000))
    assert many["ci_high"] - many["ci_low"] < (few["ci_high"] - few["ci_low"]) / 3
    assert many["ci_low"] <= many["median"] <= many["ci_high"]


def test_ci_covers_the_true_median_about_95_percent_of_the_time():
    import numpy as np

    rng = np.random.default_rng(1)
    hits = 0
    for trial in range(200):
        s = summarize(rng.exponential(1.0, 60), n_resamples=500, seed=trial)
        hits += s["ci_low"] <= np.log(2) <= s["ci_high"]  # median of Exp(1) is ln 2
    assert 0.88 <= hits / 200 <= 0.99


def test_degenerate_samples():
    s = summarize([2.0, 2.0, 2.0])
    assert s["ci_low"] == s["ci_high"] == 2.0 and s["cv"] == 0.0
    assert summarize([7.0])["median"] == 7.0
    with pytest.raises(ValueError, match="zero samples"):
        summarize([])


def test_ratio_of_medians():
    ratio, low, high = ratio_of_medians_ci([10, 11, 9, 10, 10.5], [5, 5.5, 4.5, 5, 5.2])
    assert ratio == pytest.approx(2.0)
    assert low <= ratio <= high
    assert 1.5 < low and high < 2.6


def test_measure_reaches_min_count_and_min_time():
    calls = []
    policy = TimingPolicy(warmup=2, min_repeats=3, min_time_s=0.1)
    samples = measure(lambda: (calls.append(1), time.sleep(0.01)), torch.device("cpu"), policy)
    assert len(calls) == len(samples) + 2  # warm-up calls are not samples
    assert len(samples) >= 3 and sum(samples) >= 0.1 * 0.9
    assert all(0.009 <= s < 0.5 for s in samples)
    few = measure(lambda: None, torch.device("cpu"), TimingPolicy(0, 4, 0.0))
    assert len(few) == 4


def test_measure_is_bounded_for_fast_calls():
    samples = measure(lambda: None, torch.device("cpu"),
                      TimingPolicy(warmup=0, min_repeats=1, min_time_s=60, max_repeats=50))
    assert len(samples) == 50


@pytest.mark.parametrize("warmup", [0, 1, 2])
def test_observing_a_call_costs_no_call_of_its_own(warmup):
    """The observer makes the last warm-up call (or, with none, one after the timed ones), so
    the calls are the warm-ups and the timed repeats, and no timed call is observed."""
    calls, observed = [], []

    def fn():
        calls.append("timed" if len(calls) >= warmup else "warm-up")

    def observe(call):
        observed.append(len(calls))
        call()

    samples = measure(fn, torch.device("cpu"), TimingPolicy(warmup, 3, 0.0, 3), observe=observe)
    assert len(samples) == 3 and len(calls) == warmup + 3 + (warmup == 0)
    assert observed == [warmup - 1 if warmup else 3]


@pytest.mark.parametrize("warmup,made,extra", [(2, 1, 1), (1, 1, 0), (0, 1, 0), (3, 5, 0)])
def test_calls_already_made_count_toward_the_warm_up(warmup, made, extra):
    calls = []
    samples = measure(lambda: calls.append(1), torch.device("cpu"),
                      TimingPolicy(warmup, 3, 0.0, 3), calls_made=made)
    assert len(samples) == 3 and len(calls) == 3 + extra


def test_bad_policy_is_named():
    with pytest.raises(ValueError, match="invalid timing policy"):
        TimingPolicy(min_repeats=0)
    with pytest.raises(ValueError, match="min_time_s must be >= 0"):
        TimingPolicy(min_time_s=-1)


class _Device:
    """A stand-in GPU: a clock that only the queued work moves, and a log of what happened."""

    def __init__(self):
        self.clock_ms, self.log = 0.0, []

    def event_class(self):
        device = self

        class Event:
            def __init__(self, enable_timing=False):
                assert enable_timing, "an Event made without timing cannot be timed"
                self.at, self.done = None, False

            def record(self):
                self.at = device.clock_ms
                device.log.append("record")

            def synchronize(self):
                self.done = True
                device.log.append("event.synchronize")

            def elapsed_time(self, end):  # milliseconds, as CUDA's; only once end completed
                assert end.done, "elapsed_time before the end event completed"
                return end.at - self.at
        return Event


def test_on_cuda_each_sample_is_the_events_elapsed_time_in_seconds(monkeypatch):
    """The GPU path, on a stand-in Event and synchronize (no GPU here): events recorded around
    each call, the end event waited for before it is read, milliseconds turned into seconds,
    and the queue drained once after the warm-up. Mutations tried: ``/ 1e3`` dropped, the
    start event recorded after the call, ``end.synchronize()`` removed, the warm-up's
    synchronize removed; each fails."""
    gpu = _Device()
    durations = iter([5.0, 2.0, 3.0, 4.0, 2.5, 9.9, 9.9])  # ms: one warm-up, then samples

    def call():
        gpu.log.append("call")
        gpu.clock_ms += next(durations)

    monkeypatch.setattr(torch.cuda, "Event", gpu.event_class())
    monkeypatch.setattr(torch.cuda, "synchronize",
                        lambda device=None: gpu.log.append(f"synchronize {device}"))
    policy = TimingPolicy(warmup=1, min_repeats=4, min_time_s=0.0, max_repeats=4)
    samples = measure(call, torch.device("cuda"), policy)
    assert samples == pytest.approx([0.002, 0.003, 0.004, 0.0025])
    assert gpu.log[:2] == ["call", "synchronize cuda"]  # warm-up drained before timing
    assert gpu.log[2:] == ["record", "call", "record", "event.synchronize"] * 4


def test_back_to_back_queues_a_round_of_calls_between_two_events(monkeypatch):
    """On the stand-in GPU: the queue drained first, then each round is one event pair around
    ``calls`` calls with one wait, the round's time divided by the calls. The round is sized
    from the per-call time (50 ms a round, 3 to 1000 calls). Mutations tried: a wait inside
    the round, the division dropped; each fails."""
    from suite.measure.timing import measure_back_to_back

    gpu = _Device()

    def call():
        gpu.log.append("call")
        gpu.clock_ms += 2.0

    monkeypatch.setattr(torch.cuda, "Event", gpu.event_class())
    monkeypatch.setattr(torch.cuda, "synchronize",
                        lambda device=None: gpu.log.append(f"synchronize {device}"))
    out = measure_back_to_back(call, torch.device("cuda"), per_call_s=0.004, rounds=3)
    assert (out["calls_per_round"], out["rounds"]) == (13, 3)  # ceil(0.05 / 0.004)
    assert out["samples"] == pytest.approx([0.002] * 3)
    one_round = ["record"] + ["call"] * 13 + ["record", "event.synchronize"]
    assert gpu.log == ["synchronize cuda"] + one_round * 3
    assert measure_back_to_back(call, torch.device("cpu"), 1.0, rounds=1)["calls_per_round"] == 3
    assert measure_back_to_back(call, torch.device("cpu"), 1e-7, rounds=1)[
        "calls_per_round"] == 1000


@pytest.mark.parametrize("mode, cpu, cuda", [("auto", False, True), ("always", True, True),
                                             ("never", False, False)])
def test_back_to_back_is_timed_where_the_policy_says(mode, cpu, cuda):
    policy = TimingPolicy(back_to_back=mode)
    assert (policy.times_back_to_back("cpu"), policy.times_back_to_back("cuda")) == (cpu, cuda)
    with pytest.raises(ValueError, match=r"back_to_back='sometimes' is not one of \('auto'"):
        TimingPolicy(back_to_back="sometimes")
