"""What /proc shows of a running program: `describe(pid)` reads its command line, executable,
working directory, environment (secrets redacted), limits, open files, cgroups, owner, start
time, process group, children and threads into plain data (docs/process-capture.md).

Invariants: every read is bounded (a /proc file, the environment, the command line, the fd
table, the children: past its cap the value says ``truncated``, never grows memory without
bound); a file or descriptor that vanishes while it is read is left out and counted, and a
process that exits (or whose PID is reused) while it is described is one ProcessGoneError,
never a half description; redaction runs before the description is returned, and what was
redacted is recorded by name and rule, never by value. `check_pid` refuses, with one line
each, a PID that is not a number or not positive, ckpt's own, a kernel thread, another
user's process, and one that is gone."""

from __future__ import annotations

import contextlib
import errno
import os
import stat as stat_mod
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ckptcli._util.redact import Redaction, Redactor
from ckptcli._util.redact import redact_argv_flags as _redact_flags
from ckptcli.errors import CkptError, InvalidInputError, NotFoundError, StoreIOError

__all__ = [
    "KernelThreadError",
    "Limits",
    "NotOurProcessError",
    "ProcessGoneError",
    "check_pid",
    "describe",
    "parse_limits",
    "parse_pid",
    "parse_stat",
]

PROC = "/proc"
#: PF_KTHREAD in include/linux/sched.h: the task is a kernel thread (no memory, no files of its own)
PF_KTHREAD = 0x00200000
TRUNCATED = "truncated"


class ProcessGoneError(NotFoundError):
    """The PID names no process: it never ran, it exited (a zombie waiting for its parent is
    gone too), or it exited while it was described (exit code 3, NOT_FOUND)."""


class NotOurProcessError(InvalidInputError):
    """The process belongs to another user: ckpt does not read another user's environment and
    files, and without privilege the kernel refuses anyway (exit code 4, INVALID_INPUT)."""


class KernelThreadError(InvalidInputError):
    """The PID is a kernel thread: it has no program, files or memory of its own to capture
    (exit code 4, INVALID_INPUT)."""


@dataclass(frozen=True)
class Limits:
    """Caps on what describe reads; past one the value is cut and marked ``truncated``."""

    file_bytes: int = 1 << 20  # any one /proc text file (status, limits, cgroup, fdinfo, net tables)
    cmdline_bytes: int = 256 << 10
    environ_bytes: int = 1 << 20
    environ_vars: int = 4096
    fds: int = 4096
    children: int = 4096
    net_bytes: int = 4 << 20  # each of net/tcp, tcp6, udp, udp6, unix (read only when the process has sockets)


DEFAULT_LIMITS = Limits()


# -- reading /proc --------------------------------------------------------------------------------


class _Vanished(Exception):  # noqa: N818 - a signal between the readers and describe, never raised out of this module
    """A /proc entry of the process is gone (the process exited, or the fd was closed)."""


