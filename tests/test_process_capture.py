"""Capturing a running program by PID (ckptcli/adapters/process, docs/process-capture.md):
/proc's view of real child processes (files, a socket, a pipe, threads, a grandchild, secrets
in the environment), taken into a store and read back with `ckpt show --json`; every hostile
PID (gone, a zombie, another user's, a kernel thread, not a number, ckpt's own); bounded
reads against megabytes of environment and command line and thousands of descriptors; a
process that exits while it is described; CRIU's check, dump and restore.

CRIU: the dump/restore tests run only where `criu check` passes and skip with its reason
elsewhere. The failure paths and the command lines are tested with a fake `criu`: a shell
script put first on PATH that prints what a real criu prints and records how it was called.
It is a stand-in for the program's behaviour at its boundary, not a test that CRIU works."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import resource
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import ckptcli
from ckptcli.adapters.generic import Redactor
from ckptcli.adapters.process import criu as criu_mod
from ckptcli.adapters.process import procfs
from ckptcli.adapters.process.adapter import Capture, ProcessAdapter, freeze_modes
from ckptcli.adapters.process.criu import CriuError, criu_status, dump, dump_args, reason_of, restore_args
from ckptcli.adapters.process.procfs import (
    KernelThreadError,
    Limits,
    NotOurProcessError,
    ProcessGoneError,
    check_pid,
    describe,
    parse_limits,
    parse_stat,
)
from ckptcli.api import open_checkpoint
from ckptcli.errors import CkptError, ConflictError, InvalidInputError, NotFoundError, StoreIOError, UnsafePathError, UsageError
from ckptcli.store.repository import Store
from tests.conftest import run_ckpt

OPENAI_KEY = "sk-proj-" + "Zq9Xw8Vu7Ts6Rq5Po4Nm3Lk2"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCY" + "EXAMPLEKEY"
NOTE_TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6"
SECRETS = (OPENAI_KEY, AWS_SECRET, NOTE_TOKEN)

# A program with something of everything /proc shows: a file written in append mode, one
# read from a known offset, a directory, a listening TCP socket, a pipe, two extra threads,
# a child of its own; it prints what it made as one JSON line, then sleeps until killed.
BUSY_CHILD = textwrap.dedent(
    """
    import json, os, socket, subprocess, sys, threading, time
    out = open("out.log", "a"); out.write("x" * 1234); out.flush()
    src = open("input.bin", "rb"); src.seek(77)
    d = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
    srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
    r, w = os.pipe()
    ev = threading.Event()
    for _ in range(2):
        threading.Thread(target=ev.wait, daemon=True).start()
    kid = subprocess.Popen(["sleep", "300"])
    print(json.dumps({"out": out.fileno(), "src": src.fileno(), "dir": d, "sock": srv.fileno(),
                      "port": srv.getsockname()[1], "r": r, "w": w, "kid": kid.pid}), flush=True)
    time.sleep(300)
    """
)


# -- processes ------------------------------------------------------------------------------------


class Children:
    """Starts real child processes, each in its own session, and kills every one (with its
    process group) and reaps it at the end of the test, whatever happened."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, argv: list[str], *, ready: bool = False, **kwargs: Any) -> tuple[subprocess.Popen[bytes], Any]:
        kwargs.setdefault("start_new_session", True)
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE if ready else subprocess.DEVNULL, **kwargs)
        self.procs.append(proc)
        info = None
        if ready:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line, f"child {argv[:3]} exited before it was ready (code {proc.wait()})"
            info = json.loads(line)
        return proc, info

    def python(self, code: str, *, ready: bool = True, **kwargs: Any) -> tuple[subprocess.Popen[bytes], Any]:
        return self.start([sys.executable, "-c", code], ready=ready, **kwargs)

    def close(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


@pytest.fixture
def children() -> Iterator[Children]:
    kids = Children()
    try:
        yield kids
    finally:
        kids.close()


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "HOME", "PYTHONPATH")}
    return {**env, **extra}


