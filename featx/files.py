"""Files every stage writes the same way: directories checked before any work, atomic writes
that never follow a planted symbolic link, JSON parsed without a traceback.

What featx trusts: the data directory itself (`data_dir`, which may be a link the user made)
and the folders above it. What it does not: anything below it, which a handed-over `data/` may
have planted. So below `data_dir` featx follows no symbolic link, neither a folder on the way
(`writable_dir(..., root=...)`) nor the file it writes (`atomic_write`); a link there is an
error that names it. Every file is written whole to a new temporary file beside it and renamed
over the old one: a reader sees the old file or the new one, never half of one, and a rename
replaces a link itself, never the file it points to.
"""
from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import json
import os
import secrets
import stat
from pathlib import Path
from typing import Callable

from featx.errors import FeatxError


def refuse_link(path: Path, what: str = "") -> None:
    """A symbolic link where featx keeps its own file or folder is an error that names it."""
    if os.path.islink(path):
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        raise FeatxError(f"{path} is a symbolic link (to {target}){' ' + what if what else ''}; featx "
                         "writes its own files there and follows no link inside the data directory "
                         "(one planted there could make it overwrite a file elsewhere): remove the "
                         f"link (rm {str(path)!r}) and rerun")


def writable_dir(path: str | Path, what: str = "the data directory", root: str | Path | None = None,
                 fix: str = "set data_dir to another folder") -> Path:
    """Create `path` if needed and prove it writable, before a stage spends any work: a
    read-only or misplaced data directory is one clear error up front, not a traceback after
    the heads are fitted. With `root` (the data directory, which `path` lies under), every
    folder from `root` down to `path` is created one by one and none may be a symbolic link."""
    path = Path(path).expanduser()
    try:
        if root is not None and _under(path, Path(root).expanduser()):
            root = Path(root).expanduser()
            root.mkdir(parents=True, exist_ok=True)
            current = root
            for part in path.relative_to(root).parts:
                current = current / part
                refuse_link(current)
                current.mkdir(exist_ok=True)
        else:
            path.mkdir(parents=True, exist_ok=True)
        refuse_link(path)
        _touch_new(path / f".featx-write-test-{os.getpid()}", remove=True)
    except FileExistsError:
        if not path.is_file():  # a file stands higher up, where a folder of the path should be
            raise FeatxError(f"{what} {str(path)!r} cannot be created: a file stands where one of its "
                             f"parent folders should be; {fix}") from None
        raise FeatxError(f"{what} {str(path)!r} is a file, not a directory; {fix} (or move the file "
                         "away)") from None
    except NotADirectoryError:
        raise FeatxError(f"{what} {str(path)!r} cannot be created: a file stands where one of its "
                         f"parent folders should be; {fix}") from None
    except OSError as exc:
        raise FeatxError(f"{what} {str(path)!r} is not writable ({exc.strerror}); {fix}, or fix its "
                         "permissions") from None
    return path


