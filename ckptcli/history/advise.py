"""How often to checkpoint: Young's and Daly's optimum intervals, what an interval costs,
what a subject's recorded history says about its take time and its failures, and a schedule
that follows that advice while failures come and go (docs/intervals.md).

The model (Young 1974; Daly 2006): a program computes for an interval tau between
checkpoints, each checkpoint takes delta seconds (D, the dump or take time), failures come
as a Poisson process with mean time between failures M, and after a failure the program
restarts (R seconds) from its last checkpoint, losing the work done since.

- Young, J. W., "A first order approximation to the optimum checkpoint interval",
  Communications of the ACM 17(9):530-531, 1974 (doi:10.1145/361147.361115):
  tau = sqrt(2 D M).
- Daly, J. T., "A higher order estimate of the optimum checkpoint interval for restart
  dumps", Future Generation Computer Systems 22(3):303-312, 2006
  (doi:10.1016/j.future.2004.11.016): for D < 2M,
  tau = sqrt(2 D M) [1 + (1/3) sqrt(D / 2M) + (1/9) (D / 2M)] - D, else tau = M; and the
  complete model the estimate comes from, the expected wall-clock time of a job of Ts
  seconds of work, T_w = M e^(R/M) (e^((tau + D)/M) - 1) Ts / tau, which gives the
  overhead and the lost work below.

Invariants: every function here is pure (the measurement reads the store, nothing else);
inputs are checked (finite, in range) and refused with InvalidInputError, never turned
into a NaN interval; an AdaptiveSchedule depends only on its inputs and its injected clock.
"""

from __future__ import annotations

import bisect
import math
import statistics
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ckptcli._util.timeparse import MAX_SECONDS, SECONDS_HINT
from ckptcli._util.timeparse import parse_seconds as parse_seconds  # the CLI's durations, where they live
from ckptcli.errors import CkptError, InvalidInputError

if TYPE_CHECKING:
    from ckptcli.store.repository import Store

#: A take measured as 0 (a coarse clock) counts as this long in the formulas.
MIN_TAKE_SECONDS = 1e-6
#: How many of the newest take durations a measurement takes the median of.
TAKE_WINDOW = 20
#: How many failure times an AdaptiveSchedule keeps at most (the newest).
MAX_FAILURES_KEPT = 100_000

_HINT = SECONDS_HINT


class TooLittleData(CkptError):  # noqa: N818 - a verdict about the history, not a fault in ckpt
    """The recorded history does not hold what a measurement needs (no take durations, no
    failure): exit 1, saying what is missing and which option gives it instead."""


# -- inputs -------------------------------------------------------------------------------------
def check_seconds(value: object, what: str, *, zero_ok: bool = False) -> float:
    """`value` as a number of seconds, checked.

    Args:
        value: an int or a float (a bool is not a duration).
        what: how the message names it ("--take-seconds", "take_seconds").
        zero_ok: whether 0 is allowed (a restart time may be 0; a take time or an MTBF may not).
    Returns: the value as a float.
    Raises:
        InvalidInputError for what is not a finite number, is negative (or 0 unless
        zero_ok), or is longer than MAX_SECONDS.
    """
    if type(value) not in (int, float):
        raise InvalidInputError(f"{what} must be a number of seconds, not {type(value).__name__}", hint=_HINT)
    x = float(value)  # type: ignore[arg-type]
    if not math.isfinite(x):
        raise InvalidInputError(f"{what} must be a finite number of seconds, not {x}", hint=_HINT)
    if x < 0 or (x == 0 and not zero_ok):
        raise InvalidInputError(f"{what} must be {'>= 0' if zero_ok else '> 0'} seconds, not {value}", hint=_HINT)
    if x > MAX_SECONDS:
        raise InvalidInputError(f"{what} of {value} seconds is over 100 years", hint=_HINT)
    return x


def format_seconds(seconds: float) -> str:
    """A duration for people: "0.25s", "45s", "9m 8s", "2h", "1h 56m 41s", "3d 4h"."""
    if seconds < 10:
        return f"{seconds:.3g}s"
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    days, rest = divmod(s, 86400)
    h, rest = divmod(rest, 3600)
    m, sec = divmod(rest, 60)
    if days:
        return f"{days}d {h}h" if h else f"{days}d"
    return " ".join(f"{n}{unit}" for n, unit in ((h, "h"), (m, "m"), (sec, "s")) if n)


