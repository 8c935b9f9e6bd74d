"""Interval advice (`ckpt advise`, ckptcli.history.advise) and adaptive scheduling.

Published values the advice must match to 1%: Daly, J. T., "A higher order estimate of the
optimum checkpoint interval for restart dumps", Future Generation Computer Systems 22(3):
303-312, 2006 (doi:10.1016/j.future.2004.11.016), whose figures 3, 4 and 5 compare the model
with simulations for a take (dump) time delta = 5 min and a restart time R = 10 min:
M = 24 h gives tau_opt = 117 min (fig. 3), M = 6 h gives 57 min (fig. 4), M = 15 min gives
9.1 min (fig. 5). Young's rule (Young, J. W., "A first order approximation to the optimum
checkpoint interval", CACM 17(9):530-531, 1974) is sqrt(2 delta M): 120 min for the first.

Subjects' histories are built here with ckptcli's own take and event tails in the shape
`ckpt run` records (formats/events.md; the `process` kinds of issue 17: process:start,
process:checkpoint with take_seconds, process:exit with code or signal).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import pytest

from ckptcli.errors import InvalidInputError, NotFoundError
from ckptcli.history.advise import (
    AdaptiveSchedule,
    TooLittleData,
    advise,
    daly_interval,
    lost_per_failure,
    measure,
    parse_seconds,
    waste_fraction,
    young_interval,
)
from ckptcli.history.recorder import AUTO_START_SECONDS, CheckpointPolicy, Recorder
from ckptcli.store.repository import Store
from ckptcli.writer import take
from tests.conftest import run_ckpt

MIN = 60.0
HOUR = 3600.0
NS = 1_000_000_000

# (delta, M, R, Daly's published tau_opt): Daly 2006, figures 3, 4 and 5
PUBLISHED = [
    pytest.param(5 * MIN, 24 * HOUR, 10 * MIN, 117 * MIN, id="Daly2006-fig3-M24h"),
    pytest.param(5 * MIN, 6 * HOUR, 10 * MIN, 57 * MIN, id="Daly2006-fig4-M6h"),
    pytest.param(5 * MIN, 15 * MIN, 10 * MIN, 9.1 * MIN, id="Daly2006-fig5-M15m"),
]


def _within(value: float, expected: float, rel: float = 0.01) -> bool:
    return abs(value - expected) <= rel * expected


# -- the formulas --------------------------------------------------------------------------------
@pytest.mark.parametrize(("delta", "mtbf", "restart", "published"), PUBLISHED)
def test_daly_matches_the_published_optimum_to_1_percent(delta: float, mtbf: float, restart: float, published: float) -> None:
    assert _within(daly_interval(delta, mtbf), published)
    assert _within(advise(delta, mtbf, restart).daly.seconds, published)


@pytest.mark.parametrize(("delta", "mtbf", "restart", "published"), PUBLISHED)
def test_ckpt_advise_prints_the_published_values(cli: Any, delta: float, mtbf: float, restart: float, published: float) -> None:
    r = cli("advise", "--take-seconds", f"{delta:g}", "--mtbf", f"{mtbf / 60:g}m", "--restart-seconds", "10m", "--json")
    assert r.code == 0 and r.err == "", r
    doc = json.loads(r.out)
    assert (doc["take_seconds"], doc["mtbf_seconds"], doc["restart_seconds"]) == (delta, mtbf, restart)
    assert _within(doc["daly"]["interval_seconds"], published)
    assert doc["young"]["interval_seconds"] == pytest.approx(math.sqrt(2 * delta * mtbf))
    human = cli("advise", "--take-seconds", "5m", "--mtbf", f"{mtbf:g}", "--restart-seconds", "600")
    assert human.code == 0 and "Daly (2006)" in human.out and "Young (1974)" in human.out


def test_young_is_sqrt_2_d_m_and_daly_is_shorter_by_about_d() -> None:
    assert young_interval(300, 86400) == pytest.approx(120 * MIN)  # sqrt(2 * 5 min * 1440 min)
    assert young_interval(300, 86400) - daly_interval(300, 86400) == pytest.approx(300 - 101.4, abs=1)
    assert daly_interval(20 * MIN, 5 * MIN) == 5 * MIN  # D >= 2M: Daly's rule gives M


@pytest.mark.parametrize(("delta", "mtbf", "restart", "published"), PUBLISHED)
def test_the_overhead_model_is_the_one_the_interval_optimises(delta: float, mtbf: float, restart: float, published: float) -> None:
    """Daly's interval approximates the minimum of his complete model's wall-clock time,
    which is what `overhead` reports: no interval near it, and not Young's, does better
    than by a sliver."""
    tau = daly_interval(delta, mtbf)
    at = waste_fraction(tau, delta, mtbf, restart)
    for other in (tau * 0.8, tau * 0.95, tau * 1.05, tau * 1.25, young_interval(delta, mtbf)):
        assert waste_fraction(other, delta, mtbf, restart) >= at - 1e-4
    assert 0 < at < 1
    # a restart costs time but does not move the optimum
    assert waste_fraction(tau, delta, mtbf, 0) < at


def test_lost_work_is_about_half_a_segment_and_never_more_than_one() -> None:
    tau, d, m = 7000.0, 300.0, 86400.0
    lost = lost_per_failure(tau, d, m)
    assert (tau + d) / 2 * 0.95 < lost < (tau + d) / 2
    assert lost_per_failure(1e-3, 1e-3, 86400) == pytest.approx(1e-3)  # the series branch
    assert lost_per_failure(1e9, 1.0, 60.0) == 60.0  # failures far more often than segments end
    assert 0 < lost_per_failure(600, 600, 60) <= 60


def test_extreme_but_valid_inputs_give_finite_answers() -> None:
    for d, m in ((1e-6, 3e9), (3e9, 1e-3), (1.0, 1.0), (0.001, 0.002)):
        a = advise(d, m)
        for iv in (a.young, a.daly):
            assert math.isfinite(iv.seconds) and iv.seconds > 0 and 0 <= iv.waste <= 1 and math.isfinite(iv.lost_seconds)
    assert advise(3e9, 1e-3).take_exceeds_half_mtbf


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), -float("inf"), 1e300, True, "300", None], ids=lambda v: repr(v))
def test_the_library_refuses_durations_that_are_no_durations(bad: Any) -> None:
    with pytest.raises(InvalidInputError):
        advise(bad, 3600)
    with pytest.raises(InvalidInputError):
        advise(300, bad)


def test_parse_seconds_takes_seconds_and_units() -> None:
    assert [parse_seconds(t, "x") for t in ("300", "0.25", "5m", "1.5h", "24h", "1d", "2w", " 7s ")] == [
        300,
        0.25,
        300,
        5400,
        86400,
        86400,
        1209600,
        7,
    ]
    assert parse_seconds("0", "--restart-seconds", zero_ok=True) == 0
    for bad in ("", "abc", "5 parsecs", "-5", "nan", "inf", "1e400", "5mm", "m", "0x10", "1_000"):
        with pytest.raises(InvalidInputError):
            parse_seconds(bad, "--take-seconds")


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["--take-seconds", "0", "--mtbf", "1h"], 4, "--take-seconds must be > 0"),
        (["--take-seconds", "-5", "--mtbf", "1h"], 4, "is not a duration"),
        (["--take-seconds", "nan", "--mtbf", "1h"], 4, "is not a duration"),
        (["--take-seconds", "inf", "--mtbf", "1h"], 4, "is not a duration"),
        (["--take-seconds", "1e400", "--mtbf", "1h"], 4, "is not a duration"),
        (["--take-seconds", "5m", "--mtbf", "0"], 4, "--mtbf must be > 0"),
        (["--take-seconds", "5m", "--mtbf", "999999999999"], 4, "over 100 years"),
        (["--take-seconds", "5m", "--mtbf", "1h", "--restart-seconds", "soon"], 4, "is not a duration"),
        (["--take-seconds", "5m"], 2, "give --mtbf"),
        ([], 2, "give --take-seconds and --mtbf"),
    ],
)
def test_bad_durations_are_one_line_and_a_documented_code(cli: Any, args: list[str], code: int, says: str) -> None:
    r = cli("advise", *args)
    assert r.code == code and r.out == "", r
    assert r.err.count("\n") == 1 and r.err.startswith("ckpt: error: ") and says in r.err, r.err


def test_a_take_longer_than_half_the_mtbf_is_answered_with_a_warning(cli: Any) -> None:
    r = cli("advise", "--take-seconds", "10m", "--mtbf", "1m", "--json")
    assert r.code == 0 and json.loads(r.out)["daly"]["interval_seconds"] == 60
    assert "ckpt: warning: a checkpoint takes at least half the MTBF" in r.err


# -- a subject's history -------------------------------------------------------------------------
class History:
    """Checkpoints of a process subject whose tails hold the supervisor's events."""

    def __init__(self, store: Store, subject: str = "process:sim", start_ns: int | None = None) -> None:
        self.store, self.subject = store, subject
        self.t = start_ns if start_ns is not None else time.time_ns() - 30 * 86400 * NS  # in the past: created times are after
        self.seq = 0
        self.pending: list[Any] = []

    def event(self, kind: str, after: float = 0.0, **fields: Any) -> None:
        self.t += int(after * NS)
        self.seq += 1
        self.pending.append({"seq": self.seq, "ts": self.t, "kind": kind, **fields})

    def checkpoint(self, events: Any = None) -> None:
        take(self.store, {"memory": {"t": self.t}, "events": self.pending if events is None else events}, subject=self.subject)
        self.pending = []

    def attempt(self, n: int, *, takes: list[float], every: float, dies_after: float | None, signal: str | None = "SIGKILL") -> None:
        """One run of the program: a start, checkpoints every `every` s, then (maybe) death."""
        self.event("process:start", pid=100 + n, argv=["sim"], attempt=n, restored=None)
        self.checkpoint()
        for took in takes:
            self.event(
                "process:checkpoint",
                every,
                reason="schedule",
                consistency="application",
                how="cooperative",
                take_seconds=took,
                frozen_seconds=took,
            )
            self.checkpoint()
        if dies_after is not None:
            up = every * len(takes) + dies_after
            self.event("process:exit", dies_after, pid=100 + n, code=None if signal else 3, signal=signal, uptime_seconds=up)
            self.checkpoint()


