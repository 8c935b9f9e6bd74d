"""Every error ckpt raises on purpose, and the exit code each one maps to.

`CkptError` (exit 1) is the root; each subclass carries its documented exit code
(`exit_code`): UsageError, NotFoundError (StoreNotFoundError), InvalidInputError,
DataError (CorruptError, UnsupportedVersionError, LimitExceededError), UnsafePathError,
LockError, ConflictError (LatestMovedError, ThreadConflictError) and StoreIOError.
docs/design.md ("Errors: one class per exit code") draws the tree, docs/exit-codes.md is
the table. `user_failure` and `how_it_failed` describe a failure of the user's own code (a
migration, a reducer, a replayed step), which the caller turns into its own error.

Invariant: every message says what is wrong, where, and what to do next; the CLI prints
``ckpt: error: <message>`` and exits with the code, nothing else."""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """The one table of exit codes; docs/exit-codes.md and every command's help print it."""

    OK = 0
    FAILURE = 1
    USAGE = 2
    NOT_FOUND = 3
    INVALID_INPUT = 4
    CORRUPT = 5
    UNSUPPORTED_VERSION = 6
    LIMIT_EXCEEDED = 7
    UNSAFE_PATH = 8
    LOCKED = 9
    NO_STORE = 10
    CONFLICT = 11
    IO_ERROR = 12
    DIVERGED = 13
    INTERNAL = 70
    INTERRUPTED = 130
    TERMINATED = 143


EXIT_CODE_MEANINGS: dict[ExitCode, str] = {
    ExitCode.OK: "success",
    ExitCode.FAILURE: "failure (also: differences found, where a command documents it)",
    ExitCode.USAGE: "usage error: bad option or argument",
    ExitCode.NOT_FOUND: "no such checkpoint, ref, section or file",
    ExitCode.INVALID_INPUT: "input ckpt cannot take (state document, name, label)",
    ExitCode.CORRUPT: "damaged data: hash mismatch, truncated or malformed file, a pack missing from the store",
    ExitCode.UNSUPPORTED_VERSION: "written by a newer ckpt, or not a ckpt file",
    ExitCode.LIMIT_EXCEEDED: "a size, depth or count limit was exceeded",
    ExitCode.UNSAFE_PATH: "a path inside a checkpoint would escape the target directory, or a store directory is a link",
    ExitCode.LOCKED: "the store is locked by another process",
    ExitCode.NO_STORE: "no store found (run `ckpt init`, or pass --store), or no such bucket",
    ExitCode.CONFLICT: (
        "conflict: the name already exists in the target, or another writer extended the same history first "
        "(or reset it while a take ran); `ckpt init` at a prefix that holds objects, or at a prefix or directory inside a store"
    ),
    ExitCode.IO_ERROR: "the operating system refused a read or write",
    ExitCode.DIVERGED: "replay --check: the step function diverged from the recorded events",
    ExitCode.INTERNAL: "internal error (a bug: please report it with CKPT_DEBUG=1 output)",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C); the store is left as it was",
    ExitCode.TERMINATED: "stopped by SIGTERM (timeout, systemd, Kubernetes), as by Ctrl-C: the store is left as it was",
}


class CkptError(Exception):
    """Base of every error ckpt raises on purpose."""

    exit_code: ExitCode = ExitCode.FAILURE

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message}; {self.hint}"
        return self.message


class UsageError(CkptError):
    exit_code = ExitCode.USAGE


class NotFoundError(CkptError):
    exit_code = ExitCode.NOT_FOUND


class StoreNotFoundError(NotFoundError):
    exit_code = ExitCode.NO_STORE


class InvalidInputError(CkptError):
    exit_code = ExitCode.INVALID_INPUT


class DataError(CkptError):
    """Bytes that are not what they claim to be."""

    exit_code = ExitCode.CORRUPT


class CorruptError(DataError):
    exit_code = ExitCode.CORRUPT