def _read(path: str, cap: int) -> tuple[bytes, bool]:
    """Up to `cap` bytes of `path` and whether there was more. Raises _Vanished when the
    entry (or the process) is gone, PermissionError when the kernel refuses it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except (FileNotFoundError, ProcessLookupError) as exc:
        raise _Vanished(path) from exc
    except OSError as exc:
        if exc.errno in (errno.ESRCH, errno.ENOENT):
            raise _Vanished(path) from exc
        raise
    try:
        chunks: list[bytes] = []
        size = 0
        while size <= cap:
            try:
                piece = os.read(fd, min(65536, cap + 1 - size))
            except OSError as exc:
                if exc.errno in (errno.ESRCH, errno.ENOENT):
                    raise _Vanished(path) from exc
                raise
            if not piece:
                break
            chunks.append(piece)
            size += len(piece)
        data = b"".join(chunks)
        return data[:cap], len(data) > cap
    finally:
        os.close(fd)


def _text(path: str, cap: int) -> tuple[str, bool]:
    data, cut = _read(path, cap)
    return data.decode("utf-8", "surrogateescape"), cut


def _readlink(path: str) -> str:
    try:
        return os.readlink(path)
    except (FileNotFoundError, ProcessLookupError) as exc:
        raise _Vanished(path) from exc
    except OSError as exc:
        if exc.errno in (errno.ESRCH, errno.ENOENT):
            raise _Vanished(path) from exc
        raise


def _decode(data: bytes) -> str:
    """Bytes from /proc as text; bytes that are not UTF-8 are kept as \\xNN escapes."""
    return data.decode("utf-8", "backslashreplace")


# -- the PID --------------------------------------------------------------------------------------


def parse_pid(value: object) -> int:
    """The PID in `value` (an int, or its decimal text). Raises InvalidInputError for
    anything else, for 0 and for a negative number (which kill(2) reads as a group)."""
    if isinstance(value, bool):
        raise InvalidInputError(f"{value!r} is not a PID", hint="give the process id as a positive whole number, e.g. 12345")
    if isinstance(value, int):
        pid = value
    else:
        text = str(value).strip()
        if not text.lstrip("-").isdigit() or not text.isascii():
            shown = text if len(text) <= 40 else text[:40] + "..."
            raise InvalidInputError(f"{shown!r} is not a PID", hint="give the process id as a positive whole number, e.g. 12345 (see `ps`)")
        pid = int(text)
    if pid <= 0:
        raise InvalidInputError(
            f"PID {pid} is not a process", hint="give the positive id of one process (0 and negative numbers name process groups)"
        )
    if pid >= 2**22:  # PID_MAX_LIMIT on 64-bit Linux: every PID is below it
        raise ProcessGoneError(f"no process {pid}: PIDs are below {2**22}", hint="check the PID with `ps`")
    return pid


def parse_stat(text: str) -> dict[str, Any]:
    """The fields of /proc/PID/stat describe uses. The command name is in parentheses and
    may hold spaces and parentheses itself, so the fields are counted from the last ')'."""
    head, sep, rest = text.rpartition(")")
    if not sep:
        raise ValueError("no ')' in stat")
    comm = head.partition("(")[2]
    f = rest.split()
    # rest starts at field 3 (state); field N of proc(5) is f[N - 3]
    return {
        "comm": comm,
        "state": f[0],
        "ppid": int(f[1]),
        "pgid": int(f[2]),
        "sid": int(f[3]),
        "tty_nr": int(f[4]),
        "flags": int(f[6]),
        "num_threads": int(f[17]),
        "starttime": int(f[19]),
    }


def _stat(pid: int) -> dict[str, Any]:
    text, _ = _text(f"{PROC}/{pid}/stat", 4096)
    if not text:
        raise _Vanished(f"{PROC}/{pid}/stat")
    return parse_stat(text)


def _gone(pid: int, what: str = "") -> ProcessGoneError:
    return ProcessGoneError(
        f"process {pid} {what or 'does not exist (it exited, or never ran)'}",
        hint="check the PID with `ps -p " + str(pid) + "` and give one of a running program",
    )


def _status(pid: int, cap: int) -> dict[str, str]:
    text, _ = _text(f"{PROC}/{pid}/status", cap)
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key] = value.strip()
    return out


def _ids(field: str | None) -> list[int]:
    return [int(x) for x in (field or "").split() if x.lstrip("-").isdigit()]


def check_pid(pid: object, *, other_users: bool = False) -> tuple[int, dict[str, Any]]:
    """The PID as an int and its stat fields, when it names a process ckpt may capture.

    Args:
        pid: an int or its decimal text.
        other_users: also accept a process of another user (the kernel must still let
            this process read it: root, or CAP_SYS_PTRACE).
    Returns:
        (pid, the fields of parse_stat).
    Raises:
        InvalidInputError: not a positive whole number, ckpt's own PID, or the id of a
            thread that is not its process's main thread.
        ProcessGoneError: no such process, or a zombie (it has exited).
        KernelThreadError: a kernel thread.
        NotOurProcessError: another user's process (unless `other_users`).
    """
    n = parse_pid(pid)
    if n == os.getpid():
        raise InvalidInputError(
            f"PID {n} is this ckpt process itself",
            hint="ckpt cannot capture itself while it runs; give the PID of another program",
        )
    try:
        st = _stat(n)
    except _Vanished:
        raise _gone(n) from None
    except (OSError, ValueError, IndexError) as exc:
        raise CkptError(f"cannot read /proc/{n}/stat: {exc}", hint="is /proc mounted?") from None
    if st["flags"] & PF_KTHREAD or n == 2 or st["ppid"] == 2:
        raise KernelThreadError(
            f"PID {n} ({st['comm']}) is a kernel thread", hint="kernel threads have no program to capture; give the PID of a user program"
        )
    if st["state"] in ("Z", "X"):
        raise _gone(n, f"({st['comm']}) has exited (a zombie its parent {st['ppid']} has not reaped)")
    try:
        tgid = _ids(_status(n, 1 << 16).get("Tgid"))
    except _Vanished:
        raise _gone(n) from None
    if tgid and tgid[0] != n:
        raise InvalidInputError(
            f"{n} is a thread of process {tgid[0]} ({st['comm']}), not a process",
            hint=f"give the process id, {tgid[0]}",
        )
    if not other_users:
        try:
            ruid = os.stat(f"{PROC}/{n}").st_uid
        except (FileNotFoundError, ProcessLookupError):
            raise _gone(n) from None
        me = os.geteuid()
        if ruid != me:
            raise NotOurProcessError(
                f"process {n} ({st['comm']}) belongs to uid {ruid} ({_user(ruid)}), not to this user (uid {me})",
                hint="capture it as its own user (e.g. `sudo -u " + _user(ruid) + " ckpt ...`)",
            )
    return n, st


def _user(uid: int) -> str:
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (KeyError, ImportError):
        return str(uid)


# -- the description ------------------------------------------------------------------------------


def describe(
    pid: object,
    *,
    redactor: Redactor | None = None,
    redact: bool = True,
    limits: Limits = DEFAULT_LIMITS,
    other_users: bool = False,
    where: str = "/ext/process",
) -> dict[str, Any]:
    """What /proc shows of process `pid`, as plain data (docs/process-capture.md lists the fields).

    Args:
        pid: the process id (an int or its decimal text).
        redactor: the redaction rules (default: the generic adapter's, `Redactor()`).
        redact: False keeps the environment and command line as they are (not recommended).
        limits: caps on each read; a value cut at its cap says so (``truncated``).
        other_users: see check_pid.
        where: the JSON pointer the description will live at in the state document, so
            that the recorded redaction paths point at the redacted values.
    Returns:
        A dict with pid, ppid, pgid, sid, comm, state, argv, exe, cwd, root, environ,
        uid, gid, groups, started_at, start_ticks, threads, children, limits, fds,
        cgroups, truncated (what was cut), vanished (fds that closed while read) and
        redaction ({"rules", "redacted": [{"path", "rule"}]}: what was replaced, never how).
    Raises:
        The errors of check_pid; ProcessGoneError also when the process exits, or its PID is
        reused, while it is described; NotOurProcessError when the kernel refuses a read;
        StoreIOError (exit 12) for any other error of the operating system.
    """
    n, st = check_pid(pid, other_users=other_users)
    try:
        out = _describe(n, st, limits)
    except _Vanished:
        raise _gone(n, "exited while it was described") from None
    except PermissionError as exc:
        raise NotOurProcessError(
            f"process {n} ({st['comm']}): the kernel refuses to let this user read {exc.filename or '/proc/' + str(n)}",
            hint="capture it as its own user, or as root",
        ) from None
    except OSError as exc:
        raise StoreIOError(f"cannot read /proc/{n} ({st['comm']}): {exc.strerror or exc}", hint="is /proc mounted and readable?") from None
    # the same process from start to end: still there, not a zombie, its PID not reused
    try:
        after = _stat(n)
    except _Vanished:
        raise _gone(n, "exited while it was described") from None
    if after["starttime"] != st["starttime"] or after["state"] in ("Z", "X"):
        raise _gone(n, "exited while it was described")
    out["state"] = after["state"]
    report = Redaction()
    rules = redactor if redactor is not None else Redactor()
    if redact:
        out["argv"] = _redact_flags(rules.redact(out["argv"], f"{where}/argv", report), rules, f"{where}/argv", report)
        out["environ"] = rules.redact(out["environ"], f"{where}/environ", report)
    out["redaction"] = {
        "rules": rules.fingerprint if redact else None,
        "redacted": [{"path": p, "rule": r} for p, r in zip(report.paths, report.rules, strict=True)],
    }
    return out


def _describe(pid: int, st: dict[str, Any], limits: Limits) -> dict[str, Any]:
    base = f"{PROC}/{pid}"
    cut: list[str] = []
    vanished: list[str] = []
    status = _status(pid, limits.file_bytes)
    argv, more = _nul_list(base + "/cmdline", limits.cmdline_bytes)
    if more:
        cut.append("argv")
    environ, env_cut = _environ(base + "/environ", limits)
    if env_cut:
        cut.append("environ")
    fds, fd_total = _fds(pid, limits, vanished)
    if fd_total > len(fds) + len(vanished):
        cut.append("fds")
    children = _children(pid, limits)
    if len(children) >= limits.children:
        cut.append("children")
    uid = _ids(status.get("Uid"))
    gid = _ids(status.get("Gid"))
    return {
        "pid": pid,
        "ppid": st["ppid"],
        "pgid": st["pgid"],
        "sid": st["sid"],
        "comm": st["comm"],
        "state": st["state"],
        "argv": argv,
        "exe": _link_or_none(base + "/exe"),
        "cwd": _link_or_none(base + "/cwd"),
        "root": _link_or_none(base + "/root"),
        "environ": environ,
        "uid": dict(zip(("real", "effective", "saved", "fs"), uid, strict=False)),
        "gid": dict(zip(("real", "effective", "saved", "fs"), gid, strict=False)),
        "groups": _ids(status.get("Groups")),
        "start_ticks": st["starttime"],
        "started_at": _started_at(st["starttime"]),
        "threads": st["num_threads"],
        "children": children,
        "limits": _limits(base + "/limits", limits),
        "fds": fds,
        "fd_count": fd_total,
        "cgroups": _cgroups(base + "/cgroup", limits),
        "truncated": cut,
        "vanished": vanished,
    }


def _nul_list(path: str, cap: int) -> tuple[list[str], bool]:
    data, more = _read(path, cap)
    items = data.split(b"\0")
    if items and items[-1] == b"":
        items.pop()
    elif more and items:
        items[-1] += b"..."  # cut inside the last item
    out = [_decode(i) for i in items]
    if more:
        out.append(f"[{TRUNCATED}: more than {cap} bytes]")
    return out, more


def _environ(path: str, limits: Limits) -> tuple[dict[str, str], bool]:
    data, more = _read(path, limits.environ_bytes)
    env: dict[str, str] = {}
    entries = data.split(b"\0")
    if more and entries:
        entries.pop()  # the last entry was cut: leave it out rather than store half a value
    for raw in entries:
        if not raw:
            continue
        if len(env) >= limits.environ_vars:
            more = True
            break
        key, sep, value = raw.partition(b"=")
        env[_decode(key)] = _decode(value) if sep else ""
    return env, more


def _link_or_none(path: str) -> str | None:
    """Where a /proc link points, or None when the kernel does not say (a process of
    another user, a kernel thread). Raises _Vanished when the process is gone."""
    try:
        return _decode(os.fsencode(_readlink(path)))
    except PermissionError:
        raise
    except _Vanished:
        # a running process always has cwd and root; exe is absent for some
        if not os.path.exists(os.path.dirname(path) + "/stat"):
            raise
        return None


def _started_at(ticks: int) -> str | None:
    """The start time (ticks after boot, from stat) as UTC ISO 8601, from /proc/stat's btime."""
    try:
        hz = os.sysconf("SC_CLK_TCK")
        text, _ = _text(f"{PROC}/stat", 1 << 20)
    except (OSError, ValueError, _Vanished):
        return None
    for line in text.splitlines():
        if line.startswith("btime "):
            at = int(line.split()[1]) + ticks / hz
            return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at)) + f".{int((at % 1) * 100):02d}Z"
    return None