def _store_arg(store: Store) -> str:
    return str(store.location)


def _three_crashes(store: Store) -> History:
    h = History(store)
    for n in range(3):
        h.attempt(n, takes=[30.0, 32.0, 31.0, 200.0], every=2 * HOUR, dies_after=2 * HOUR)  # 10 h of running each
        h.t += int(10 * MIN * NS)  # the backoff and the restore before the next start
    return h


def test_measure_reads_take_times_failures_and_restarts(store: Store) -> None:
    _three_crashes(store)
    m = measure(store, "process:sim")
    assert (m.take_source, m.take_samples, m.take_total) == ("take_seconds", 12, 12)
    assert m.take_seconds == 31.5  # the median: one slow take (200 s) in four does not move it much
    assert (m.failures, m.starts) == (3, 3)
    assert m.uptime_seconds == 3 * 10 * HOUR and m.mtbf_seconds == 10 * HOUR
    assert m.restart_seconds == pytest.approx(10 * MIN) and m.restart_samples == 2
    assert m.ignored == 0 and m.unreadable == 0 and m.checkpoints == 3 * 6


def test_ckpt_advise_subject_says_what_it_measured(store: Store, cli: Any) -> None:
    _three_crashes(store)
    st = _store_arg(store)
    r = cli("advise", "process:sim", "--store", st, "--json")
    assert r.code == 0 and r.err == "", r
    doc = json.loads(r.out)
    assert doc["sources"] == {"take": "take_seconds", "mtbf": "failures", "restart": "failures"}
    assert doc["measured"]["take_samples"] == 12 and doc["measured"]["failures"] == 3
    assert doc["daly"]["interval_seconds"] == pytest.approx(daly_interval(31.5, 10 * HOUR))
    assert doc["restart_seconds"] == pytest.approx(10 * MIN)
    human = cli("advise", "process:sim", "--store", st)
    assert human.code == 0
    assert "the median of the newest 12 of 12 recorded take durations" in human.out
    assert "1d 6h of running over 3 failure(s)" in human.out
    # a given value replaces the measured one
    given = json.loads(cli("advise", "process:sim", "--store", st, "--mtbf", "24h", "--restart-seconds", "0", "--json").out)
    assert given["mtbf_seconds"] == 86400 and given["restart_seconds"] == 0 and given["take_seconds"] == 31.5
    assert given["sources"] == {"take": "take_seconds", "mtbf": "given", "restart": "given"}