# -- the formulas -------------------------------------------------------------------------------
def young_interval(take_seconds: float, mtbf_seconds: float) -> float:
    """Young's first-order optimum: sqrt(2 D M) (Young 1974).

    Args: the take time D and the mean time between failures M, in seconds (> 0).
    Returns: the compute time between the end of one checkpoint and the start of the next.
    Raises: InvalidInputError for inputs check_seconds refuses.
    """
    d = max(check_seconds(take_seconds, "the take time", zero_ok=True), MIN_TAKE_SECONDS)
    return math.sqrt(2.0 * d * check_seconds(mtbf_seconds, "the MTBF"))


def daly_interval(take_seconds: float, mtbf_seconds: float) -> float:
    """Daly's higher-order optimum (Daly 2006): for D < 2M,
    sqrt(2 D M) [1 + (1/3) sqrt(D / 2M) + (1/9) (D / 2M)] - D; for D >= 2M, M.

    Args: the take time D and the mean time between failures M, in seconds (> 0).
    Returns: the compute time between the end of one checkpoint and the start of the next.
    Raises: InvalidInputError for inputs check_seconds refuses.
    """
    d = max(check_seconds(take_seconds, "the take time", zero_ok=True), MIN_TAKE_SECONDS)
    return _daly(d, check_seconds(mtbf_seconds, "the MTBF"))


def _daly(d: float, m: float) -> float:
    if d >= 2.0 * m:
        return m
    x = d / (2.0 * m)
    return math.sqrt(2.0 * d * m) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - d


def waste_fraction(interval: float, take_seconds: float, mtbf_seconds: float, restart_seconds: float = 0.0) -> float:
    """The expected share of wall-clock time that is not useful work (checkpoints, work
    redone after failures, restarts), by Daly's complete model (Daly 2006):
    1 - tau / (M e^(R/M) (e^((tau + D)/M) - 1)), i.e. 1 - Ts / T_w.

    Returns: a fraction in [0, 1] (1 when the program would never get a segment done).
    Raises: InvalidInputError for inputs check_seconds refuses.
    """
    tau = check_seconds(interval, "the interval")
    d = check_seconds(take_seconds, "the take time", zero_ok=True)
    m = check_seconds(mtbf_seconds, "the MTBF")
    r = check_seconds(restart_seconds, "the restart time", zero_ok=True)
    # in logarithms: e^((tau + D)/M) overflows a float long before the answer stops being 1
    log_useful = math.log(tau) - math.log(m) - r / m - _log_expm1((tau + d) / m)
    return min(1.0, max(0.0, 1.0 - math.exp(min(0.0, log_useful))))


def _log_expm1(x: float) -> float:
    return x + math.log1p(-math.exp(-x)) if x > 30 else math.log(math.expm1(x))


def lost_per_failure(interval: float, take_seconds: float, mtbf_seconds: float) -> float:
    """The expected work lost to one failure: how far into a segment of length tau + D
    (the interval and the checkpoint that ends it) a failure strikes, on average, given that
    it strikes there: M - (tau + D) / (e^((tau + D)/M) - 1) (the exponential distribution,
    truncated to the segment: the same model as Daly 2006). About (tau + D) / 2 when the
    segment is short beside M. The restart time comes on top.

    Raises: InvalidInputError for inputs check_seconds refuses.
    """
    tau = check_seconds(interval, "the interval")
    d = check_seconds(take_seconds, "the take time", zero_ok=True)
    m = check_seconds(mtbf_seconds, "the MTBF")
    seg = tau + d
    x = seg / m
    if x < 1e-6:  # the series, where the subtraction would cancel
        return seg / 2.0 - seg * x / 12.0
    if x > 700:
        return m
    return m - seg / math.expm1(x)


@dataclass(frozen=True)
class Interval:
    """One rule's interval and what it costs."""

    rule: str  # "young" or "daly"
    seconds: float  # compute time between checkpoints
    waste: float  # expected share of wall-clock time lost (waste_fraction)
    lost_seconds: float  # expected work lost per failure (lost_per_failure), restart not included

    def to_dict(self) -> dict[str, Any]:
        return {"interval_seconds": self.seconds, "overhead": self.waste, "lost_seconds": self.lost_seconds}


