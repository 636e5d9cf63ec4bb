"""Crash-safe file writes: write beside, fsync, rename.

Every file genesis writes for a user (``genesis.save``, ``save_pretrained``'s weights, config
and index, a fine-tuning run's checkpoints, log and tokenizer files) goes through
``atomic_write``. The new content is written to a hidden temporary file in the target's
directory, flushed to the disk, and renamed over the target; the directory is then fsync'ed
so the rename itself survives a power cut. A process killed at any point leaves the target
either as it was or complete in its new version, never torn.

A killed writer cannot remove its temporary file. Each temporary's name records the host and
the process that wrote it (``.NAME.HOST-PID-RANDOM.tmp``), and the next ``atomic_write`` into
the same directory removes those of processes on this host that no longer run
(``remove_stale_temporaries``); ``live_temporaries`` lists the others, whose writers may still
be at work (a folder holding one is not to be deleted).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import socket
from collections.abc import Iterator

__all__ = ["atomic_write", "live_temporaries", "remove_durably", "remove_stale_temporaries"]

_HOST = hashlib.sha1(socket.gethostname().encode("utf-8", "replace")).hexdigest()[:8]
_TEMPORARY = re.compile(r"\..+\.([0-9a-f]{8})-(\d+)-[0-9a-f]{8}\.tmp")  # (host, pid)


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike) -> Iterator[str]:
    """Give a temporary path to write; on success it replaces ``path`` in one step.

    The caller writes the whole new content to the yielded path (with ``open``, or a library
    that takes a path). When the ``with`` block ends without an exception the file is
    fsync'ed and renamed over ``path``, and the directory is fsync'ed; on an exception the
    temporary is removed and ``path`` is untouched.

    Args:
        path: the file to create or replace; its directory must exist.

    Yields:
        The temporary path (in ``path``'s directory, so the rename never crosses a device).

    Raises:
        FileNotFoundError: ``path``'s directory does not exist (named in the message).

    Example::

        >>> with atomic_write("config.json") as tmp:
        ...     with open(tmp, "w") as f:
        ...         json.dump(config, f)
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"cannot write {path!r}: the directory {directory!r} does not "
                                "exist")
    remove_stale_temporaries(directory)
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{_HOST}-{os.getpid()}-"
                                  f"{secrets.token_hex(4)}.tmp")
    try:
        # os.open applies the umask, so the file gets the permissions a plain open() would.
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        yield tmp
        _fsync_path(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_path(directory)


def remove_durably(path: str | os.PathLike) -> None:
    """Delete a file (if it exists) and fsync its directory, so the removal survives a crash.

    For a removal that switches a folder from one version to another (a shard index whose
    shards go next): the files it made unused are deleted only after this returns.

    Args:
        path: the file.

    Example::

        >>> remove_durably("model.safetensors.index.json")
    """
    try:
        os.unlink(path)
    except FileNotFoundError:
        return
    _fsync_path(os.path.dirname(os.path.abspath(path)))


def remove_stale_temporaries(directory: str | os.PathLike) -> list[str]:
    """Delete the temporaries in ``directory`` of writers on this host that were killed.

    A temporary whose writer still runs (or ran on another host) is left alone.

    Args:
        directory: a folder written to with ``atomic_write``.

    Returns:
        The removed temporary paths.

    Example::

        >>> remove_stale_temporaries("runs/sft")
        []
    """
    removed = []
    for path, stale in _temporaries(directory):
        if stale:
            with contextlib.suppress(OSError):
                os.unlink(path)
                removed.append(path)
    return removed


def live_temporaries(directory: str | os.PathLike) -> list[str]:
    """The temporaries in ``directory`` whose writers may still be at work: those of
    processes of this host that still run, and every one written on another host.

    Args:
        directory: a folder written to with ``atomic_write``.

    Returns:
        Their paths (empty when no write into ``directory`` can be in progress).

    Example::

        >>> live_temporaries("runs/sft/checkpoints/step-0000100.sharded")
        []
    """
    return [path for path, stale in _temporaries(directory) if not stale]


def _temporaries(directory: str | os.PathLike) -> list[tuple[str, bool]]:
    """``(path, stale)`` of each ``atomic_write`` temporary in ``directory``; stale: its
    writer ran on this host and runs no more."""
    directory = os.fspath(directory)
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    found = []
    for name in names:
        match = _TEMPORARY.fullmatch(name)
        if match:
            stale = match.group(1) == _HOST and not _process_runs(int(match.group(2)))
            found.append((os.path.join(directory, name), stale))
    return found


def _process_runs(pid: int) -> bool:
    """Whether process ``pid`` of this host is alive (assumed so where it cannot be told)."""
    if os.name != "posix":
        return True  # os.kill(pid, 0) would terminate the process on Windows
    if pid == os.getpid():
        return True  # another thread of this process may be writing
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: alive, owned by another user
        return True
    return True


def _fsync_path(path: str) -> None:
    """Flush a file's (or, on POSIX, a directory's) data to the disk."""
    if os.path.isdir(path) and os.name != "posix":
        return  # Windows cannot open a directory, and needs no fsync to keep a rename
    fd = os.open(path, os.O_RDONLY if os.path.isdir(path) else os.O_RDWR)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