def test_without_take_durations_the_created_times_give_an_upper_bound(store: Store, cli: Any) -> None:
    h = History(store, start_ns=time.time_ns() - 5 * NS)  # created times come a few seconds after the events
    for n in range(3):
        h.event("process:start", pid=n, argv=["x"], attempt=n, restored=None)
        h.event("process:checkpoint", 1, reason="schedule", consistency="crash", how="sigstop")  # no take_seconds
        h.checkpoint()
        h.event("process:exit", 0.5, pid=n, code=1, signal=None, uptime_seconds=1.5)
        h.checkpoint()
    m = measure(store, "process:sim")
    assert m.take_source == "created" and m.take_samples == 6 and m.take_seconds is not None
    assert 0 < m.take_seconds < 10
    assert (m.failures, m.mtbf_seconds) == (3, 1.5)
    r = cli("advise", "process:sim", "--store", _store_arg(store))
    assert r.code == 0 and "an upper bound" in r.out, r


def test_too_little_data_is_one_line_and_exit_1(store: Store, cli: Any) -> None:
    h = History(store)
    h.attempt(0, takes=[5.0, 6.0], every=HOUR, dies_after=None)  # running, never failed
    st = _store_arg(store)
    r = cli("advise", "process:sim", "--store", st)
    assert r.code == 1 and r.out == "" and r.err.count("\n") == 1, r
    assert "no failure in" in r.err and "give --mtbf" in r.err
    with pytest.raises(TooLittleData):
        from ckptcli.cli.commands.advise import _values

        _values(measure(store, "process:sim"), None, None, None)
    assert cli("advise", "process:sim", "--store", st, "--mtbf", "1d").code == 0  # what is missing can be given
    # an agent's checkpoints with no events at all: neither D nor M
    take(store, {"memory": {"x": 1}}, subject="agent:bot")
    r = cli("advise", "agent:bot", "--store", st)
    assert r.code == 1 and "no take duration is recorded" in r.err and "give --take-seconds" in r.err, r
    r = cli("advise", "agent:bot", "--store", st, "--take-seconds", "1", "--mtbf", "1h", "--json")
    assert r.code == 0 and json.loads(r.out)["measured"]["checkpoints"] == 1


