"""Arrays files read back (a record's predictions, `.npz`): parsed from bytes already read whole
(`featx.files.read_bytes`: a regular file of bounded size), each member checked before numpy
builds an array from it.

`np.load(allow_pickle=False)` never unpickles, but it trusts the zip and the `.npy` headers
inside: a compressed member inflates to any size, and a header's shape sizes the array numpy
allocates before it reads a byte. featx writes its arrays uncompressed (`np.savez`), so each
member here is stored as it is, holds one `.npy` array of numbers or text, and its header's
shape fits in the bytes the member holds. Any other file is a ValueError that says why.
"""
from __future__ import annotations

import io
import zipfile

import numpy as np

# The largest arrays file featx reads back: predictions are seeds x rows x classes of float64
# (a hundred thousand rows of a hundred classes over five seeds: 400 MB).
LIMIT = 4 << 30
# The .npy header versions numpy writes, and the public readers of each.
HEADERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def load_npz(data: bytes) -> dict[str, np.ndarray]:
    """The arrays of an `.npz` file's bytes, by name (ValueError unless featx could have written it)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for info in archive.infolist():
                _check_member(archive, info)
        with np.load(io.BytesIO(data), allow_pickle=False) as arrays:
            return {name: arrays[name] for name in arrays.files}
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, OSError, EOFError, KeyError) as exc:
        raise ValueError(f"not a zip of arrays ({type(exc).__name__}: {str(exc)[:120]})") from None


def _check_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> None:
    if info.compress_type != zipfile.ZIP_STORED:
        raise ValueError(f"its member {info.filename[:60]!r} is compressed (featx stores its arrays as they are)")
    if not info.filename.endswith(".npy"):
        raise ValueError(f"its member {info.filename[:60]!r} is not an array")
    with archive.open(info) as member:
        version = np.lib.format.read_magic(member)
        if version not in HEADERS:
            raise ValueError(f"its member {info.filename[:60]!r} has an array header of version {version}")
        shape, _, dtype = HEADERS[version](member)
    if dtype.hasobject or dtype.kind not in "biufU":
        raise ValueError(f"its member {info.filename[:60]!r} is an array of {dtype} (featx writes numbers and text)")
    if int(np.prod(shape, dtype=object)) * dtype.itemsize > info.file_size:
        raise ValueError(f"its member {info.filename[:60]!r} claims an array of shape {shape[:4]}, more than its "
                         f"{info.file_size:,} bytes hold")
