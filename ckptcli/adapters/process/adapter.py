"""`ProcessAdapter`: the adapter that captures a running program by PID (docs/process-capture.md).

`capture(pid, state=[...])` gives the sections (``ext:process``: what /proc shows, from
procfs.describe; ``ext:ckpt.redaction``: what was redacted) and the blobs (each declared
state path as ``state<i>``, the CRIU images as ``criu`` when asked for) of a checkpoint;
`take` takes it into a store, inside a freeze when a freezer is wired in; `restore` writes
a checkpoint's state blobs back into a target directory through the store's blob restore.

Invariants: capture reads, never writes, the program's files; a declared state path is
refused (one line, UnsafePathError) when a component of it is a symbolic link, so the copy
is of the path named and of nothing it points to; restore writes only below its target
and follows no symbolic link there (blobs.restore_blobs); CRIU's temporary image
directory is removed once the take is done, whatever happened.

The class follows the adapter contract (ckptcli/adapters/base.py, docs/adapters.md)."""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ckptcli.adapters.base import Adapter, Availability, Capture, Option
from ckptcli.adapters.generic import REDACTION_NAMESPACE, Redactor
from ckptcli.adapters.process import criu as criu_mod
from ckptcli.adapters.process.procfs import describe
from ckptcli.errors import InvalidInputError, NotFoundError, UnsafePathError, UsageError
from ckptcli.progress import NULL, Progress

if TYPE_CHECKING:
    from ckptcli.checkpoint import Checkpoint
    from ckptcli.store.repository import Store
    from ckptcli.writer import TakeResult

__all__ = ["FREEZE_MODES", "ProcessAdapter", "ProcessCapture", "freeze_modes", "state_blob_name"]

FREEZE_MODES = ("auto", "cgroup", "cgroup2", "freezer", "sigstop", "none")
#: the longest label value this adapter writes (an executable's path can be 4 KiB)
LABEL_MAX = 200

#: (pid, mode, timeout seconds) -> a context manager that holds the process frozen and
#: yields how ("cgroup", "freezer", "sigstop" or "none"); the supervisor's freeze module
#: provides one (wired in by the caller)
Freezer = Callable[[int, str, float], AbstractContextManager[str]]


@dataclass
class ProcessCapture(Capture):
    """The contract's Capture, and temporary paths to remove once it is taken (`cleanup`:
    CRIU's image directory; Adapter.take calls `close`)."""

    cleanup: list[Path] = field(default_factory=list)

    def close(self) -> None:
        """Remove the temporary paths (CRIU's image directory); safe to call twice."""
        while self.cleanup:
            shutil.rmtree(self.cleanup.pop(), ignore_errors=True)


def state_blob_name(index: int) -> str:
    """The blob name of the `index`-th declared state path ("state0", "state1", ... as `ckpt run` names them)."""
    return f"state{index}"


