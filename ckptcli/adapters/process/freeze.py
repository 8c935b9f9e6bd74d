"""Freezing a supervised program while its state is copied (docs/processes.md "Freeze modes").

- `cgroup`: the program runs in a cgroup of its own, made at start and removed at the end:
  under a writable cgroup2 mount, frozen by writing 1 to `cgroup.freeze` and waiting for
  `frozen 1` in `cgroup.events` (how: `cgroup`); else under the v1 freezer hierarchy,
  `freezer.state` FROZEN, waiting until it reads FROZEN (how: `freezer`). Every process
  the program starts is frozen with it, wherever its process group.
- `sigstop`: SIGSTOP to the program's process group, then wait until every member shows
  state T in /proc/PID/stat; SIGCONT after. A member that left the group is not stopped,
  and a program that handles SIGCONT sees it.
- `none`: nothing is frozen (the copy is taken while the program runs: it may tear).
- `auto`: cgroup if one can be made here, else sigstop.

Where cgroups are mounted is read from /proc/self/mountinfo, never assumed. Thawing always
happens (`frozen()` is a context manager); a supervisor killed while a program is frozen
leaves a runtime record naming what to thaw, which the next `ckpt run` of that subject (and
`thaw_record`) undoes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ckptcli.errors import CkptError, UsageError

__all__ = ["MODES", "Freezer", "available", "cgroup_mounts", "choose", "hold", "thaw_record"]

MODES = ("auto", "cgroup", "cgroup2", "freezer", "sigstop", "none")
#: the cgroup modes: which hierarchies each may use (cgroup: v2, else the v1 freezer)
CGROUP_VERSIONS = {"cgroup": (2, 1), "cgroup2": (2,), "freezer": (1,)}
#: how long a freeze may take to settle before it is given up (seconds)
SETTLE_SECONDS = 10.0


class FreezeError(CkptError):
    """A freeze that did not settle (the program is thawed again)."""


@dataclass
class Mounts:
    """The cgroup mounts of this machine: the cgroup2 mount and the v1 freezer's (or None)."""

    v2: Path | None
    v1_freezer: Path | None


def cgroup_mounts(mountinfo: str = "/proc/self/mountinfo") -> Mounts:
    """Where cgroup2 and the v1 freezer are mounted, from mountinfo (the first of each)."""
    v2 = v1 = None
    try:
        text = Path(mountinfo).read_text()
    except OSError:
        return Mounts(None, None)
    for line in text.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 10:
            continue
        post = line.split(" - ", 1)[1].split()
        fstype, options = post[0], post[2] if len(post) > 2 else ""
        mount_point = Path(fields[4].replace("\\040", " "))
        if fstype == "cgroup2" and v2 is None:
            v2 = mount_point
        elif fstype == "cgroup" and "freezer" in options.split(",") and v1 is None:
            v1 = mount_point
    return Mounts(v2, v1)


def _own_cgroup(version: int) -> str:
    """This process's cgroup path in the v2 hierarchy (version 2) or the v1 freezer's."""
    try:
        text = Path("/proc/self/cgroup").read_text()
    except OSError:
        return "/"
    for line in text.splitlines():
        hid, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if version == 2 and hid == "0" and controllers == "":
            return path or "/"
        if version == 1 and "freezer" in controllers.split(","):
            return path or "/"
    return "/"


class Freezer:
    """How one program is frozen. `how` is the value recorded (cgroup, freezer, sigstop, none)."""

    how = "none"

    def prepare_child(self) -> None:
        """Run in the child between fork and exec (joins the cgroup)."""

    def attach(self, pid: int) -> None:
        """The program started as process group `pid`."""
        self.pgid = pid

    def freeze(self) -> None:
        """Freeze the program; returns once it is frozen. Raises FreezeError (thawed again)."""

    def thaw(self) -> None:
        """Let it run again (harmless when it is not frozen)."""

    def record(self) -> dict[str, Any]:
        """What a later `ckpt run` needs to thaw it, should this supervisor die while it is frozen."""
        return {"how": self.how}

    def cleanup(self) -> None:
        """Remove what `prepare` made (the cgroup), once the program is gone."""

    def kill_rest(self) -> None:
        """Kill what is left of the program once its main process is gone: its process
        group (a child still writing its state would be a second writer beside the
        restarted program)."""
        if getattr(self, "pgid", 0) > 0:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pgid, signal.SIGKILL)

    @contextlib.contextmanager
    def frozen(self) -> Iterator[None]:
        """Frozen inside the block, thawed after it, whatever happens."""
        try:
            self.freeze()
            yield
        finally:
            self.thaw()


class NoFreeze(Freezer):
    how = "none"