class UnsupportedVersionError(DataError):
    exit_code = ExitCode.UNSUPPORTED_VERSION


class LimitExceededError(DataError):
    exit_code = ExitCode.LIMIT_EXCEEDED


class UnsafePathError(CkptError):
    exit_code = ExitCode.UNSAFE_PATH


class LockError(CkptError):
    exit_code = ExitCode.LOCKED


class ConflictError(CkptError):
    exit_code = ExitCode.CONFLICT


class LatestMovedError(ConflictError):
    """A take finished after its subject's latest was reset (`ckpt reset`, a repair) to
    another checkpoint than the one the take built on: latest stays where the reset put
    it, and the new checkpoint, already committed, is kept unreferenced (`kept`)."""

    def __init__(self, subject: object, latest: bytes, kept: bytes) -> None:
        super().__init__(
            f"latest of {subject} moved to {latest.hex()[:12]} (a reset) while this take ran; the checkpoint is kept as {kept.hex()} "
            "but latest stays where the reset put it",
            hint=f"to make it latest anyway: ckpt reset {subject} {kept.hex()[:12]}; or take again to build on {latest.hex()[:12]}",
        )
        self.subject = subject
        self.latest = latest
        self.kept = kept


class ThreadConflictError(ConflictError):
    """A CkptSaver write that would fork a LangGraph thread: another process extended
    the thread after this saver read it (two runs on one thread at once)."""


class StoreIOError(CkptError):
    exit_code = ExitCode.IO_ERROR


class NoBucketError(StoreIOError):
    """The bucket (or container) of an object-storage URL does not exist: no store there,
    as for a local path that holds none (exit code NO_STORE)."""

    exit_code = ExitCode.NO_STORE


class DoctorFailed(CkptError):  # noqa: N818 - a verdict, not a fault in ckpt
    """A `ckpt doctor` check failed; the report has already been printed."""


class DoctorNoStore(DoctorFailed):
    """`ckpt doctor` found no store, or could not reach it (a missing bucket, an endpoint
    that does not answer); the report has already been printed."""

    exit_code = ExitCode.NO_STORE


class VerifyFailed(CkptError):  # noqa: N818 - a verdict, not a fault in ckpt
    """`ckpt verify` found damage; the report has already been printed."""

    exit_code = ExitCode.CORRUPT


class ReplayDiverged(CkptError):  # noqa: N818 - a verdict, not a fault in ckpt
    """`ckpt replay --check` found the first event where the step function does something
    else than was recorded; the divergence has already been printed."""

    exit_code = ExitCode.DIVERGED


def generic_hint(exc: CkptError) -> bool:
    """Whether `exc` says nothing of what to do about the file it names but "run `ckpt
    verify`" (the decoder's word, which knows no more), or nothing at all: the reader of
    that kind of file then says what repairs it."""
    return exc.hint is None or exc.hint.startswith("run `ckpt verify`") or exc.hint.endswith("; run `ckpt verify`")


def user_failure(exc: BaseException) -> bool:
    """Whether `exc`, raised by the user's code that ckpt called, is that code's failure:
    every exception (``sys.exit()``'s SystemExit, GeneratorExit and other BaseExceptions
    included) except Ctrl-C's KeyboardInterrupt, which stays the interruption (exit 130)."""
    return not isinstance(exc, KeyboardInterrupt)


def failed_with(exc: BaseException) -> str:
    """The exception as "ValueError: x", or for a BaseException what the code did."""
    return f"{type(exc).__name__}: {exc}" if isinstance(exc, Exception) else f"it {how_it_failed(exc)}"


def how_it_failed(exc: BaseException) -> str:
    """What the user's code did, for a message: "called sys.exit(3)", "raised ValueError: x"."""
    if isinstance(exc, SystemExit):
        return f"called sys.exit({'' if exc.code is None else repr(exc.code)})"
    text = str(exc)
    return f"raised {type(exc).__name__}: {text}" if text else f"raised {type(exc).__name__}"