class ProcessAdapter(Adapter):
    """Captures a running program by PID: what /proc shows and the files it declares as its state.

    Args:
        freezer: holds the process still while a checkpoint is taken (see `Freezer`);
            default: freeze.hold (SIGSTOP of its process group for auto and sigstop).
        redactor: the redaction rules for the environment and command line (default:
            the generic adapter's).
    """

    name: ClassVar[str] = "process"
    kind: ClassVar[str] = "process"
    summary: ClassVar[str] = "a running program by PID: /proc's view of it, its declared state files, CRIU images"
    options: ClassVar[tuple[Option, ...]] = (
        Option("state", "a file or directory the program writes, taken as a blob (repeat for more)", Path, (), "PATH", True),
        Option("freeze", "hold the program still while it is taken: auto or sigstop (its process group), or none", str, "auto", "MODE"),
        Option("timeout", "seconds to wait for the freeze before giving up", float, 10.0, "SECONDS"),
        Option("criu", "also dump the whole process image with CRIU (when `criu check` passes)", bool, False),
    )

    def __init__(self, *, freezer: Freezer | None = None, redactor: Redactor | None = None) -> None:
        if freezer is None:
            from ckptcli.adapters.process.freeze import hold

            freezer = hold
        self.freezer = freezer
        self.redactor = redactor if redactor is not None else Redactor()

    # -- availability ------------------------------------------------------------------------
    @classmethod
    def available(cls) -> Availability:
        """Whether processes can be captured here (Linux with /proc), and what works.

        Returns:
            Availability: ok on Linux with /proc; `details` holds "freeze" (each mode ->
            "usable: ..." or "not usable: ...", probed without changing anything) and
            "criu" ({"ok", "reason"} from `criu check`).
        Raises:
            Nothing; every probe that fails is a reason.
        """
        criu_ok, criu_reason = criu_mod.criu_status()
        details: dict[str, Any] = {"freeze": freeze_modes(), "criu": {"ok": criu_ok, "reason": criu_reason}}
        if not sys.platform.startswith("linux"):
            return Availability(False, f"needs Linux and /proc (this is {platform.system()})", details)
        if not os.path.isfile("/proc/self/stat"):
            return Availability(False, "/proc is not mounted", details)
        usable = [mode for mode, said in details["freeze"].items() if said.startswith("usable")]
        criu = "CRIU: `criu check` passes" if criu_ok else f"CRIU not usable: {criu_reason}"
        return Availability(True, f"Linux with /proc; freeze: {', '.join(usable) or 'none usable'}; {criu}", details)

    # -- capture -----------------------------------------------------------------------------
    def capture(
        self,
        target: object,
        *,
        state: Sequence[str | os.PathLike[str]] = (),
        freeze: str = "auto",
        timeout: float = 10.0,
        criu: bool = False,
        **options: Any,
    ) -> ProcessCapture:
        """What a checkpoint of process `target` holds. Capture itself does not freeze (the
        state files are read when the checkpoint is taken): `take` freezes around both.

        Args:
            target: the PID (an int or its decimal text).
            state: files or directories the program writes, each taken as blob ``state<i>``.
            freeze, timeout: checked here, used by `take`.
            criu: also dump the process with CRIU into a temporary directory, taken as
                blob ``criu`` (Capture.close removes it).
        Returns:
            Capture(document={"ext": {"process": ..., "ckpt.redaction": ...}}, blobs, labels
            process.pid, process.comm, process.exe, process.uid, process.criu, redacted,
            redaction.rules).
        Raises:
            UsageError for an unknown option, freeze mode or timeout;
            procfs's ProcessGoneError, NotOurProcessError, KernelThreadError,
            InvalidInputError for the PID; NotFoundError for a state path that does not
            exist; UnsafePathError for one through a symbolic link; CriuError.
        """
        if options:
            raise UsageError(f"the process adapter has no option {sorted(options)[0]!r}", hint=_option_names())
        _check_freeze(freeze, timeout)
        paths = [_check_state_path(p) for p in state]
        info = describe(target, redactor=self.redactor, where="/ext/process")
        redaction = info.pop("redaction")
        info["state_paths"] = [{"blob": state_blob_name(i), "path": str(p)} for i, p in enumerate(paths)]
        ext: dict[str, Any] = {"process": info}
        labels = {
            "process.pid": str(info["pid"]),
            "process.comm": _label(info["comm"]),
            "process.exe": _label(info["exe"] or ""),
            "process.uid": str(info["uid"].get("real", "")),
            "redacted": str(len(redaction["redacted"])),
            "redaction.rules": redaction["rules"] or "",
        }
        if redaction["redacted"]:
            ext[REDACTION_NAMESPACE] = redaction
        cap = ProcessCapture({"ext": ext}, {state_blob_name(i): p for i, p in enumerate(paths)}, labels)
        if criu:
            images = Path(tempfile.mkdtemp(prefix="ckpt-criu-"))
            cap.cleanup.append(images)
            try:
                result = criu_mod.dump(info["pid"], images / "images")
            except BaseException:
                cap.close()
                raise
            cap.blobs["criu"] = result.images_dir
            info["criu"] = {"argv": result.argv, "blob": "criu"}
            labels["process.criu"] = "yes"
        return cap

    def take(
        self,
        store: Store,
        target: Any,
        *,
        subject: str,
        labels: Mapping[str, str] | None = None,
        message: str = "",
        parents: list[str] | None = None,
        progress: Progress = NULL,
        **options: Any,
    ) -> TakeResult:
        """Capture process `target` and take it into `store` as one checkpoint of `subject`,
        with the process held by the freezer from before /proc is read until the files are in.

        Args:
            store: an open store.
            target: the PID.
            subject: "process:NAME".
            labels: more labels (they win over the adapter's).
            message, parents, progress: as ckptcli.take takes them.
            **options: the declared options (state, freeze, timeout, criu), as for capture.
        Returns:
            The writer's TakeResult; labels adapter=process, process.how (cgroup, freezer,
            sigstop or none) and process.consistency ("crash": the copy is as a crash at that
            instant would leave it; with how "none" files written meanwhile may be torn).
        Raises:
            The errors of capture; NotSupported for a freeze mode no freezer provides here;
            the writer's errors (nothing is committed then).
        """
        freeze, timeout = options.get("freeze", "auto"), options.get("timeout", 10.0)
        _check_freeze(freeze, timeout)
        with self._frozen(target, freeze, timeout) as how:
            consistency = "none" if how == "none" else "crash"  # not held still: files written meanwhile may be torn
            extra = {"process.how": how, "process.consistency": consistency, "process.reason": "manual"}
            return super().take(
                store,
                target,
                subject=subject,
                labels={**extra, **dict(labels or {})},
                message=message,
                parents=parents,
                progress=progress,
                **options,
            )

    def _frozen(self, target: object, mode: str, timeout: float) -> AbstractContextManager[str]:
        if mode == "none":
            return _not_frozen()
        from ckptcli.adapters.process.procfs import check_pid

        pid, _ = check_pid(target)
        return self.freezer(pid, mode, timeout)

    # -- restore -----------------------------------------------------------------------------
    def restore(
        self, checkpoint: Checkpoint, target: str | os.PathLike[str], *, overwrite: bool = False, criu: bool = False, **options: Any
    ) -> dict[str, Any]:
        """Write a process checkpoint's state blobs into directory `target` (``state0``,
        ``state1``, ... as taken) and, with `criu`, restore the process from its images.

        Args:
            checkpoint: a checkpoint this adapter took (it has an ``ext:process`` section).
            target: a directory (created if missing); nothing is written outside it, and no
                symbolic link in it is followed.
            overwrite: replace what the target already holds at those names.
            criu: also restore the ``criu`` blob into target/criu and run `criu restore -d`.
            **options: capture's other options (state, freeze, timeout) are accepted and
                play no part (the state goes back as it was taken).
        Returns:
            {"target", "blobs": [names], "paths": {blob: the path it was taken from},
            "bytes", and with criu "pid" (the restored process)}.
        Raises:
            UsageError for an unknown option; InvalidInputError for a checkpoint this
            adapter did not take; NotFoundError when `criu` is asked of one taken without it; the blob
            restore's UnsafePathError, ConflictError, StoreIOError (what it wrote is undone);
            CriuError.
        """
        unknown = sorted(set(options) - {o.name for o in self.options})
        if unknown:
            raise UsageError(f"the process adapter's restore has no option {unknown[0]!r}", hint="it takes overwrite and criu")
        try:
            info = checkpoint.section("ext:process")
        except NotFoundError:
            raise InvalidInputError(
                f"checkpoint {checkpoint.hex[:12]} was not taken by the process adapter (it has no ext:process section)",
                hint="give a checkpoint of a process:NAME subject",
            ) from None
        declared = info.get("state_paths") if isinstance(info, dict) else None
        paths = {str(d.get("blob")): str(d.get("path")) for d in declared or [] if isinstance(d, dict)}
        have = checkpoint.blobs()
        names = [n for n in paths if n in have]
        if criu:
            if "criu" not in have:
                raise NotFoundError(f"checkpoint {checkpoint.hex[:12]} holds no CRIU images", hint="take it with --criu")
            names.append("criu")
        out = Path(target)
        written = checkpoint.restore_blobs(out, names=names, overwrite=overwrite) if names else 0
        result: dict[str, Any] = {"target": str(out), "blobs": names, "paths": paths, "bytes": written}
        if criu:
            result["pid"] = criu_mod.restore(out / "criu").pid
        return result

    # -- the rest of the contract ------------------------------------------------------------
    def reducers(self) -> dict[str, Callable[..., Any]]:
        """Reducers of this adapter's own event kinds.

        Returns:
            the `process:*` kinds `ckpt run` records (start, checkpoint, exit, restart,
            bad), as ckptcli.adapters.process.events defines them.
        """
        from ckptcli.adapters.process.events import REDUCERS

        return dict(REDUCERS)

    def importers(self) -> dict[str, Any]:
        """Importers of foreign formats.

        Returns:
            {}: there is no foreign process format to import (CRIU images are taken as a blob).
        """
        return {}