def _under(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
        return True
    except ValueError:
        return False


def _touch_new(path: Path, remove: bool = False) -> None:
    """Create `path` as a new empty file, never through a link (O_EXCL does not follow one)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, 0o666)
    except FileExistsError:  # a leftover of a killed run, or a planted name: unlinking never follows
        os.unlink(path)
        fd = os.open(path, flags, 0o666)
    os.close(fd)
    if remove:
        os.unlink(path)


def open_nofollow(path: Path, flags: int, mode: int = 0o666) -> int:
    """`os.open` of a file featx made: a symbolic link at `path` is refused (O_NOFOLLOW), and so
    is anything but a regular file with one name (a hard link to a file elsewhere would be
    written through; a FIFO or a device would block or write outside the folder). O_NONBLOCK
    keeps the open itself from waiting on a FIFO; the error names the path."""
    refuse_link(path)
    try:
        fd = os.open(path, flags | getattr(os, "O_NOFOLLOW", 0) | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # it became a link after the check
            refuse_link(path)
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(fd)
        raise FeatxError(f"{path} is {kind_of(info)}, not a file featx made; featx writes only its own "
                         f"files (a link or a special file there could make it write elsewhere): remove "
                         f"it (rm {str(path)!r}) and rerun")
    os.set_blocking(fd, True)
    return fd


def own_file(path: Path) -> None:
    """Refuse `path` unless it is a regular file with one name and no link (`open_nofollow`'s
    check), before a library that opens files by name (h5py) is handed it."""
    os.close(open_nofollow(path, os.O_RDONLY))


@contextlib.contextmanager
def exclusive(lock_path: Path, what: str, fix: str):
    """Hold an exclusive lock on `lock_path` while `what` ("writing the cache x.h5") is done; a
    second process gets one error naming the holder's pid and `fix`.

    flock is released by the kernel when the process dies, so a SIGKILLed run never leaves a
    stale lock. The lock file stays (removing it would race with a process about to lock it),
    and is opened as featx's own file only (`open_nofollow`: no link, no FIFO)."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd = open_nofollow(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
            raise FeatxError(f"another featx process ({holder}) is {what}; {fix}") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {os.uname().nodename}".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the flock


def kind_of(info: os.stat_result) -> str:
    """What a non-regular file is, in words (or a regular one with other names)."""
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(info.st_mode):
            return name
    if info.st_nlink != 1:
        return f"a file with {info.st_nlink} names (a hard link)"
    return "not a regular file"


READ_LIMIT = 64 << 20  # the largest JSON or text file featx reads back whole (records, manifests)


def regular_file(path: Path, what: str = "a file featx reads") -> os.stat_result:
    """Refuse `path` unless it is a regular file (a link to one is fine: the Hugging Face cache is
    made of them), checked before it is opened: opening a FIFO for reading waits forever for a
    writer, a device never ends. The error names the path and what was expected."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise FeatxError(f"{path} is missing ({what})") from None
    except OSError as exc:
        raise FeatxError(f"{path} cannot be read ({exc.strerror}); {what}") from None
    if not stat.S_ISREG(info.st_mode):
        raise FeatxError(f"{path} is {kind_of(info)} where {what} should be a regular file; replace it "
                         "with the file (or remove the folder it is in) and rerun")
    return info


def read_bytes(path: Path, what: str = "a file featx reads", limit: int = READ_LIMIT) -> bytes:
    """A regular file's bytes, at most `limit` of them (more is not a file featx wrote): checked
    before it is opened and again on the open descriptor (a FIFO swapped in between is caught)."""
    regular_file(path, what)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise FeatxError(f"{path} cannot be read ({exc.strerror}); {what}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise FeatxError(f"{path} is {kind_of(info)} where {what} should be a regular file; replace "
                             "it and rerun")
        if info.st_size > limit:
            raise FeatxError(f"{path} holds {info.st_size:,} bytes, more than {what} ever does "
                             f"({limit:,}); it was not written by featx: replace it and rerun")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(limit + 1)[:limit]
    finally:
        os.close(fd)


def read_text(path: Path, what: str = "a file featx reads", limit: int = READ_LIMIT) -> str:
    """`read_bytes` decoded as UTF-8; undecodable bytes are one FeatxError naming the file."""
    try:
        return read_bytes(path, what, limit).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FeatxError(f"{path} is not UTF-8 text (byte {exc.start:,}); {what} was damaged or "
                         "replaced: restore it and rerun") from None


def atomic_write(path: Path, write: Callable[[Path], None]) -> Path:
    """`write(tmp)` then rename: a reader sees the old file or the new one, never half of one.

    The temporary file is created new beside `path` (so a link planted at its name cannot
    redirect it), flushed to disk, and renamed over `path`. A link at `path` is refused. A
    failure (a full disk, a file-size limit, permissions) replaces nothing and is one FeatxError."""
    path = Path(path)
    refuse_link(path, "where featx writes a file")
    if path.is_dir():
        raise FeatxError(f"{path} is a folder where featx writes a file; move it away and rerun")
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        refuse_link(path.parent, "where featx writes its files")
        _touch_new(tmp)
        write(tmp)
        fd = os.open(tmp, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        try:
            os.fsync(fd)  # on disk before it takes the name: a power cut leaves the old file
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        _remove(tmp)
        raise FeatxError(f"cannot write {path} ({_reason(exc)}); nothing was replaced: free some "
                         "space or fix the folder's permissions, and rerun") from None
    except BaseException:
        _remove(tmp)
        raise
    return path


def write_bytes(path: Path, data: bytes) -> Path:
    """`atomic_write` of bytes already in memory."""
    return atomic_write(path, lambda tmp: tmp.write_bytes(data))


def _remove(tmp: Path) -> None:
    try:
        os.unlink(tmp)
    except OSError:
        pass


def _reason(exc: OSError) -> str:
    if exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
        return "the disk is full or a file-size limit applies"
    return exc.strerror or str(exc)


def loads_json(text: str | bytes):
    """json.loads whose every failure is a ValueError: a document nested thousands deep raises
    RecursionError in the parser, which is no more a featx bug than a missing brace."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply to be a featx file") from None


def utc_now(timespec: str = "seconds") -> str:
    """The timestamp every record and cache carries: UTC, ISO 8601, to the second (a record's: to
    the microsecond, see `featx.runs.schema.new_record`)."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec=timespec)