def parse_limits(text: str) -> dict[str, dict[str, Any]]:
    """/proc/PID/limits as {"max_open_files": {"soft": 1024, "hard": 4096, "units": "files"}};
    "unlimited" is None. Columns are found from the header, which the kernel pads to fixed widths."""
    lines = text.splitlines()
    if not lines or "Soft Limit" not in lines[0]:
        return {}
    header = lines[0]
    soft_at, hard_at = header.index("Soft Limit"), header.index("Hard Limit")
    units_at = header.find("Units")
    out: dict[str, dict[str, Any]] = {}
    for line in lines[1:]:
        name = line[:soft_at].strip()
        if not name:
            continue
        soft = line[soft_at:hard_at].strip()
        hard = (line[hard_at:units_at] if units_at > 0 else line[hard_at:]).strip()
        units = line[units_at:].strip() if units_at > 0 else ""
        out[name.lower().replace(" ", "_")] = {"soft": _limit(soft), "hard": _limit(hard), "units": units}
    return out


def _limit(value: str) -> int | str | None:
    if value == "unlimited":
        return None
    return int(value) if value.isdigit() else value


def _limits(path: str, limits: Limits) -> dict[str, dict[str, Any]]:
    text, _ = _text(path, limits.file_bytes)
    return parse_limits(text)