# -- helpers ------------------------------------------------------------------------------------


@contextlib.contextmanager
def _not_frozen() -> Iterator[str]:
    yield "none"


def _option_names() -> str:
    return "its options are " + ", ".join(o.name for o in ProcessAdapter.options)


def _check_freeze(freeze: str, timeout: float) -> None:
    if freeze not in FREEZE_MODES:
        raise UsageError(f"--freeze {freeze!r} is not a freeze mode", hint="use one of " + ", ".join(FREEZE_MODES))
    if not isinstance(timeout, int | float) or not timeout > 0 or timeout != timeout or timeout == float("inf"):
        raise UsageError(f"--timeout {timeout!r} is not a positive number of seconds", hint="e.g. --timeout 10")


def _label(value: str) -> str:
    return value if len(value) <= LABEL_MAX else value[: LABEL_MAX - 3] + "..."


def _check_state_path(given: str | os.PathLike[str]) -> Path:
    """The absolute path of a declared state path that exists and is reached through no
    symbolic link (every component checked with lstat; the last may be a file or a directory)."""
    text = os.fspath(given)
    if not text or "\x00" in text:
        raise InvalidInputError(f"--state {text!r} is not a path", hint="give a file or directory the program writes")
    path = Path(os.path.abspath(text))
    here = Path(path.anchor)
    for part in path.parts[1:]:
        here = here / part
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            raise NotFoundError(f"--state {text}: {here} does not exist", hint="declare files or directories that are there") from None
        except OSError as exc:
            raise InvalidInputError(f"--state {text}: cannot read {here}: {exc.strerror}") from None
        if stat.S_ISLNK(st.st_mode):
            raise UnsafePathError(
                f"--state {text}: {here} is a symbolic link",
                hint="declare the real path; ckpt takes no state through a symlink",
            )
    st = os.lstat(path)
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        raise InvalidInputError(f"--state {text} is neither a regular file nor a directory", hint="declare files or directories")
    return path