class SigStop(Freezer):
    how = "sigstop"
    #: seconds the group may take to stop
    settle = SETTLE_SECONDS

    def freeze(self) -> None:
        if self.pgid <= 0:  # killpg(0) is the caller's own group
            raise FreezeError(f"process group {self.pgid} is not a program's group")
        try:
            os.killpg(self.pgid, signal.SIGSTOP)
        except OSError as exc:
            raise FreezeError(f"cannot stop process group {self.pgid}: {exc.strerror}") from None
        deadline = time.monotonic() + self.settle
        while not all(state in "TtZX" for state in _group_states(self.pgid).values()):
            if time.monotonic() > deadline:
                self.thaw()
                raise FreezeError(f"process group {self.pgid} did not stop within {self.settle:g} s")
            time.sleep(0.001)

    def thaw(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, signal.SIGCONT)

    def record(self) -> dict[str, Any]:
        return {"how": self.how, "pgid": self.pgid}


def _group_states(pgid: int) -> dict[int, str]:
    """pid -> state letter of every process in process group `pgid` (from /proc/PID/stat)."""
    out: dict[int, str] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                raw = f.read(4096).decode("ascii", "replace")
        except OSError:
            continue
        fields = raw[raw.rfind(")") + 2 :].split()
        if len(fields) > 2 and fields[2] == str(pgid):
            out[int(name)] = fields[0]
    return out


class CgroupFreezer(Freezer):
    """A cgroup made for the program, v2 (`cgroup.freeze`) or the v1 freezer."""

    def __init__(self, path: Path, version: int) -> None:
        self.path = path
        self.version = version
        self.how = "cgroup" if version == 2 else "freezer"

    def prepare_child(self) -> None:
        with open(self.path / "cgroup.procs", "w") as f:  # "0": the writer itself
            f.write("0")

    def freeze(self) -> None:
        try:
            self._freeze()
        except OSError as exc:
            self.thaw()
            raise FreezeError(f"cannot freeze cgroup {self.path}: {exc.strerror}") from None

    def _freeze(self) -> None:
        deadline = time.monotonic() + SETTLE_SECONDS
        if self.version == 2:
            (self.path / "cgroup.freeze").write_text("1")
            while "frozen 1" not in (self.path / "cgroup.events").read_text().splitlines():
                if time.monotonic() > deadline:
                    self.thaw()
                    raise FreezeError(f"cgroup {self.path} did not freeze within {SETTLE_SECONDS:g} s")
                time.sleep(0.0005)
        else:
            (self.path / "freezer.state").write_text("FROZEN")
            while (self.path / "freezer.state").read_text().strip() != "FROZEN":
                if time.monotonic() > deadline:
                    self.thaw()
                    raise FreezeError(f"cgroup {self.path} did not freeze within {SETTLE_SECONDS:g} s")
                time.sleep(0.0005)

    def thaw(self) -> None:
        thaw_cgroup(self.path, self.version)

    def record(self) -> dict[str, Any]:
        return {"how": self.how, "cgroup": str(self.path), "version": self.version}

    def kill_rest(self) -> None:
        """The process group, and every process left in the cgroup: a descendant that
        left the group (setsid) too."""
        super().kill_rest()
        self.thaw()
        for _ in range(100):
            try:
                pids = [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
            except OSError:
                return
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.005)

    def cleanup(self) -> None:
        """Thaw, kill what is left in the cgroup (the program's own children), remove it."""
        self.thaw()
        for _ in range(200):
            try:
                pids = [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
            except OSError:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.01)


def thaw_cgroup(path: Path, version: int) -> None:
    with contextlib.suppress(OSError):
        if version == 2:
            (path / "cgroup.freeze").write_text("0")
        else:
            (path / "freezer.state").write_text("THAWED")


def _make_cgroup(base: Path, name: str, probe: str) -> Path | None:
    """A new cgroup `name` under `base`, when it can be made there and has the file `probe`."""
    path = base / name
    try:
        os.mkdir(path)
    except FileExistsError:
        pass
    except OSError:
        return None
    if not (path / probe).exists() or not os.access(path / "cgroup.procs", os.W_OK):
        with contextlib.suppress(OSError):
            os.rmdir(path)
        return None
    return path


def _cgroup(name: str, versions: tuple[int, ...] = (2, 1)) -> tuple[CgroupFreezer | None, str]:
    """A cgroup freezer for a new program (trying cgroup2, then the v1 freezer, among
    `versions`), and why not when there is none."""
    mounts = cgroup_mounts()
    why: list[str] = []
    for version in versions:
        mount = mounts.v2 if version == 2 else mounts.v1_freezer
        what = "cgroup2" if version == 2 else "the v1 freezer"
        if mount is None:
            why.append(f"no {what} mount")
            continue
        for base in (mount / _own_cgroup(version).lstrip("/"), mount):
            if base.is_dir() and os.access(base, os.W_OK):
                made = _make_cgroup(base, name, "cgroup.freeze" if version == 2 else "freezer.state")
                if made is not None:
                    return CgroupFreezer(made, version), ""
        why.append(f"{what} at {mount} is not writable")
    return None, "; ".join(why)