def _cgroups(path: str, limits: Limits) -> list[dict[str, Any]]:
    """/proc/PID/cgroup: one entry per hierarchy (cgroup v2 is hierarchy 0 with no controllers)."""
    text, _ = _text(path, limits.file_bytes)
    out = []
    for line in text.splitlines():
        hier, _, rest = line.partition(":")
        controllers, _, where = rest.partition(":")
        if hier.isdigit():
            out.append({"hierarchy": int(hier), "controllers": [c for c in controllers.split(",") if c], "path": where})
    return out


def _children(pid: int, limits: Limits) -> list[int]:
    """Direct children, from every thread's task/TID/children (CONFIG_PROC_CHILDREN); [] where
    the kernel has no such file."""
    found: list[int] = []
    try:
        tids = sorted(os.listdir(f"{PROC}/{pid}/task"), key=lambda t: int(t) if t.isdigit() else 0)
    except (FileNotFoundError, ProcessLookupError) as exc:
        raise _Vanished(f"{PROC}/{pid}/task") from exc
    for tid in tids[: limits.children]:
        try:
            text, _ = _text(f"{PROC}/{pid}/task/{tid}/children", limits.file_bytes)
        except _Vanished:
            continue  # a thread that ended, or no CONFIG_PROC_CHILDREN
        for word in text.split():
            if word.isdigit() and len(found) < limits.children:
                found.append(int(word))
    return sorted(set(found))