def test_a_subject_without_checkpoints_and_a_missing_store(store: Store, cli: Any, tmp_path: Path) -> None:
    r = cli("advise", "process:nothing", "--store", _store_arg(store))
    assert r.code == 3 and r.err.count("\n") == 1 and "process:nothing has no checkpoints" in r.err, r
    with pytest.raises(NotFoundError):
        measure(store, "process:nothing")
    r = cli("advise", "not a subject", "--store", _store_arg(store))
    assert r.code == 4 and r.err.count("\n") == 1, r
    r = cli("advise", "process:x", "--store", tmp_path / "nowhere")
    assert r.code == 10 and r.err.count("\n") == 1, r


def test_garbage_events_are_skipped_counted_and_said(store: Store, cli: Any) -> None:
    h = _three_crashes(store)
    good = measure(store, "process:sim")
    # a tail that is no list, items that are no events, and process events with fields of the wrong kind
    h.checkpoint(events="not a list")
    h.checkpoint(events=[1, None, "x", [], {"seq": "1", "ts": 1, "kind": "process:exit"}, {"seq": 1, "ts": -5, "kind": "process:start"}])
    bad_takes = [float("nan"), float("inf"), -1.0, 1e300, "12", True, [1]]
    h.checkpoint(
        events=[
            {"seq": 1000 + i, "ts": h.t + i, "kind": "process:checkpoint", "reason": "schedule", "take_seconds": v}
            for i, v in enumerate(bad_takes)
        ]
        + [
            {"seq": 2000, "ts": h.t + 100, "kind": "process:exit", "code": "boom", "signal": None},
            {"seq": 2001, "ts": h.t + 101, "kind": "process:exit", "code": 0, "signal": 9},
            {"seq": 2002, "ts": h.t + 102, "kind": "process:exit", "code": True, "signal": None},
            {"seq": 2003, "ts": h.t + 103, "kind": "process:exit", "code": 0, "signal": None, "uptime_seconds": float("nan")},
        ]
    )
    m = measure(store, "process:sim")
    assert m.ignored == 1 + 6 + len(bad_takes) + 4
    assert (m.take_seconds, m.failures, m.mtbf_seconds) == (good.take_seconds, good.failures, good.mtbf_seconds)
    r = cli("advise", "process:sim", "--store", _store_arg(store), "--json")
    assert r.code == 0 and json.loads(r.out)["daly"]["interval_seconds"] == pytest.approx(daly_interval(31.5, 10 * HOUR))
    assert f"ckpt: warning: {m.ignored} event record(s) of process:sim do not follow the event format" in r.err