def choose(mode: str, name: str, *, versions: tuple[int, ...] = (2, 1)) -> Freezer:
    """The freezer of `mode` for a program about to start; `name` names its cgroup.
    `cgroup` uses cgroup2, else the v1 freezer; `cgroup2` and `freezer` only the one;
    `versions` restricts them further (the tests use it).

    Raises:
        UsageError when `mode` is unknown or cannot work here (saying why).
    """
    if mode not in MODES:
        raise UsageError(f"--freeze {mode!r} is not one of {', '.join(MODES)}")
    if mode == "none":
        return NoFreeze()
    if mode == "sigstop":
        return SigStop()
    if mode in CGROUP_VERSIONS:
        versions = tuple(v for v in versions if v in CGROUP_VERSIONS[mode])
    freezer, why = _cgroup(name, versions)
    if freezer is not None:
        return freezer
    if mode != "auto":
        raise UsageError(f"--freeze {mode} cannot work here: {why}", hint="use --freeze sigstop (or auto, which falls back to it)")
    return SigStop()


@contextlib.contextmanager
def hold(pid: int, mode: str, timeout: float) -> Iterator[str]:
    """Hold a program that is already running still while it is captured (`ckpt capture
    process PID`); yields how ("sigstop" or "none"), and lets it run again after,
    whatever happens.

    `auto` and `sigstop` stop its process group with SIGSTOP and wait (up to `timeout`
    seconds) until every member is stopped; `none` holds nothing. `cgroup` is for the
    programs `ckpt run` starts in a cgroup of their own: moving a running program's
    processes into a new cgroup could split them mid-fork.

    Raises:
        UsageError for `cgroup` or an unknown mode; FreezeError when the group is ckpt's
        own (stopping it would stop ckpt too), is gone, or does not stop in time.
    """
    if mode not in MODES:
        raise UsageError(f"--freeze {mode!r} is not one of {', '.join(MODES)}")
    if mode == "none":
        yield "none"
        return
    if mode in CGROUP_VERSIONS:
        raise UsageError(
            f"--freeze {mode} holds the programs `ckpt run` starts (in a cgroup it makes for them), not a program already running",
            hint="use --freeze sigstop (or auto, which is sigstop here)",
        )
    try:
        pgid = os.getpgid(pid)
    except ProcessLookupError:
        raise FreezeError(f"process {pid} is gone") from None
    if pgid <= 0:  # killpg(0) would stop ckpt's own group (PID 1 of a container has process group 0)
        raise FreezeError(
            f"process {pid} has no process group of its own (group {pgid}): it cannot be stopped as a group",
            hint="take it with --freeze none (the copy may then be torn)",
        )
    if pgid == os.getpgrp():
        raise FreezeError(
            f"process {pid} is in ckpt's own process group {pgid}: stopping the group would stop ckpt too",
            hint="start the program in a group of its own (setsid), or take it with --freeze none",
        )
    stop = SigStop()
    stop.attach(pgid)
    stop.settle = timeout
    with stop.frozen():
        yield "sigstop"


def available() -> dict[str, str]:
    """Each freeze mode -> "" when it works here, else why not (for `ckpt doctor`)."""
    out = {"none": "", "sigstop": ""}
    made, why = _cgroup(f"ckpt-probe-{os.getpid()}")
    if made is not None:
        made.cleanup()
    out["cgroup"] = "" if made is not None else why
    for mode, versions in (("cgroup2", (2,)), ("freezer", (1,))):
        made, why = _cgroup(f"ckpt-probe-{os.getpid()}", versions)
        if made is not None:
            made.cleanup()
        out[mode] = "" if made is not None else why
    return out


def thaw_record(frozen: dict[str, Any], alive: Callable[[], bool] | None = None) -> str:
    """Thaw what a dead supervisor's runtime record says it left frozen; returns what was
    done, in words ("" when nothing was)."""
    how = frozen.get("how")
    if how in ("cgroup", "freezer"):
        path = ckpt_cgroup(frozen.get("cgroup"))
        if path is not None:
            thaw_cgroup(path, 2 if how == "cgroup" else 1)
            return f"thawed cgroup {path}"
    elif how == "sigstop" and type(frozen.get("pgid")) is int and 1 < frozen["pgid"] <= PID_MAX:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(frozen["pgid"], signal.SIGCONT)
            return f"sent SIGCONT to process group {frozen['pgid']}"
    return ""


#: the largest PID Linux gives (a record's number beyond it is not a process group)
PID_MAX = 1 << 22


def ckpt_cgroup(given: object) -> Path | None:
    """`given` (from a runtime record, which may be damaged or planted) when it is a cgroup
    ckpt made: a directory named ckpt-* right inside a cgroup hierarchy this machine
    mounts (cgroup2, or the v1 freezer), reached through no symlink; else None."""
    if not isinstance(given, str) or not os.path.isabs(given):
        return None
    path = Path(os.path.normpath(given))
    if not path.name.startswith("ckpt-") or path.is_symlink() or not path.is_dir():
        return None
    mounts = cgroup_mounts()
    roots = [m for m in (mounts.v2, mounts.v1_freezer) if m is not None]
    real = Path(os.path.realpath(path))
    return path if real == path and any(root in path.parents for root in roots) else None
