"""Read rate of a fresh file with the page cache bypassed (O_DIRECT where the OS allows it, else
POSIX_FADV_DONTNEED): a device preset's storage_read_bandwidth, measured by `python -m workbench profile`."""

from __future__ import annotations

import mmap
import os
import tempfile
import time
from pathlib import Path

STORAGE_MIB = {"full": 512, "quick": 32}
BLOCK = 1 << 20  # read size for the storage test (1 MiB, a multiple of any sector size)


def storage_row(storage_mib: int, storage_dir: Path) -> dict:
    """Read rate of a fresh file written for the test, bypassing the page cache: O_DIRECT where the file
    system allows it, else the pages dropped with POSIX_FADV_DONTNEED before reading."""
    fd, name = tempfile.mkstemp(prefix="workbench-profile-", dir=storage_dir)
    path = Path(name)
    try:
        chunk = os.urandom(BLOCK)
        with os.fdopen(fd, "wb") as f:
            for _ in range(storage_mib):
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        seconds, method = _read_direct(path)
        return {"benchmark": "storage_read", "size": storage_mib * BLOCK, "seconds": seconds, "unit": "B/s",
                "rate": storage_mib * BLOCK / seconds, "note": method}
    finally:
        path.unlink(missing_ok=True)


def _read_direct(path: Path) -> tuple[float, str]:
    """Seconds to read `path` once and the method that kept the page cache out."""
    buf = mmap.mmap(-1, BLOCK)  # page-aligned, as O_DIRECT needs
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECT", 0))
        method = "O_DIRECT read of a fresh file"
    except OSError:
        fd, method = None, ""
    if fd is None or not hasattr(os, "O_DIRECT"):
        fd = os.open(path, os.O_RDONLY)
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            method = "read after POSIX_FADV_DONTNEED of a fresh, fsynced file"
        else:
            method = "plain read of a fresh, fsynced file (the page cache may serve it: an upper bound)"
    try:
        start = time.perf_counter()
        try:
            while os.readv(fd, [buf]) > 0:
                pass
        except OSError:  # the file system refused O_DIRECT after all
            os.close(fd)
            fd = os.open(path, os.O_RDONLY)
            if hasattr(os, "posix_fadvise"):
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            method = "read after POSIX_FADV_DONTNEED of a fresh, fsynced file (O_DIRECT refused)"
            start = time.perf_counter()
            while os.readv(fd, [buf]) > 0:
                pass
        return time.perf_counter() - start, method
    finally:
        os.close(fd)
        buf.close()