def _gone_pid() -> int:
    """The PID of a process that ran and was reaped (nothing runs under it now, unless reused
    in between: checked)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    assert not os.path.exists(f"/proc/{proc.pid}")
    return proc.pid


def _one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text and "Traceback" not in text, text
    return text


@pytest.fixture
def busy(tmp_path: Path, children: Children) -> tuple[subprocess.Popen[bytes], dict[str, int], Path]:
    work = tmp_path / "work"
    work.mkdir()
    (work / "input.bin").write_bytes(bytes(range(256)) * 4)

    def lower_nofile() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (777, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    env = _env(OPENAI_API_KEY=OPENAI_KEY, AWS_SECRET_ACCESS_KEY=AWS_SECRET, NOTE=f"deploy with {NOTE_TOKEN} later", PLAIN="hello")
    proc, info = children.python(BUSY_CHILD, cwd=work, env=env, preexec_fn=lower_nofile)
    return proc, info, work


# -- describe -------------------------------------------------------------------------------------


def test_describe_shows_what_proc_shows_of_a_real_program(busy: tuple[subprocess.Popen[bytes], dict[str, int], Path]) -> None:
    proc, info, work = busy
    work = Path(os.path.realpath(work))  # as the kernel reports it, should /tmp be a link
    d = describe(proc.pid)
    assert d["pid"] == proc.pid and d["pgid"] == proc.pid and d["sid"] == proc.pid  # its own session
    assert d["ppid"] == os.getpid()
    assert d["argv"][0] == sys.executable and d["argv"][1] == "-c"
    assert d["exe"] == os.path.realpath(sys.executable)
    assert d["cwd"] == str(work) and d["root"] == "/"
    assert d["uid"]["real"] == os.getuid() and d["gid"]["effective"] == os.getegid()
    assert d["threads"] == 3 and d["children"] == [info["kid"]]
    assert d["state"] in ("S", "R")
    assert d["limits"]["max_open_files"] == {"soft": 777, "hard": resource.getrlimit(resource.RLIMIT_NOFILE)[1], "units": "files"}
    assert d["start_ticks"] > 0 and d["started_at"].endswith("Z")
    with open(f"/proc/{proc.pid}/cgroup") as fh:
        assert [c["path"] for c in d["cgroups"]] == [line.rstrip("\n").split(":", 2)[2] for line in fh]
    fds = {f["fd"]: f for f in d["fds"]}
    assert d["fd_count"] == len(fds) and d["truncated"] == [] and d["vanished"] == []
    out = fds[info["out"]]
    assert out["kind"] == "file" and out["path"] == str(work / "out.log") and out["pos"] == 1234
    assert out["flags"][0] == "w" and "append" in out["flags"]
    src = fds[info["src"]]
    assert src["path"] == str(work / "input.bin") and src["pos"] == 77 and src["flags"][0] == "r"
    assert fds[info["dir"]]["kind"] == "directory" and fds[info["dir"]]["path"] == str(work)
    sock = fds[info["sock"]]
    assert sock["kind"] == "socket" and sock["proto"] == "tcp" and sock["state"] == "listen"
    assert sock["local"] == f"127.0.0.1:{info['port']}"
    assert fds[info["r"]]["kind"] == "pipe" and fds[info["w"]]["kind"] == "pipe"
    assert fds[info["r"]]["inode"] == fds[info["w"]]["inode"] and fds[info["w"]]["flags"][0] == "w"


def test_secrets_in_the_environment_are_redacted_and_recorded_by_name_and_rule(
    busy: tuple[subprocess.Popen[bytes], dict[str, int], Path],
) -> None:
    proc, _, _ = busy
    d = describe(proc.pid)
    env = d["environ"]
    assert env["OPENAI_API_KEY"] == "[REDACTED:secret-key]"
    assert env["AWS_SECRET_ACCESS_KEY"] == "[REDACTED:secret-key]"
    assert env["NOTE"] == "deploy with [REDACTED:github-token] later" and env["PLAIN"] == "hello"
    redacted = {r["path"]: r["rule"] for r in d["redaction"]["redacted"]}
    assert redacted == {
        "/ext/process/environ/OPENAI_API_KEY": "secret-key",
        "/ext/process/environ/AWS_SECRET_ACCESS_KEY": "secret-key",
        "/ext/process/environ/NOTE": "github-token",
    }
    assert d["redaction"]["rules"] == Redactor().fingerprint
    text = json.dumps(d)
    assert not any(s in text for s in SECRETS)
    # the rules are the generic adapter's, extra ones included; off only when asked
    mine = describe(proc.pid, redactor=Redactor(extra_keys={"plain": r"(?i)^plain$"}))
    assert mine["environ"]["PLAIN"] == "[REDACTED:plain]"
    assert describe(proc.pid, redact=False)["environ"]["OPENAI_API_KEY"] == OPENAI_KEY


def test_a_secret_on_the_command_line_is_redacted_too(children: Children, tmp_path: Path) -> None:
    code = "import sys, time; print('{}', flush=True); time.sleep(300)"
    proc, _ = children.start([sys.executable, "-c", code, "--token", OPENAI_KEY], ready=True)
    d = describe(proc.pid)
    assert d["argv"][-1] == "[REDACTED:openai-key]"
    assert {"path": "/ext/process/argv/4", "rule": "openai-key"} in d["redaction"]["redacted"]
    # options named like secrets hide their values, whatever the values look like
    args = ["--password", "hunter2", "--db-token=plain-value", "--verbose", "--name", "job", "-api_key", "abc", "--token", "--x"]
    proc, _ = children.start([sys.executable, "-c", code, *args], ready=True)
    d = describe(proc.pid)
    assert d["argv"][3:] == [
        "--password", "[REDACTED:secret-key]", "--db-token=[REDACTED:secret-key]", "--verbose", "--name", "job",
        "-api_key", "[REDACTED:secret-key]", "--token", "--x",
    ]  # fmt: skip
    argv_paths = [r["path"] for r in d["redaction"]["redacted"] if "/argv/" in r["path"]]
    assert argv_paths == ["/ext/process/argv/4", "/ext/process/argv/5", "/ext/process/argv/10"]
    assert "hunter2" not in json.dumps(d) and "plain-value" not in json.dumps(d)


def test_ckpt_capture_process_redacts_the_usual_secret_names_and_headers_and_keeps_the_working_directory(
    children: Children, tmp_path: Path
) -> None:
    # an outside tester's list: each of these was stored in clear, and PWD was hidden as a secret
    secrets = {
        "PGPASSWORD": "pgpw-in-clear",
        "DB_PASS": "dbp-in-clear",
        "AUTH": "Bearer_eyJabc-in-clear",
        "SLACK_WEBHOOK": "https://hooks.slack.com/services/T0/B0/hook-in-clear",
        "GITHUB_TOKEN": "gh-in-clear",
        "MYSECRET": "mine-in-clear",
        "DB_PWD": "dbpwd-in-clear",
    }
    plain = {"PWD": str(tmp_path), "OLDPWD": "/tmp", "BYPASS": "yes", "MAX_TOKENS": "512"}
    args = ["-H", "Authorization: Bearer tok", "--note", "Bearer abcdefgh1", "see https://hooks.slack.com/services/T1/B1/argv-hook now"]
    code = "import sys, time; print('{}', flush=True); time.sleep(300)"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **secrets, **plain}
    proc, _ = children.start([sys.executable, "-c", code, *args], ready=True, env=env, cwd=tmp_path)
    store = tmp_path / "store"
    ckptcli.init_store(store)
    r = run_ckpt("capture", "process", str(proc.pid), "-S", "process:leaky", "--json", "--store", store)
    assert r.returncode == 0, r.stderr
    r = run_ckpt("show", "process:leaky", "--section", "ext:process", "--json", "--store", store)
    assert r.returncode == 0, r.stderr
    shown = json.loads(r.stdout)
    section = shown.get("value", shown)
    cat = run_ckpt("cat", "process:leaky", "--store", store).stdout.decode()
    for value in [*secrets.values(), "Bearer tok", "abcdefgh1", "argv-hook"]:
        assert value not in cat and value not in r.stdout.decode(), value
    for name in secrets:
        assert section["environ"][name] == "[REDACTED:secret-key]", name
    assert {k: section["environ"][k] for k in plain} == plain
    assert section["argv"][3:] == [
        "-H", "[REDACTED:authorization-header]", "--note", "[REDACTED:bearer-token]", "see [REDACTED:slack-webhook] now",
    ]  # fmt: skip
    red = json.loads(run_ckpt("show", "process:leaky", "--section", "ext:ckpt.redaction", "--json", "--store", store).stdout)
    redacted = {r["path"]: r["rule"] for r in red.get("value", red)["redacted"]}
    assert redacted == {
        **{f"/ext/process/environ/{k}": "secret-key" for k in secrets},
        "/ext/process/argv/4": "authorization-header",
        "/ext/process/argv/6": "bearer-token",
        "/ext/process/argv/7": "slack-webhook",
    }


def test_stat_and_limits_parsers() -> None:
    st = parse_stat("42 (a (weird) name) S 1 42 42 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 3 0 777 0 0")
    assert st["comm"] == "a (weird) name" and st["ppid"] == 1 and st["num_threads"] == 3 and st["starttime"] == 777
    text = (
        "Limit                     Soft Limit           Hard Limit           Units     \n"
        "Max open files            1024                 4096                 files     \n"
        "Max cpu time              unlimited            unlimited            seconds   \n"
        "Max nice priority         0                    0                    \n"
    )
    assert parse_limits(text) == {
        "max_open_files": {"soft": 1024, "hard": 4096, "units": "files"},
        "max_cpu_time": {"soft": None, "hard": None, "units": "seconds"},
        "max_nice_priority": {"soft": 0, "hard": 0, "units": ""},
    }
    assert parse_limits("") == {}


# -- bounded reads --------------------------------------------------------------------------------


def _big_stack() -> None:
    # ARG_MAX is a quarter of the stack limit at exec: room for megabytes of environment
    resource.setrlimit(resource.RLIMIT_STACK, (256 << 20, resource.getrlimit(resource.RLIMIT_STACK)[1]))


def test_megabytes_of_environment_and_command_line_are_cut_at_the_cap(children: Children) -> None:
    piece = "v" * (100 << 10)  # one environment string may not pass 128 KiB (MAX_ARG_STRLEN)
    env = _env(**{f"BIG_{i:02d}": piece for i in range(40)}, OPENAI_API_KEY=OPENAI_KEY)
    args = ["a" * (100 << 10) for _ in range(10)]  # 5 MB in all: under the kernel's 6 MB cap on exec's strings
    code = "import time; print('{}', flush=True); time.sleep(300)"
    try:
        proc, _ = children.start([sys.executable, "-c", code, *args], ready=True, env=env, preexec_fn=_big_stack)
    except OSError as exc:  # E2BIG: a kernel that will not give this much room
        pytest.skip(f"the kernel refuses a 4 MB environment here: {exc}")
    with open(f"/proc/{proc.pid}/environ", "rb") as fh:
        assert len(fh.read()) > 4_000_000  # the real thing is that large
    d = describe(proc.pid)
    assert "environ" in d["truncated"] and "argv" in d["truncated"]
    assert sum(len(k) + len(v) + 2 for k, v in d["environ"].items()) <= procfs.DEFAULT_LIMITS.environ_bytes
    assert all(v == piece for k, v in d["environ"].items() if k.startswith("BIG_"))  # a cut value is left out, not halved
    assert sum(len(a) + 1 for a in d["argv"]) <= procfs.DEFAULT_LIMITS.cmdline_bytes + 200
    assert d["argv"][-1].startswith("[truncated: more than")
    small = describe(proc.pid, limits=Limits(environ_vars=5))
    assert len(small["environ"]) == 5 and "environ" in small["truncated"]


def test_thousands_of_open_files_are_cut_at_the_cap(children: Children, tmp_path: Path) -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 6000:
        pytest.skip(f"the open-files hard limit here is {hard}, fewer than the 6000 this test opens")
    code = textwrap.dedent(
        """
        import os, resource, time
        resource.setrlimit(resource.RLIMIT_NOFILE, (6100, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        fds = [os.open(os.devnull, os.O_RDONLY) for _ in range(6000)]
        print('{}', flush=True); time.sleep(300)
        """
    )
    proc, _ = children.python(code)
    d = describe(proc.pid)
    assert d["fd_count"] >= 6000 and len(d["fds"]) == procfs.DEFAULT_LIMITS.fds and "fds" in d["truncated"]
    assert len(describe(proc.pid, limits=Limits(fds=10))["fds"]) == 10


def test_a_huge_file_is_read_up_to_its_cap_and_no_further(tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.write_bytes(b"y" * (5 << 20))
    data, more = procfs._read(str(big), 1 << 20)
    assert len(data) == 1 << 20 and more
    data, more = procfs._read(str(big), 6 << 20)
    assert len(data) == 5 << 20 and not more


# -- hostile PIDs ---------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [0, -1, -4242, "abc", "12a", "", " ", "1e3", "٣", True, 2**40])
def test_a_pid_that_is_not_a_process_is_one_line(bad: object) -> None:
    with pytest.raises((InvalidInputError, ProcessGoneError)) as err:
        describe(bad)
    _one_line(err.value)
    assert err.value.exit_code in (4, 3)
    if bad != 2**40:
        assert err.value.exit_code == 4


def test_a_pid_that_is_gone_is_one_line_exit_3() -> None:
    pid = _gone_pid()
    with pytest.raises(ProcessGoneError) as err:
        describe(pid)
    assert _one_line(err.value).startswith(f"process {pid} does not exist") and err.value.exit_code == 3
    with pytest.raises(ProcessGoneError):
        ProcessAdapter().capture(str(pid))


def test_a_zombie_is_gone(children: Children) -> None:
    proc, _ = children.start([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while parse_stat(Path(f"/proc/{proc.pid}/stat").read_text())["state"] != "Z":  # exited, not reaped
        assert time.monotonic() < deadline
        time.sleep(0.01)
    with pytest.raises(ProcessGoneError) as err:
        describe(proc.pid)
    assert "zombie" in _one_line(err.value) and err.value.exit_code == 3


def test_ckpts_own_pid_is_refused() -> None:
    with pytest.raises(InvalidInputError) as err:
        describe(os.getpid())
    assert "this ckpt process itself" in _one_line(err.value) and err.value.exit_code == 4


def test_a_thread_id_is_not_a_process(busy: tuple[subprocess.Popen[bytes], dict[str, int], Path]) -> None:
    proc, _, _ = busy
    tids = sorted(int(t) for t in os.listdir(f"/proc/{proc.pid}/task") if int(t) != proc.pid)
    assert len(tids) == 2
    with pytest.raises(InvalidInputError) as err:
        describe(tids[0])
    assert _one_line(err.value).startswith(f"{tids[0]} is a thread of process {proc.pid} (python") and err.value.exit_code == 4


def _kernel_threads() -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                st = parse_stat(Path(f"/proc/{name}/stat").read_text())
            except (OSError, ValueError):
                continue
            if st["flags"] & procfs.PF_KTHREAD:
                found.append(int(name))
    return sorted(found)


def test_a_kernel_thread_is_refused() -> None:
    threads = _kernel_threads()
    if not threads:
        pytest.skip("no kernel thread is visible here (a PID namespace of its own, as in most containers)")
    for pid in [threads[0], threads[-1]]:
        with pytest.raises(KernelThreadError) as err:
            describe(pid)
        assert "is a kernel thread" in _one_line(err.value) and err.value.exit_code == 4


def _nobody() -> int:
    import pwd

    try:
        return pwd.getpwnam("nobody").pw_uid
    except KeyError:
        pytest.skip("no user `nobody` here")


def test_another_users_process_is_refused(children: Children) -> None:
    """A real process run as `nobody` (setpriv). As root the kernel would let ckpt read it:
    ckpt refuses by rule, and `other_users=True` is how an administrator asks for it."""
    if os.geteuid() != 0:
        proc1 = check_pid  # a non-root user: PID 1 belongs to root
        with pytest.raises(NotOurProcessError) as err:
            proc1(1)
        assert "belongs to uid 0" in _one_line(err.value)
        return
    setpriv = next((p for p in ("/usr/bin/setpriv", "/bin/setpriv") if os.path.exists(p)), None)
    if setpriv is None:
        pytest.skip("no setpriv here to run a process as nobody")
    uid = _nobody()
    proc, _ = children.start([setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "sleep", "300"])
    deadline = time.monotonic() + 30
    while os.stat(f"/proc/{proc.pid}").st_uid != uid or Path(f"/proc/{proc.pid}/comm").read_text().strip() != "sleep":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    with pytest.raises(NotOurProcessError) as err:
        describe(proc.pid)
    text = _one_line(err.value)
    assert f"process {proc.pid} (sleep) belongs to uid {uid} (nobody), not to this user (uid 0)" in text and err.value.exit_code == 4
    assert describe(proc.pid, other_users=True)["uid"]["real"] == uid


def test_the_kernel_refusing_a_read_is_the_same_one_line(children: Children, tmp_path: Path) -> None:
    """A forked child that drops to `nobody` asks for a root process with other_users=True:
    the kernel refuses /proc/PID/environ (EACCES) and describe says so in one line."""
    if os.geteuid() != 0:
        pytest.skip("needs root, to drop to another user in a forked child")
    uid = _nobody()
    target, _ = children.start(["sleep", "300"])
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            try:
                describe(target.pid, other_users=True)
                msg = {"raised": None}
            except CkptError as exc:
                msg = {"raised": type(exc).__name__, "text": str(exc), "code": int(exc.exit_code)}
            os.write(w, json.dumps(msg).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        got = json.loads(fh.read() or b"{}")
    os.waitpid(pid, 0)
    assert got.get("raised") == "NotOurProcessError", got
    assert "the kernel refuses to let this user read /proc/" in got["text"] and got["code"] == 4 and "\n" not in got["text"]


# -- races ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("at", ["cmdline", "environ", "fd", "limits", "cgroup", "children"])
def test_a_process_that_exits_while_it_is_described_is_gone(children: Children, monkeypatch: pytest.MonkeyPatch, at: str) -> None:
    """The child is killed and reaped just before describe reads `at`: every stage of the
    description meets a process that is no longer there, and each is one ProcessGoneError."""
    proc, _ = children.python("import time; print('{}', flush=True); time.sleep(300)")
    real_read, real_listdir = procfs._read, os.listdir

    def kill_first() -> None:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    def read(path: str, cap: int) -> tuple[bytes, bool]:
        if path.endswith("/" + at):
            kill_first()
        return real_read(path, cap)

    def listdir(path: Any = ".") -> list[str]:
        if at in ("fd", "children") and str(path).endswith({"fd": "/fd", "children": "/task"}[at]):
            kill_first()
        return real_listdir(path)

    monkeypatch.setattr(procfs, "_read", read)
    monkeypatch.setattr(procfs.os, "listdir", listdir)
    with pytest.raises(ProcessGoneError) as err:
        describe(proc.pid)
    assert f"process {proc.pid} exited while it was described" == _one_line(err.value).split(";")[0]
    assert proc.returncode == -signal.SIGKILL


def test_another_error_of_the_system_is_one_line_exit_12(children: Children, monkeypatch: pytest.MonkeyPatch) -> None:
    """An I/O error reading /proc (injected: the kernel gives none on demand) is StoreIOError."""
    proc, _ = children.python("import time; print('{}', flush=True); time.sleep(300)")
    real_read = procfs._read

    def read(path: str, cap: int) -> tuple[bytes, bool]:
        if path.endswith("/limits"):
            raise OSError(errno.EIO, os.strerror(errno.EIO), path)
        return real_read(path, cap)

    monkeypatch.setattr(procfs, "_read", read)
    with pytest.raises(StoreIOError) as err:
        describe(proc.pid)
    assert _one_line(err.value).startswith(f"cannot read /proc/{proc.pid} (python") and err.value.exit_code == 12


def test_describe_races_processes_that_exit_and_descriptors_that_close(children: Children) -> None:
    """60 children that exit after a moment, each reaped at once by a thread (so the PID
    disappears mid-read), described until they are gone; and one program that opens and
    closes descriptors as fast as it can, described 30 times. Every outcome is a complete
    description or ProcessGoneError; nothing else escapes."""
    outcomes = {"described": 0, "gone": 0}
    for i in range(60):
        proc = subprocess.Popen(
            [sys.executable, "-c", f"import time; time.sleep({(i % 6) * 0.004})"], stdin=subprocess.DEVNULL, start_new_session=True
        )
        reaper = threading.Thread(target=proc.wait)
        reaper.start()
        try:
            while True:
                try:
                    d = describe(proc.pid)
                except ProcessGoneError:
                    outcomes["gone"] += 1
                    break
                assert d["pid"] == proc.pid and isinstance(d["fds"], list) and isinstance(d["environ"], dict)
                outcomes["described"] += 1
        finally:
            if reaper.is_alive():  # only when an assertion failed before the child was gone
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
            reaper.join()
    assert outcomes["gone"] == 60
    churn = textwrap.dedent(
        """
        import os
        print('{}', flush=True)
        while True:
            fds = [os.open(os.devnull, os.O_RDONLY) for _ in range(50)]
            for fd in fds:
                os.close(fd)
        """
    )
    proc, _ = children.python(churn)
    for _ in range(30):
        d = describe(proc.pid)
        for f in d["fds"]:
            assert {"fd", "kind", "pos", "flags"} <= set(f)
        assert all(v.isdigit() for v in d["vanished"])


# -- the adapter ----------------------------------------------------------------------------------


def test_available_here_with_freeze_modes_and_criu_reason() -> None:
    a = ProcessAdapter.available()
    freeze = a.details["freeze"]
    assert a.ok and a.reason.startswith("Linux with /proc; freeze: ") and "sigstop" in a.reason
    assert ("CRIU: `criu check` passes" if a.details["criu"]["ok"] else f"CRIU not usable: {a.details['criu']['reason']}") in a.reason
    assert set(freeze) == {"cgroup", "freezer", "sigstop"} and freeze["sigstop"].startswith("usable:")
    assert all(v.startswith(("usable:", "not usable:")) for v in freeze.values())
    assert (a.details["criu"]["ok"], a.details["criu"]["reason"]) == criu_status()
    assert ProcessAdapter.name == "process" and ProcessAdapter.kind == "process" and ProcessAdapter.summary
    assert [(o.name, o.multiple) for o in ProcessAdapter.options] == [
        ("state", True),
        ("freeze", False),
        ("timeout", False),
        ("criu", False),
    ]
    assert set(ProcessAdapter().reducers()) == {"process:start", "process:checkpoint", "process:exit", "process:restart", "process:bad"}
    assert ProcessAdapter().importers() == {}


def test_freeze_probe_reads_this_machines_mounts() -> None:
    modes = freeze_modes()
    with open("/proc/self/mountinfo") as fh:
        types = [line.split(" - ")[1].split()[0] for line in fh if " - " in line]
    if "cgroup2" not in types:
        assert modes["cgroup"] == "not usable: no cgroup v2 mount"
    else:
        assert "cgroup v2" in modes["cgroup"]


def test_capture_take_and_show_json_round_trip(busy: tuple[subprocess.Popen[bytes], dict[str, int], Path], tmp_path: Path) -> None:
    proc, _, work = busy
    (work / "state.json").write_text('{"step": 41}')
    (work / "data").mkdir()
    (work / "data" / "part-0").write_bytes(b"\x00\x01" * 5000)
    store = ckptcli.init_store(tmp_path / "store")
    res = ProcessAdapter().take(store, proc.pid, subject="process:job", state=[work / "state.json", str(work / "data")])
    expected = describe(proc.pid)
    expected.pop("redaction")
    r = run_ckpt("show", "process:job", "--section", "ext:process", "--json", "--store", store.directory)
    assert r.returncode == 0, r.stderr
    shown = json.loads(r.stdout)
    section = shown.get("value", shown)
    for key in expected:
        if key != "state":  # S or R: it may be running a moment
            assert section[key] == expected[key], key
    assert section["state_paths"] == [{"blob": "state0", "path": str(work / "state.json")}, {"blob": "state1", "path": str(work / "data")}]
    r = run_ckpt("show", "process:job", "--json", "--store", store.directory)
    meta = json.loads(r.stdout)
    labels = meta["labels"]
    assert labels["process.pid"] == str(proc.pid) and labels["process.exe"] == os.path.realpath(sys.executable)
    assert labels["process.how"] == "sigstop" and labels["process.consistency"] == "crash" and labels["redacted"] == "3"
    assert meta["id"] == res.hex
    r = run_ckpt("cat", "process:job", "--store", store.directory)
    assert r.returncode == 0 and b"[REDACTED:secret-key]" in r.stdout
    assert not any(s.encode() in r.stdout for s in SECRETS)
    red = json.loads(run_ckpt("show", "process:job", "--section", "ext:ckpt.redaction", "--json", "--store", store.directory).stdout)
    assert {"path": "/ext/process/environ/OPENAI_API_KEY", "rule": "secret-key"} in red.get("value", red)["redacted"]
    # the state comes back into a directory of its own
    assert labels["adapter"] == "process"
    ck = open_checkpoint("process:job", store)
    with pytest.raises(UsageError, match="restore has no option 'colour'"):
        ProcessAdapter().restore(ck, tmp_path / "restored", colour="red")
    assert not (tmp_path / "restored").exists()
    # capture's options are accepted as the conformance suite passes them, and play no part
    out = ProcessAdapter().restore(ck, tmp_path / "restored", state=(work / "elsewhere",), freeze="auto", timeout=3.0, criu=False)
    assert out["blobs"] == ["state0", "state1"] and out["paths"]["state0"] == str(work / "state.json")
    assert (tmp_path / "restored" / "state0").read_text() == '{"step": 41}'
    assert (tmp_path / "restored" / "state1" / "part-0").read_bytes() == b"\x00\x01" * 5000


def test_restore_writes_nothing_outside_the_target_and_follows_no_symlink(tmp_path: Path, children: Children) -> None:
    """Symbolic links planted in the target where the state file and the state directory go
    (one to a file outside, one to a directory outside): refused without overwrite, replaced
    (not followed) with it; nothing outside the target changes."""
    proc, _ = children.python("import time; print('{}', flush=True); time.sleep(300)")
    state = tmp_path / "state.txt"
    state.write_text("mine")
    (tmp_path / "sdir").mkdir()
    (tmp_path / "sdir" / "inner").write_text("deep")
    store = ckptcli.init_store(tmp_path / "store")
    ProcessAdapter().take(store, proc.pid, subject="process:s", state=[state, tmp_path / "sdir"])
    ck = open_checkpoint("process:s", store)
    outside = tmp_path / "outside.txt"
    outside.write_text("untouched")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = tmp_path / "target"
    target.mkdir()
    (target / "state0").symlink_to(outside)
    (target / "state1").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(ConflictError):
        ProcessAdapter().restore(ck, target)
    assert outside.read_text() == "untouched" and list(elsewhere.iterdir()) == []
    ProcessAdapter().restore(ck, target, overwrite=True)
    assert outside.read_text() == "untouched" and list(elsewhere.iterdir()) == []
    assert not (target / "state0").is_symlink() and (target / "state0").read_text() == "mine"
    assert not (target / "state1").is_symlink() and (target / "state1" / "inner").read_text() == "deep"


def test_restore_of_a_checkpoint_the_adapter_did_not_take(store: Store, tmp_path: Path) -> None:
    ckptcli.take(store, {"memory": [1]}, subject="agent:a")
    with pytest.raises(InvalidInputError) as err:
        ProcessAdapter().restore(open_checkpoint("agent:a", store), tmp_path / "t")
    assert "was not taken by the process adapter" in _one_line(err.value)


def test_declared_state_paths_are_checked(tmp_path: Path, children: Children) -> None:
    proc, _ = children.python("import time; print('{}', flush=True); time.sleep(300)")
    real = tmp_path / "real"
    real.mkdir()
    (real / "f").write_text("x")
    (tmp_path / "link").symlink_to(real, target_is_directory=True)
    os.mkfifo(tmp_path / "fifo")
    a = ProcessAdapter()
    with pytest.raises(UnsafePathError) as err:
        a.capture(proc.pid, state=[tmp_path / "link" / "f"])
    assert f"{tmp_path / 'link'} is a symbolic link" in _one_line(err.value) and err.value.exit_code == 8
    with pytest.raises(UnsafePathError):
        a.capture(proc.pid, state=[tmp_path / "link"])
    with pytest.raises(NotFoundError) as nf:
        a.capture(proc.pid, state=[tmp_path / "nope"])
    assert nf.value.exit_code == 3
    with pytest.raises(InvalidInputError, match="neither a regular file nor a directory"):
        a.capture(proc.pid, state=[tmp_path / "fifo"])
    cap = a.capture(proc.pid, state=[real / "f", real])
    assert cap.blobs == {"state0": real / "f", "state1": real}


def test_options_and_freeze_modes_are_checked(children: Children, tmp_path: Path) -> None:
    proc, _ = children.python("import time; print('{}', flush=True); time.sleep(300)")
    a = ProcessAdapter()
    for bad, match in [
        ({"colour": "red"}, "no option 'colour'"),
        ({"freeze": "thaw"}, "is not a freeze mode"),
        ({"timeout": 0}, "positive"),
    ]:
        with pytest.raises(UsageError, match=match) as err:
            a.capture(proc.pid, **bad)
        assert err.value.exit_code == 2 and _one_line(err.value)
    store = ckptcli.init_store(tmp_path / "store")
    with pytest.raises(UsageError) as err:
        a.take(store, proc.pid, subject="process:x", freeze="cgroup")
    assert err.value.exit_code == 2 and "not a program already running" in _one_line(err.value)
    assert store.manifest_ids() == []  # nothing taken


def test_take_runs_inside_the_freezer_it_is_given(children: Children, tmp_path: Path) -> None:
    """The freezer hook (the supervisor's freeze module is wired in here at merge): a real
    SIGSTOP of the child's process group, held while /proc is read and the state taken."""
    proc, _ = children.python("import time; print('{}', flush=True); time.sleep(300)")
    seen: list[str] = []

    @contextlib.contextmanager
    def sigstop(pid: int, mode: str, timeout: float) -> Iterator[str]:
        os.killpg(os.getpgid(pid), signal.SIGSTOP)
        deadline = time.monotonic() + timeout
        while parse_stat(Path(f"/proc/{pid}/stat").read_text())["state"] != "T":
            assert time.monotonic() < deadline
            time.sleep(0.001)
        try:
            yield "sigstop"
        finally:
            os.killpg(os.getpgid(pid), signal.SIGCONT)

    def freezer(pid: int, mode: str, timeout: float) -> contextlib.AbstractContextManager[str]:
        seen.append(f"{pid} {mode} {timeout}")
        return sigstop(pid, mode, timeout)

    store = ckptcli.init_store(tmp_path / "store")
    (tmp_path / "s").write_text("1")
    res = ProcessAdapter(freezer=freezer).take(store, proc.pid, subject="process:f", state=[tmp_path / "s"], timeout=5)
    assert seen == [f"{proc.pid} auto 5"]
    ck = open_checkpoint(res.hex, store)
    assert ck.manifest.labels["process.how"] == "sigstop"
    assert ck.section("ext:process")["state_paths"] == [{"blob": "state0", "path": str(tmp_path / "s")}]
    assert ck.section("ext:process")["state"] == "T"  # /proc was read while it was stopped
    assert parse_stat(Path(f"/proc/{proc.pid}/stat").read_text())["state"] != "T"  # and it runs again


def test_the_default_freezer_stops_the_program_s_group_while_it_is_taken(children: Children, tmp_path: Path) -> None:
    """Without a freezer given, auto is freeze.hold: SIGSTOP of the program's own process
    group while /proc is read and its state taken, SIGCONT after; with --freeze none the
    checkpoint says it is not consistent (consistency none)."""
    proc, _ = children.python("import time; print('{}', flush=True); time.sleep(300)")
    store = ckptcli.init_store(tmp_path / "store")
    (tmp_path / "s").write_text("1")
    res = ProcessAdapter().take(store, proc.pid, subject="process:f", state=[tmp_path / "s"])
    ck = open_checkpoint(res.hex, store)
    assert (ck.manifest.labels["process.how"], ck.manifest.labels["process.consistency"]) == ("sigstop", "crash")
    assert ck.section("ext:process")["state"] == "T"  # read while stopped
    assert parse_stat(Path(f"/proc/{proc.pid}/stat").read_text())["state"] != "T"  # running again
    res = ProcessAdapter().take(store, proc.pid, subject="process:f", state=[tmp_path / "s"], freeze="none")
    labels = open_checkpoint(res.hex, store).manifest.labels
    assert (labels["process.how"], labels["process.consistency"]) == ("none", "none")


def test_a_program_in_ckpt_s_own_process_group_is_not_stopped(tmp_path: Path) -> None:
    """Stopping the group of a program that shares ckpt's would stop ckpt itself: one line, nothing taken."""
    from ckptcli.adapters.process.freeze import FreezeError

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        store = ckptcli.init_store(tmp_path / "store")
        with pytest.raises(FreezeError) as err:
            ProcessAdapter().take(store, proc.pid, subject="process:same")
        assert "ckpt's own process group" in _one_line(err.value)
        assert store.manifest_ids() == []
        assert parse_stat(Path(f"/proc/{proc.pid}/stat").read_text())["state"] != "T"
    finally:
        proc.kill()
        proc.wait()


def test_a_program_in_process_group_0_is_not_stopped_as_a_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PID 1 of a container has process group 0, and killpg(0, SIGSTOP) is ckpt's own group:
    refused in one line before any signal is sent (ckpt stopped itself and hung)."""
    from ckptcli.adapters.process import freeze
    from ckptcli.adapters.process.freeze import FreezeError

    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(freeze.os, "getpgid", lambda pid: 0)
    monkeypatch.setattr(freeze.os, "killpg", lambda pgid, sig: sent.append((pgid, sig)))
    store = ckptcli.init_store(tmp_path / "store")
    with pytest.raises(FreezeError) as err:
        ProcessAdapter().take(store, 1, subject="process:init", timeout=3)
    assert "no process group of its own" in _one_line(err.value) and "--freeze none" in (err.value.hint or "")
    assert sent == [] and store.manifest_ids() == []


# -- CRIU -----------------------------------------------------------------------------------------

VDSO_OUTPUT = """\
Error (criu/util.c:642): exited, status=1
Error (criu/vdso.c:381): vdso: Unexpected rt vDSO area bounds
Error (criu/vdso.c:613): vdso: Failed to fill self vdso symtable
Error (criu/kerndat.c:1615): kerndat_vdso_fill_symtable failed when initializing kerndat.
Error (criu/crtools.c:260): Could not initialize kernel features detection.
"""


@pytest.fixture
def fake_criu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], Path]:
    """Put a fake `criu` (a shell script with the given body) first on PATH; it appends its
    arguments to calls.log beside it. Returns the directory."""
    bindir = tmp_path / "fakebin"
    bindir.mkdir()

    def make(body: str) -> Path:
        script = bindir / "criu"
        script.write_text(f'#!/bin/sh\necho "$@" >> "{bindir}/calls.log"\n{body}\n')
        script.chmod(0o755)
        return bindir

    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    return make


def test_criu_status_with_the_real_criu_or_none() -> None:
    ok, reason = criu_status()
    assert reason and "\n" not in reason
    if criu_mod.find_criu() is None:
        assert (ok, reason) == (False, "criu is not installed (no `criu` on PATH)")
    elif not ok:
        assert reason.startswith(("`criu check` fails (exit", "`criu check` did not finish"))


def test_criu_status_when_not_installed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert criu_status() == (False, "criu is not installed (no `criu` on PATH)")
    with pytest.raises(CriuError, match="criu is not installed") as err:
        criu_mod.restore(tmp_path)
    assert err.value.exit_code == 1


def test_criu_check_failure_gives_criu_s_own_reason(fake_criu: Callable[[str], Path]) -> None:
    fake_criu(f"cat >&2 <<'EOF'\n{VDSO_OUTPUT}EOF\nexit 1")
    assert criu_status() == (False, "`criu check` fails (exit 1): vdso: Unexpected rt vDSO area bounds")
    assert reason_of("nothing useful\nlast words\n") == "last words" and reason_of("") == "no output"


def test_criu_check_that_hangs_is_killed_with_its_children(fake_criu: Callable[[str], Path]) -> None:
    d = fake_criu('sleep 300 & echo $! > "$(dirname "$0")/child.pid"; wait')
    ok, reason = criu_status(timeout=0.5)
    assert (ok, reason) == (False, "`criu check` did not finish in 0.5 s (killed)")
    pid = int((d / "child.pid").read_text())
    deadline = time.monotonic() + 30
    while os.path.exists(f"/proc/{pid}") and parse_stat(Path(f"/proc/{pid}/stat").read_text())["state"] != "Z":
        assert time.monotonic() < deadline, "the fake criu's child survived the timeout"
        time.sleep(0.01)


def test_criu_check_that_floods_its_output_is_read_bounded(fake_criu: Callable[[str], Path]) -> None:
    fake_criu("head -c 30000000 /dev/zero | tr '\\0' 'x'; echo; echo 'Error (criu/x.c:1): the real reason'; exit 3")
    ok, reason = criu_status()
    assert not ok and reason == "`criu check` fails (exit 3): the real reason"


def test_criu_check_that_passes(fake_criu: Callable[[str], Path]) -> None:
    fake_criu('if [ "$1" = --version ]; then echo "Version: 9.9"; exit 0; fi; echo "Looks good."')
    assert criu_status() == (True, "criu check passed (criu 9.9)")


def test_criu_command_lines() -> None:
    assert dump_args(42, "/tmp/img") == [
        "criu",
        "dump",
        "-t",
        "42",
        "-D",
        "/tmp/img",
        "-o",
        "dump.log",
        "-v4",
        "--shell-job",
        "--leave-running",
    ]
    assert dump_args(42, Path("/i"), leave_running=False, shell_job=False, tcp_established=True, file_locks=True, extra=["--x"]) == [
        "criu", "dump", "-t", "42", "-D", "/i", "-o", "dump.log", "-v4", "--tcp-established", "--file-locks", "--x",
    ]  # fmt: skip
    assert restore_args("/tmp/img") == [
        "criu", "restore", "-D", "/tmp/img", "-o", "restore.log", "-v4", "--pidfile", "restore.pid", "-d", "--shell-job",
    ]  # fmt: skip
    assert restore_args("/i", detach=False, shell_job=False)[-1] == "restore.pid"


def test_criu_dump_failure_is_one_line_with_the_log_s_reason(fake_criu: Callable[[str], Path], children: Children, tmp_path: Path) -> None:
    d = fake_criu(
        'while [ "$1" != -D ]; do shift; done; dir=$2\n'
        "echo 'Error (criu/cr-dump.c:1200): Dumping FAILED.' > \"$dir/dump.log\"\n"
        "echo 'Error (criu/proc_parse.c:7): cannot dump the vdso' >> \"$dir/dump.log\"\nexit 1"
    )
    proc, _ = children.python("import time; print('{}', flush=True); time.sleep(300)")
    with pytest.raises(CriuError) as err:
        dump(proc.pid, tmp_path / "img")
    text = _one_line(err.value)
    assert text.startswith(f"criu dump of process {proc.pid} failed (exit 1): Dumping FAILED.") and err.value.exit_code == 1
    assert (d / "calls.log").read_text().split() == dump_args(proc.pid, tmp_path / "img")[1:]
    # refused before criu runs: a PID that is gone, an image directory that is not empty
    (d / "calls.log").unlink()
    with pytest.raises(ProcessGoneError):
        dump(_gone_pid(), tmp_path / "img2")
    with pytest.raises(InvalidInputError, match="is not empty"):
        dump(proc.pid, tmp_path / "img")
    assert not (d / "calls.log").exists()


def test_criu_images_taken_as_a_blob_and_restored_through_a_fake_criu(
    fake_criu: Callable[[str], Path], children: Children, tmp_path: Path
) -> None:
    """The wiring only: a fake criu writes image files on dump and a pidfile on restore;
    the images go into the checkpoint as blob `criu`, come back into the target and are
    handed to `criu restore`; the temporary image directory is removed after the take."""
    d = fake_criu(
        "cmd=$1; while [ $# -gt 0 ]; do case $1 in -D) dir=$2;; --pidfile) pidfile=$2;; esac; shift; done\n"
        'if [ "$cmd" = dump ]; then printf core > "$dir/core-1.img"; printf pages > "$dir/pages-1.img"; fi\n'
        'if [ "$cmd" = restore ]; then test -f "$dir/core-1.img" || exit 5; echo 4242 > "$pidfile"; fi'
    )
    proc, _ = children.python("import time; print('{}', flush=True); time.sleep(300)")
    store = ckptcli.init_store(tmp_path / "store")
    before = set(Path(os.environ.get("TMPDIR", "/tmp")).glob("ckpt-criu-*"))
    res = ProcessAdapter().take(store, proc.pid, subject="process:c", criu=True)
    assert set(Path(os.environ.get("TMPDIR", "/tmp")).glob("ckpt-criu-*")) == before
    ck = open_checkpoint(res.hex, store)
    assert ck.manifest.labels["process.criu"] == "yes"
    assert {f.path for f in ck.list_files("criu")} >= {"criu/core-1.img", "criu/pages-1.img"}
    out = ProcessAdapter().restore(ck, tmp_path / "back", criu=True)
    assert out["pid"] == 4242 and (tmp_path / "back" / "criu" / "pages-1.img").read_text() == "pages"
    calls = (d / "calls.log").read_text().splitlines()
    assert calls[-1].split() == restore_args(tmp_path / "back" / "criu", pidfile=str(tmp_path / "back" / "criu" / "restore.pid"))[1:]
    with pytest.raises(NotFoundError, match="holds no CRIU images"):
        ProcessAdapter().restore(
            open_checkpoint(ProcessAdapter().take(store, proc.pid, subject="process:d").hex, store), tmp_path / "x", criu=True
        )


def test_capture_removes_criu_s_temporary_directory_when_dump_fails(fake_criu: Callable[[str], Path], children: Children) -> None:
    fake_criu("exit 1")
    proc, _ = children.python("import time; print('{}', flush=True); time.sleep(300)")
    before = set(Path(os.environ.get("TMPDIR", "/tmp")).glob("ckpt-criu-*"))
    with pytest.raises(CriuError):
        ProcessAdapter().capture(proc.pid, criu=True)
    assert set(Path(os.environ.get("TMPDIR", "/tmp")).glob("ckpt-criu-*")) == before


def _criu_works() -> None:
    ok, reason = criu_status()
    if not ok:
        pytest.skip(f"CRIU cannot run here: {reason}")


def test_criu_dump_and_restore_of_a_real_process(children: Children, tmp_path: Path) -> None:
    """Where `criu check` passes: a counting program is dumped (left running), killed, and
    restored from the checkpoint's images; the restored one goes on counting from where the
    dump found it."""
    _criu_works()
    counter = tmp_path / "count.txt"
    code = textwrap.dedent(
        f"""
        import os, sys, time
        os.closerange(3, 1024)
        n = 0
        while True:
            n += 1
            with open({str(counter)!r}, "w") as fh:
                fh.write(str(n))
            time.sleep(0.01)
        """
    )
    proc, _ = children.start([sys.executable, "-c", code], stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not counter.exists() or not counter.read_text():
        time.sleep(0.01)
    store = ckptcli.init_store(tmp_path / "store")
    res = ProcessAdapter().take(store, proc.pid, subject="process:count", criu=True)
    at_dump = int(counter.read_text())
    proc.kill()
    proc.wait()
    out = ProcessAdapter().restore(open_checkpoint(res.hex, store), tmp_path / "back", criu=True)
    try:
        time.sleep(0.3)
        assert int(counter.read_text()) > at_dump
        assert Path(f"/proc/{out['pid']}/stat").exists()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(out["pid"], signal.SIGKILL)


def test_capture_result_shape(children: Children) -> None:
    proc, _ = children.python("import time; print('{}', flush=True); time.sleep(300)", env=_env(GITHUB_TOKEN=NOTE_TOKEN))
    cap = ProcessAdapter().capture(proc.pid)
    assert isinstance(cap, Capture) and set(cap.document) == {"ext"}
    assert set(cap.document["ext"]) == {"process", "ckpt.redaction"} and cap.blobs == {}
    assert cap.document["ext"]["ckpt.redaction"]["redacted"] == [{"path": "/ext/process/environ/GITHUB_TOKEN", "rule": "secret-key"}]
    assert "redaction" not in cap.document["ext"]["process"]
    assert cap.labels["redacted"] == "1" and cap.labels["process.comm"].startswith("python")