def test_an_event_in_several_tails_counts_once(store: Store) -> None:
    h = History(store)
    h.attempt(0, takes=[10.0], every=HOUR, dies_after=HOUR)
    once = measure(store, "process:sim")
    h.event("process:start", pid=1, argv=["x"], attempt=1, restored=None)
    dup = [*h.pending]
    h.checkpoint()
    h.checkpoint(events=dup)  # a fork's tail repeats its parent's events
    twice = measure(store, "process:sim")
    assert (twice.failures, twice.starts, twice.take_total) == (once.failures, once.starts + 1, once.take_total)


def test_ckpt_advise_in_a_real_process(store: Store) -> None:
    _three_crashes(store)
    p = run_ckpt("advise", "process:sim", "--store", _store_arg(store), "--json")
    assert p.returncode == 0 and p.stderr == b"", p.stderr
    assert json.loads(p.stdout)["measured"]["failures"] == 3
    p = run_ckpt("advise", "--take-seconds", "5m", "--mtbf", "24h")
    assert p.returncode == 0 and b"1h 56m 41s" in p.stdout, p.stdout  # Daly's 117 min


# -- the adaptive schedule -------------------------------------------------------------------------
class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_the_schedule_starts_from_the_default_or_the_advice() -> None:
    clock = Clock()
    assert AdaptiveSchedule(600, clock=clock).next_delay() == 600  # nothing known
    known = AdaptiveSchedule(600, take_seconds=300, mtbf_seconds=86400, max_interval=86400, clock=clock)
    assert known.next_delay() == pytest.approx(daly_interval(300, 86400))
    # without an MTBF, the starting interval is taken as right, whatever the takes measure
    s = AdaptiveSchedule(600, clock=clock)
    for took in (2.0, 3.0, 2.5):
        s.took(took)
    assert s.next_delay() == pytest.approx(600, rel=0.02)