@dataclass(frozen=True)
class Advice:
    """Young's and Daly's intervals for a take time, an MTBF and a restart time."""

    take_seconds: float
    mtbf_seconds: float
    restart_seconds: float
    young: Interval
    daly: Interval

    @property
    def take_exceeds_half_mtbf(self) -> bool:
        """D >= 2M: Daly's rule gives M, and checkpointing cannot keep up with the failures."""
        return self.take_seconds >= 2.0 * self.mtbf_seconds

    def to_dict(self) -> dict[str, Any]:
        return {
            "take_seconds": self.take_seconds,
            "mtbf_seconds": self.mtbf_seconds,
            "restart_seconds": self.restart_seconds,
            "young": self.young.to_dict(),
            "daly": self.daly.to_dict(),
        }


def advise(take_seconds: float, mtbf_seconds: float, restart_seconds: float = 0.0) -> Advice:
    """Young's and Daly's optimum intervals with the expected overhead and lost work of each.

    Args:
        take_seconds: D, how long a checkpoint takes (> 0).
        mtbf_seconds: M, the mean time between failures (> 0).
        restart_seconds: R, how long a restart takes (>= 0); it changes the overhead, not
            the optimum (Daly 2006).
    Returns: an Advice.
    Raises: InvalidInputError for inputs check_seconds refuses.
    """
    d = check_seconds(take_seconds, "the take time")
    m = check_seconds(mtbf_seconds, "the MTBF")
    r = check_seconds(restart_seconds, "the restart time", zero_ok=True)

    def at(rule: str, tau: float) -> Interval:
        return Interval(rule, tau, waste_fraction(tau, d, m, r), lost_per_failure(tau, d, m))

    return Advice(d, m, r, at("young", young_interval(d, m)), at("daly", daly_interval(d, m)))


# -- what a subject's history says --------------------------------------------------------------
PROCESS_START = "process:start"
PROCESS_CHECKPOINT = "process:checkpoint"
PROCESS_EXIT = "process:exit"


@dataclass(frozen=True)
class Measurement:
    """What a subject's recorded checkpoints and events say about its take time and its failures."""

    subject: str
    checkpoints: int  # checkpoints of the subject
    unreadable: int  # of them, those whose events could not be read (damaged: `ckpt verify`)
    take_seconds: float | None  # the median of the newest TAKE_WINDOW take durations
    take_samples: int  # how many the median is of
    take_total: int  # how many take durations there were in all
    take_source: str  # "take_seconds" (process:checkpoint events), "created" (created times), "none"
    restart_seconds: float | None  # the median time from a failed exit to the next start
    restart_samples: int
    failures: int  # process:exit events with a non-zero code or a signal
    starts: int  # process:start events
    uptime_seconds: float  # the running time observed (each attempt's uptime)
    ignored: int  # event records or fields that are not what the event format says, skipped

    @property
    def mtbf_seconds(self) -> float | None:
        """The running time observed per failure, or None without failures."""
        if self.failures == 0 or self.uptime_seconds <= 0:
            return None
        return min(self.uptime_seconds / self.failures, MAX_SECONDS)

    def to_dict(self) -> dict[str, Any]:
        return {
            "subject": self.subject,
            "checkpoints": self.checkpoints,
            "unreadable_checkpoints": self.unreadable,
            "take_seconds": self.take_seconds,
            "take_samples": self.take_samples,
            "take_total": self.take_total,
            "take_source": self.take_source,
            "restart_seconds": self.restart_seconds,
            "restart_samples": self.restart_samples,
            "failures": self.failures,
            "starts": self.starts,
            "uptime_seconds": self.uptime_seconds,
            "mtbf_seconds": self.mtbf_seconds,
            "ignored_records": self.ignored,
        }


def _duration_field(value: object) -> float | None:
    """A recorded duration, or None when it is not a finite number in range."""
    if type(value) not in (int, float):
        return None
    x = float(value)  # type: ignore[arg-type]
    return x if math.isfinite(x) and 0 <= x <= MAX_SECONDS else None