def freeze_modes() -> dict[str, str]:
    """Which freeze modes could work here, probed without changing anything: each of
    "cgroup" (a writable cgroup v2 mount: cgroup.freeze), "freezer" (a writable cgroup v1
    freezer hierarchy) and "sigstop" (always) -> "usable: ..." or "not usable: ..."."""
    from ckptcli.adapters.process.freeze import cgroup_mounts

    mounts = cgroup_mounts()
    v2 = [str(mounts.v2)] if mounts.v2 is not None else []
    v1 = [str(mounts.v1_freezer)] if mounts.v1_freezer is not None else []
    return {
        "cgroup": _probe_v2(v2),
        "freezer": _probe_dirs(v1, "cgroup v1 freezer", "freezer.state"),
        "sigstop": "usable: SIGSTOP of the process group (always available; the program cannot catch it)",
    }


def _probe_v2(mounts: list[str]) -> str:
    if not mounts:
        return "not usable: no cgroup v2 mount"
    release = platform.release().split(".")
    try:
        if (int(release[0]), int(release[1].split("-")[0])) < (5, 2):
            return f"not usable: kernel {platform.release()} has no cgroup.freeze (5.2 or later)"
    except (ValueError, IndexError):
        pass
    return _probe_dirs(mounts, "cgroup v2", "cgroup.freeze")


def _probe_dirs(mounts: list[str], what: str, control: str) -> str:
    if not mounts:
        return f"not usable: no {what} mount"
    for where in mounts:
        if os.access(where, os.W_OK):
            return f"usable: {what} at {where} is writable ({control})"
    return f"not usable: {what} at {', '.join(mounts)} is not writable by this user"