def test_the_interval_shortens_while_failures_rise_and_one_failure_does_not_collapse_it() -> None:
    clock = Clock()
    s = AdaptiveSchedule(600, take_seconds=10, mtbf_seconds=24 * HOUR, min_interval=5, max_interval=24 * HOUR, clock=clock)
    before = s.next_delay()
    delays = []
    for _ in range(6):
        clock.t += 60
        s.failed(clock.t)
        delays.append(s.next_delay())
    assert delays == sorted(delays, reverse=True) and len(set(delays)) == len(delays)  # each failure shortens it
    assert delays[0] > before / math.sqrt(2) * 0.99  # one failure at most halves M: the interval by sqrt(2)
    assert delays[-1] < before / 2
    # failures coming faster shorten it faster than the same number spread out
    slow = AdaptiveSchedule(600, take_seconds=10, mtbf_seconds=24 * HOUR, min_interval=5, max_interval=24 * HOUR, clock=Clock())
    for _ in range(6):
        slow._clock.t += 3600  # type: ignore[attr-defined]
        slow.failed(slow._clock.t)  # type: ignore[attr-defined]
    assert slow.next_delay() > delays[-1]


def test_the_interval_lengthens_back_when_failures_stop() -> None:
    clock = Clock()
    s = AdaptiveSchedule(600, take_seconds=10, mtbf_seconds=HOUR, failure_window=HOUR, clock=clock)
    before = s.next_delay()
    for _ in range(20):
        clock.t += 30
        s.failed(clock.t)
    worst = s.next_delay()
    assert worst < before / 3
    steps = []
    for _ in range(8):
        clock.t += HOUR / 8
        steps.append(s.next_delay())
    assert steps == sorted(steps) and steps[0] > worst  # back up as the failures leave the window
    clock.t += HOUR
    assert s.next_delay() >= before


def test_the_interval_stays_within_its_bounds() -> None:
    clock = Clock()
    s = AdaptiveSchedule(600, take_seconds=1, mtbf_seconds=HOUR, min_interval=30, max_interval=900, clock=clock)
    for _ in range(10_000):
        s.failed(clock.t)
    assert s.next_delay() == 30
    calm = AdaptiveSchedule(600, take_seconds=1, mtbf_seconds=1e9, min_interval=30, max_interval=900, clock=clock)
    assert calm.next_delay() == 900
    assert AdaptiveSchedule(5, min_interval=30, max_interval=900, clock=clock).next_delay() == 30  # the start too


def test_the_take_estimate_is_the_median_of_a_window() -> None:
    s = AdaptiveSchedule(600, window=5, clock=Clock())
    for took in (10, 11, 12, 500, 13):
        s.took(took)
    assert s.take_estimate == 12  # one slow take does not move it
    for took in (40, 41, 42):
        s.took(took)
    assert s.take_estimate == 41  # the window slides: 10, 11 and 12 have left it (500, 13, 40, 41, 42)


def test_the_schedule_is_deterministic_given_its_inputs() -> None:
    def run() -> list[float]:
        clock = Clock(50.0)
        s = AdaptiveSchedule(300, take_seconds=4, clock=clock)
        out = []
        for i in range(40):
            clock.t += 17 * (i % 5)
            s.took(3 + (i % 3))
            if i % 4 == 0:
                s.failed(clock.t)
            out.append(s.next_delay())
        return out

    assert run() == run()
    s = AdaptiveSchedule(300, take_seconds=4, mtbf_seconds=HOUR, clock=Clock())
    s.failed(999.0)
    d = s.describe()  # what a supervisor logs or keeps in its checkpoint's ext section
    assert d["kind"] == "adaptive" and d["next_delay_seconds"] == s.next_delay() and d["recent_failures"] == 1
    assert d["take_seconds"] == 4 and d["mtbf_seconds"] == pytest.approx((HOUR + 0) / 2)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0, True, "5", None])
def test_the_schedule_refuses_what_is_no_duration(bad: Any) -> None:
    s = AdaptiveSchedule(600, clock=Clock())
    with pytest.raises(InvalidInputError):
        s.took(bad)
    if bad not in (-1.0,):  # a failure time may be any finite clock reading
        with pytest.raises(InvalidInputError):
            s.failed(bad)
    assert s.next_delay() == 600


def test_the_schedule_refuses_bad_settings() -> None:
    for kw in (
        {"min_interval": 10, "max_interval": 5},
        {"window": 0},
        {"window": 2.5},
        {"prior_failures": 0},
        {"failure_window": float("nan")},
        {"take_seconds": -3},
        {"mtbf_seconds": 0},
    ):
        with pytest.raises(InvalidInputError):
            AdaptiveSchedule(600, **kw)