@dataclass
class _Events:
    events: dict[tuple[int, int, str], dict[str, Any]]
    created_fallback: list[tuple[int, float]]
    ignored: int = 0


def _collect(raw: object, created_ns: int, into: _Events) -> None:
    """Take the usable events of one checkpoint's events section; count what is not usable."""
    if type(raw) is not list:
        into.ignored += 1
        return
    last_ts: int | None = None
    for item in raw:
        if type(item) is not dict:
            into.ignored += 1
            continue
        seq, ts, kind = item.get("seq"), item.get("ts"), item.get("kind")
        if type(seq) is not int or type(ts) is not int or ts < 0 or type(kind) is not str:
            into.ignored += 1
            continue
        last_ts = ts if last_ts is None else max(last_ts, ts)
        if kind.startswith("process:"):
            into.events.setdefault((seq, ts, kind), item)  # one event in several tails (a fork's) counts once
    if last_ts is not None and last_ts <= created_ns:
        # the take began no earlier than the tail's last event: an upper bound of its duration
        into.created_fallback.append((created_ns, (created_ns - last_ts) / 1e9))


def measure(store: Store, subject: str) -> Measurement:
    """Measure D and M from a subject's checkpoints.

    D is the median of the newest TAKE_WINDOW `take_seconds` of its `process:checkpoint`
    events; where no checkpoint event carries one, the median of (created time - the
    time of the last event in its tail) over its checkpoints, an upper bound of each
    take. M is the running time observed (the `uptime_seconds` of each `process:exit`,
    or the time from its `process:start`; an attempt still running counts up to the
    newest event or checkpoint) divided by the failures (`process:exit` events with a
    non-zero code or a signal). R is the median time from a failure to the next
    `process:start` (the backoff and the restore). Events are read from the checkpoints' event tails as
    stored (no reducer runs); each event counts once however many tails hold it. Records
    that do not follow the event format are skipped and counted (`ignored`).

    Raises:
        NotFoundError when the subject has no checkpoints; InvalidInputError for a
        subject that is not KIND:NAME; what opening the store's catalog raises.
    """
    from ckptcli.checkpoint import Checkpoint
    from ckptcli.errors import DataError, NotFoundError, StoreIOError
    from ckptcli.format.manifest import Subject
    from ckptcli.listing import ListFilter, list_checkpoints

    subj = str(Subject.parse(subject))
    rows = list_checkpoints(store, ListFilter(subject=subj))
    if not rows:
        raise NotFoundError(f"{subj} has no checkpoints in this store", hint="check the name with `ckpt ls`, or give --store")
    got = _Events({}, [])
    unreadable = 0
    newest_ns = 0
    for cid, summary in rows:
        newest_ns = max(newest_ns, summary.created_ns)
        try:
            ck = Checkpoint(store, cid)
            if "events" not in ck.manifest.sections:
                continue
            raw = ck.section("events")
        except (DataError, NotFoundError, StoreIOError):
            unreadable += 1
            continue
        _collect(raw, summary.created_ns, got)
    events = sorted(got.events.values(), key=lambda e: (e["ts"], e["seq"]))
    takes: list[tuple[int, float]] = []
    failures = starts = 0
    uptime = 0.0
    open_start: int | None = None
    last_ts = 0
    failed_at: int | None = None  # when the last failure was recorded, until the next start
    restarts: list[float] = []
    for ev in events:
        kind, ts = ev["kind"], ev["ts"]
        if kind == PROCESS_CHECKPOINT:
            if ev.get("take_seconds") is not None:
                took = _duration_field(ev.get("take_seconds"))
                if took is None:
                    got.ignored += 1
                else:
                    takes.append((ts, took))
        elif kind == PROCESS_START:
            starts += 1
            if failed_at is not None:
                restarts.append((ts - failed_at) / 1e9)
                failed_at = None
            if open_start is not None:  # the attempt before never recorded its end: count what was seen of it
                uptime += (last_ts - open_start) / 1e9
            open_start = ts
        elif kind == PROCESS_EXIT:
            code, sig = ev.get("code"), ev.get("signal")
            if (code is not None and type(code) is not int) or (sig is not None and type(sig) is not str):
                got.ignored += 1
                open_start = None
                last_ts = ts
                continue
            up = _duration_field(ev.get("uptime_seconds"))
            if up is None and ev.get("uptime_seconds") is not None:
                got.ignored += 1
            if up is None and open_start is not None:
                up = (ts - open_start) / 1e9
            uptime += up or 0.0
            if (code is not None and code != 0) or sig is not None:
                failures += 1
                failed_at = ts
            open_start = None
        last_ts = ts
    if open_start is not None:
        uptime += max(0, max(last_ts, newest_ns) - open_start) / 1e9
    source = "take_seconds"
    if not takes:
        takes, source = list(got.created_fallback), "created"
    if not takes:
        source = "none"
    newest = [d for _, d in sorted(takes)[-TAKE_WINDOW:]]
    return Measurement(
        subject=subj,
        checkpoints=len(rows),
        unreadable=unreadable,
        take_seconds=statistics.median(newest) if newest else None,
        take_samples=len(newest),
        take_total=len(takes),
        take_source=source,
        restart_seconds=statistics.median(restarts) if restarts else None,
        restart_samples=len(restarts),
        failures=failures,
        starts=starts,
        uptime_seconds=min(uptime, MAX_SECONDS),
        ignored=got.ignored,
    )


