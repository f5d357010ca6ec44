"""Files every stage writes the same way: directories checked before any work, atomic writes."""
from __future__ import annotations

import datetime
import os
from pathlib import Path
from typing import Callable

from featx.errors import FeatxError


def writable_dir(path: str | Path, what: str = "the data directory") -> Path:
    """Create `path` if needed and prove it writable, before a stage spends any work: a
    read-only or misplaced data directory is one clear error up front, not a traceback after
    the heads are fitted."""
    path = Path(path).expanduser()
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".featx-write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except FileExistsError:
        raise FeatxError(f"{what} {str(path)!r} is a file, not a directory; set data_dir to a "
                         "folder (or move the file away)") from None
    except NotADirectoryError:
        raise FeatxError(f"{what} {str(path)!r} cannot be created: a file stands where one of its "
                         "parent folders should be; set data_dir to another folder") from None
    except OSError as exc:
        raise FeatxError(f"{what} {str(path)!r} is not writable ({exc.strerror}); set data_dir to a "
                         "folder you can write, or fix its permissions") from None
    return path


def atomic_write(path: Path, write: Callable[[Path], None]) -> Path:
    """`write(tmp)` then rename: a reader sees the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def utc_now() -> str:
    """The timestamp every record and cache carries: UTC, to the second, ISO 8601."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