# -- open files -----------------------------------------------------------------------------------

_ACCESS = {0: "r", 1: "w", 2: "rw"}
_FLAG_NAMES = (
    (os.O_APPEND, "append"),
    (os.O_NONBLOCK, "nonblock"),
    (getattr(os, "O_CLOEXEC", 0o2000000), "cloexec"),
    (getattr(os, "O_DIRECT", 0o40000), "direct"),
    (getattr(os, "O_SYNC", 0o4010000), "sync"),
    (getattr(os, "O_PATH", 0o10000000), "path"),
    (getattr(os, "O_TMPFILE", 0o20200000) & ~getattr(os, "O_DIRECTORY", 0o200000), "tmpfile"),
)


def _flag_names(flags: int) -> list[str]:
    names = [_ACCESS.get(flags & 3, "?")]
    names += [name for bit, name in _FLAG_NAMES if bit and flags & bit == bit]
    return names


def _fds(pid: int, limits: Limits, vanished: list[str]) -> tuple[list[dict[str, Any]], int]:
    """(one entry per open descriptor, up to the cap; how many there were). A descriptor
    closed while it is read goes into `vanished`."""
    base = f"{PROC}/{pid}"
    try:
        names = os.listdir(base + "/fd")
    except (FileNotFoundError, ProcessLookupError) as exc:
        raise _Vanished(base + "/fd") from exc
    numbers = sorted(int(n) for n in names if n.isdigit())
    out: list[dict[str, Any]] = []
    sockets: list[dict[str, Any]] = []
    for fd in numbers[: limits.fds]:
        try:
            target = _readlink(f"{base}/fd/{fd}")
            info, _ = _text(f"{base}/fdinfo/{fd}", limits.file_bytes)
        except _Vanished:
            if not os.path.exists(base + "/stat"):
                raise
            vanished.append(str(fd))
            continue
        entry = _classify(fd, target, f"{base}/fd/{fd}")
        fields = _fdinfo(info)
        if "pos" in fields:
            entry["pos"] = fields["pos"]
        if "flags" in fields:
            entry["flags"] = _flag_names(fields["flags"])
        out.append(entry)
        if entry["kind"] == "socket":
            sockets.append(entry)
    if sockets:
        _name_sockets(pid, sockets, limits)
    return out, len(numbers)