# -- schedules ----------------------------------------------------------------------------------
class Schedule(Protocol):
    """When to take the next checkpoint (the supervisor's `--every`, the recorder's policy)."""

    def next_delay(self) -> float:
        """Returns: seconds from the end of the last checkpoint (or the start) to the next one."""
        ...

    def took(self, seconds: float) -> None:
        """A take finished; it lasted `seconds`."""
        ...

    def failed(self, at: float) -> None:
        """The program died at monotonic time `at` (the schedule's clock)."""
        ...


class AdaptiveSchedule:
    """Daly's interval for what has been seen, recomputed at each next_delay().

    D is the median of the newest `window` take durations (took), or `take_seconds` before
    the first; M is the posterior mean of a Gamma prior on the failure rate: `prior_failures`
    pseudo-failures over `prior_failures * M0` seconds, plus the failures (failed) and the
    running time seen in the last `failure_window` seconds: M = (prior_failures * M0 + T) /
    (prior_failures + n). So one failure does not collapse M (with the default weight it
    halves it), the interval shortens while failures come faster, and lengthens back as
    they leave the window. M0 is `mtbf_seconds` when given, else the MTBF for which Young's
    interval would be `initial`: the starting interval is taken as right until failures
    say otherwise. The interval is bounded by [min_interval, max_interval]; before any take
    and without `take_seconds` it is `initial` scaled by sqrt(M / M0). Deterministic: it
    reads the time only from `clock` (default time.monotonic, the clock `failed(at)` is
    given in).
    """

    def __init__(
        self,
        initial: float = 600.0,
        *,
        take_seconds: float | None = None,
        mtbf_seconds: float | None = None,
        min_interval: float = 1.0,
        max_interval: float = 86400.0,
        window: int = 9,
        failure_window: float = 6 * 3600.0,
        prior_failures: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Args: see the class docstring; every duration in seconds.

        Raises:
            InvalidInputError for a duration check_seconds refuses, min_interval >
            max_interval, a window that is not an integer >= 1, or prior_failures <= 0.
        """
        self.min_interval = check_seconds(min_interval, "min_interval")
        self.max_interval = check_seconds(max_interval, "max_interval")
        if self.min_interval > self.max_interval:
            raise InvalidInputError(f"min_interval {min_interval} is over max_interval {max_interval}")
        self.initial = min(max(check_seconds(initial, "initial"), self.min_interval), self.max_interval)
        self.prior_take = None if take_seconds is None else check_seconds(take_seconds, "take_seconds", zero_ok=True)
        self.prior_mtbf = None if mtbf_seconds is None else check_seconds(mtbf_seconds, "mtbf_seconds")
        if type(window) is not int or window < 1:
            raise InvalidInputError(f"window must be an integer >= 1, not {window!r}")
        self.failure_window = check_seconds(failure_window, "failure_window")
        if type(prior_failures) not in (int, float) or not (0 < prior_failures < math.inf):
            raise InvalidInputError(f"prior_failures must be a number > 0, not {prior_failures!r}")
        self.prior_failures = float(prior_failures)
        self._clock = clock
        self._started = float(clock())
        self._takes: deque[float] = deque(maxlen=window)
        self._failures: list[float] = []  # sorted; at most MAX_FAILURES_KEPT (a flood stays bounded)

    @classmethod
    def for_subject(cls, store: Store, subject: str, **kwargs: Any) -> AdaptiveSchedule:
        """A schedule that starts from what `subject`'s history says (measure): its take
        time and MTBF as the priors, where they can be measured; otherwise the defaults.

        Raises: InvalidInputError for kwargs __init__ refuses; what measure raises, except
        NotFoundError (a subject without checkpoints starts from the defaults).
        """
        from ckptcli.errors import NotFoundError

        try:
            m = measure(store, subject)
        except NotFoundError:
            return cls(**kwargs)
        kwargs.setdefault("take_seconds", m.take_seconds)
        kwargs.setdefault("mtbf_seconds", m.mtbf_seconds)
        return cls(**kwargs)

    # -- what happened ----------------------------------------------------------------------------
    def took(self, seconds: float) -> None:
        """Raises: InvalidInputError for a duration check_seconds refuses (0 is allowed)."""
        self._takes.append(check_seconds(seconds, "the take time", zero_ok=True))

    def failed(self, at: float) -> None:
        """Raises: InvalidInputError for a time that is not a finite number."""
        if type(at) not in (int, float) or not math.isfinite(at):
            raise InvalidInputError(f"the failure time must be a finite number, not {at!r}")
        bisect.insort(self._failures, float(at))  # at the end, unless failures are reported out of order
        if len(self._failures) > MAX_FAILURES_KEPT:
            del self._failures[: len(self._failures) - MAX_FAILURES_KEPT]

    # -- the estimates ----------------------------------------------------------------------------
    @property
    def take_estimate(self) -> float | None:
        """D: the median of the newest takes, or the prior; None before anything is known."""
        if self._takes:
            return float(statistics.median(self._takes))
        return self.prior_take

    def _prior_mtbf(self) -> float:
        """M0: the given MTBF, or the one for which Young's interval is `initial` for the
        current D (an unknown D counts as MIN_TAKE_SECONDS: next_delay then only scales
        `initial` by sqrt(M / M0), which does not depend on D)."""
        if self.prior_mtbf is not None:
            return self.prior_mtbf
        return self.initial**2 / (2.0 * max(self.take_estimate or 0.0, MIN_TAKE_SECONDS))

    def mtbf_estimate(self) -> float:
        """M now: (prior_failures * M0 + the time seen in the window) / (prior_failures +
        the failures in the window)."""
        now = float(self._clock())
        old = bisect.bisect_left(self._failures, now - self.failure_window)
        if old:
            del self._failures[:old]  # they have left the window (the clock only goes forward)
        recent = len(self._failures)
        seen = min(self.failure_window, max(0.0, now - self._started))
        return (self.prior_failures * self._prior_mtbf() + seen) / (self.prior_failures + recent)

    def next_delay(self) -> float:
        """Returns: Daly's interval for the estimates, within [min_interval, max_interval];
        while D is unknown, `initial` scaled by sqrt(M / M0) (Young's rule's dependence on M)."""
        take, mtbf = self.take_estimate, self.mtbf_estimate()
        if take is None:
            delay = self.initial * math.sqrt(mtbf / self._prior_mtbf())
        else:
            delay = _daly(max(take, MIN_TAKE_SECONDS), mtbf)
        return min(max(delay, self.min_interval), self.max_interval)

    def describe(self) -> dict[str, Any]:
        """The estimates and the bounds, for a log line or a checkpoint's ext section
        (the supervisor's FixedSchedule.describe() says {"kind": "fixed", ...})."""
        return {
            "kind": "adaptive",
            "take_seconds": self.take_estimate,
            "mtbf_seconds": self.mtbf_estimate(),
            "recent_failures": len(self._failures),
            "next_delay_seconds": self.next_delay(),
            "min_interval": self.min_interval,
            "max_interval": self.max_interval,
        }