def test_a_schedule_for_a_subject_starts_from_its_history(store: Store) -> None:
    _three_crashes(store)
    s = AdaptiveSchedule.for_subject(store, "process:sim", clock=Clock(), max_interval=24 * HOUR)
    assert s.next_delay() == pytest.approx(daly_interval(31.5, 10 * HOUR))
    fresh = AdaptiveSchedule.for_subject(store, "process:new", initial=120, clock=Clock())
    assert fresh.next_delay() == 120


# -- the recorder's policy -----------------------------------------------------------------------------
def test_the_recorder_policy_accepts_auto_and_refuses_nonsense() -> None:
    assert CheckpointPolicy(every_seconds="auto").every_seconds == "auto"
    for bad in ({"every_seconds": "often"}, {"every_seconds": "auto", "auto_min_seconds": 10, "auto_max_seconds": 5}):
        with pytest.raises(InvalidInputError):
            CheckpointPolicy(**bad)
    with pytest.raises(InvalidInputError):
        CheckpointPolicy(every_seconds="auto", auto_max_seconds=float("inf"))


def test_the_recorder_under_auto_checkpoints_sooner_after_errors(store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fake clock (the recorder's own test does the same): the interval starts at
    AUTO_START_SECONDS and shortens as the recorder's `error` events come."""
    import ckptcli.history.recorder as recorder_module

    clock = [1000.0]
    monkeypatch.setattr(recorder_module.time, "monotonic", lambda: clock[0])
    with Recorder.open(store, "agent:bot", tmp_path / "j", policy=CheckpointPolicy(every_seconds="auto")) as rec:
        start = rec.base
        clock[0] += AUTO_START_SECONDS - 1
        rec.append("plan.push", item=1)
        assert rec.base == start  # not yet
        clock[0] += 2
        rec.append("plan.push", item=2)
        calm = rec.base
        assert calm != start  # the starting interval, with no failure seen
        for i in range(99):
            rec.append("error", message=f"tool failed {i}")  # all at once: no time passes
        assert rec.base == calm
        clock[0] += AUTO_START_SECONDS / 10 + 1  # 100 failures in the window: the interval is about a tenth
        rec.append("plan.push", item=3)
        assert rec.base != calm
        hurried = rec.base
        clock[0] += AUTO_START_SECONDS / 10 + 1
        rec.append("plan.push", item=4)
        assert rec.base != hurried
        # six quiet hours later the errors have left the window: back to (at least) the starting interval
        clock[0] += 6 * HOUR + 1
        rec.append("plan.push", item=5)
        settled = rec.base
        clock[0] += AUTO_START_SECONDS / 2
        rec.append("plan.push", item=6)
        assert rec.base == settled


def test_the_recorder_under_auto_counts_a_torn_journal_as_a_failure(store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ckptcli.history.recorder as recorder_module

    clock = [1000.0]
    monkeypatch.setattr(recorder_module.time, "monotonic", lambda: clock[0])
    policy = CheckpointPolicy(every_seconds="auto")
    for torn, expect_checkpoint in ((False, False), (True, True)):
        j = tmp_path / f"j-{torn}"
        with Recorder.open(store, f"agent:b{int(torn)}", j, policy=policy) as rec:
            rec.append("plan.push", item=1)
        if torn:
            with j.open("ab") as fh:
                fh.write(b"\x00\x00\x01\x00torn")  # a record cut short by a crash
        with Recorder.open(store, f"agent:b{int(torn)}", j, policy=policy) as rec:
            assert bool(rec.recovery and rec.recovery.dropped_bytes) is torn
            base = rec.base
            clock[0] += AUTO_START_SECONDS * 0.75  # one failure: the interval is the start over sqrt(2), 71%
            rec.append("plan.push", item=2)
            assert (rec.base != base) is expect_checkpoint