def _fdinfo(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        value = value.strip()
        if not sep:
            continue
        if key == "pos" and value.isdigit():
            out["pos"] = int(value)
        elif key == "flags":
            with contextlib.suppress(ValueError):
                out["flags"] = int(value, 8)
    return out


def _classify(fd: int, target: str, link: str) -> dict[str, Any]:
    """An fd's entry from its link: a file, directory, device or fifo (path), a socket, a
    pipe, an anonymous inode (eventfd, epoll, ...), or a memfd. `link` is /proc/PID/fd/N,
    whose stat is the open file's, whatever mount namespace the path belongs to."""
    text = _decode(os.fsencode(target))
    for kind in ("socket", "pipe"):
        if text.startswith(kind + ":[") and text.endswith("]"):
            inode = text[len(kind) + 2 : -1]
            return {"fd": fd, "kind": kind, "inode": int(inode) if inode.isdigit() else inode}
    if text.startswith("anon_inode:"):
        return {"fd": fd, "kind": "anon_inode", "what": text[len("anon_inode:") :].strip("[]")}
    if text.startswith("/memfd:"):
        return {"fd": fd, "kind": "memfd", "name": text[len("/memfd:") :].removesuffix(" (deleted)")}
    entry: dict[str, Any] = {"fd": fd, "kind": "file", "path": text}
    if text.endswith(" (deleted)"):
        entry["path"] = text[: -len(" (deleted)")]
        entry["deleted"] = True
    elif text.startswith("/"):
        try:
            mode = os.stat(link).st_mode
        except OSError:
            mode = 0  # closed meanwhile: the path is still what it was
        if stat_mod.S_ISDIR(mode):
            entry["kind"] = "directory"
        elif stat_mod.S_ISCHR(mode) or stat_mod.S_ISBLK(mode):
            entry["kind"] = "device"
        elif stat_mod.S_ISFIFO(mode):
            entry["kind"] = "fifo"
    return entry


_TCP_STATES = {
    "01": "established",
    "02": "syn_sent",
    "03": "syn_recv",
    "04": "fin_wait1",
    "05": "fin_wait2",
    "06": "time_wait",
    "07": "close",
    "08": "close_wait",
    "09": "last_ack",
    "0A": "listen",
    "0B": "closing",
}


def _name_sockets(pid: int, sockets: list[dict[str, Any]], limits: Limits) -> None:
    """Add protocol and addresses to socket entries, from the process's network namespace
    tables (net/tcp, tcp6, udp, udp6, unix); a socket found in none stays as it is."""
    wanted = {s["inode"]: s for s in sockets if isinstance(s["inode"], int)}
    for proto in ("tcp", "tcp6", "udp", "udp6"):
        for fields in _net_rows(f"{PROC}/{pid}/net/{proto}", limits):
            if len(fields) > 9 and fields[9].isdigit() and int(fields[9]) in wanted:
                entry = wanted.pop(int(fields[9]))
                entry["proto"] = proto
                entry["local"] = _address(fields[1])
                entry["remote"] = _address(fields[2])
                if proto.startswith("tcp"):
                    entry["state"] = _TCP_STATES.get(fields[3], fields[3])
        if not wanted:
            return
    for fields in _net_rows(f"{PROC}/{pid}/net/unix", limits):
        if len(fields) > 6 and fields[6].isdigit() and int(fields[6]) in wanted:
            entry = wanted.pop(int(fields[6]))
            entry["proto"] = "unix"
            entry["type"] = {"0001": "stream", "0002": "dgram", "0005": "seqpacket"}.get(fields[4], fields[4])
            if len(fields) > 7:
                entry["path"] = fields[7]


def _net_rows(path: str, limits: Limits) -> Iterable[list[str]]:
    try:
        text, _ = _text(path, limits.net_bytes)
    except (_Vanished, PermissionError):
        return []
    return [line.split() for line in text.splitlines()[1:]]


def _address(text: str) -> str:
    """A net/tcp address (hex IP:hex port, the IP in host byte order) as "a.b.c.d:port"
    or "[v6]:port"."""
    ip, _, port = text.partition(":")
    try:
        raw = bytes.fromhex(ip)
        portno = int(port, 16)
    except ValueError:
        return text
    if len(raw) == 4:
        return ".".join(str(b) for b in reversed(raw)) + f":{portno}"
    if len(raw) == 16:
        import ipaddress

        words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
        return f"[{ipaddress.IPv6Address(words)}]:{portno}"
    return text
