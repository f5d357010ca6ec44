"""A large input shared between torchrun ranks, each reading about 1/N of it. No torch.

    share_of   this rank's share of a source (featx.stream, featx.streamformats):
    span_of      of a CSV/TSV, JSONL or label-text file, the bytes where its records begin and
                 end: cuts near 1/N, 2/N, ... of the file, placed at record boundaries (for
                 CSV/TSV by the parity of the quotes before them: the ranks count their own
                 stretches and exchange the counts; for a file of lines, after a line feed)
    row_span_of  of Parquet or Arrow files, a range of rows (the footers count them)
    digest     the files' fingerprint: a sha256 of each block, any rank hashing any block
    merge      the ranks' pass 1 (a source's parse over their shares) as one over the files
    agreed     a step every rank takes, whose failure on one fails them all

The collective (`gather`, torch.distributed's all_gather_object) is passed in.
"""
from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import numpy as np

from featx import stream
from featx.errors import FeatxError

log = logging.getLogger("featx")

DIGEST_BYTES = 64 << 20  # bytes hashed as one block of a file's digest (any rank may hash any block)
SCAN_BYTES = 4 << 20     # bytes read at a time when cutting a file or checking its quotes


def agreed(gather, compute):
    """`compute()` on every rank, and what each rank got (`gather` is torch.distributed's
    all_gather_object, passed in so this module needs no torch). A rank that failed makes every
    rank raise the same error, instead of leaving the others waiting for it forever."""
    try:
        mine = ("ok", compute())
    except stream.Fallback as why:
        mine = ("fallback", str(why))
    except Exception as exc:  # noqa: BLE001 - any failure, so that no rank waits for this one
        mine = ("error", str(exc) if isinstance(exc, FeatxError) else f"{type(exc).__name__}: {exc}")
    everyone = gather(mine)
    for rank, (status, value) in enumerate(everyone):
        if status == "fallback":
            raise stream.Fallback(f"rank {rank}: {value}")
        if status == "error":
            raise FeatxError(f"rank {rank} could not read its share of the input: {value}")
    return [value for _, value in everyone]


def share_of(source, rank: int, size: int, gather) -> tuple[int, int] | None:
    """This rank's span of a source (what its `span` field takes): bytes of a file of records,
    rows of Parquet or Arrow files; None, alike on every rank, when every rank reads it all."""
    if source.kind == "columnar":
        return row_span_of(source, rank, size, gather)
    return span_of(source, rank, size, gather)


def span_of(source, rank: int, size: int, gather) -> tuple[int, int] | None:
    """This rank's records: the bytes [start, stop) of the file between the record boundaries
    nearest rank/size and (rank+1)/size of it. The ranks' spans cover every record once, in
    file order, and each rank reads about 1/size of the file to find and check them. None,
    alike on every rank, when a CSV/TSV cut cannot be placed with certainty (a quote that is a
    plain character of an unquoted field, a line ending in a lone carriage return): every rank
    then reads the whole file, as one process would. A file of lines (JSONL, label-text) is
    cut just after a line feed, which always ends a line there (featx.streamformats)."""
    delimited = source.kind == "delimited"
    total, first = source.state[0], _header_end(source.path) if delimited else 0
    cuts = [first + (total - first) * r // size for r in range(size + 1)]
    quoted = delimited and source.quoting != "none"
    # Whether a cut falls inside a quoted field: the parity of the quotes before it, counted by
    # the ranks over their own stretches (exact once `_plain` holds for every stretch). Each rank
    # also hashes its stretch and the next one, so two ranks read every byte: hosts whose copies
    # of the file differ are told so, not given a mix of the two.
    stretches = agreed(gather, lambda: _stretch(source.path, cuts, rank, quoted))
    _check_same_bytes(source.path, stretches, cuts)
    counts = [quotes for quotes, _, _ in stretches]

    def mine() -> tuple[bool, tuple[int, int]]:
        def boundary(r: int) -> int:
            if r in (0, size):
                return first if r == 0 else total
            return _next_record(source.path, cuts[r], sum(counts[:r]) % 2 == 1, quoted, total)
        start, stop = boundary(rank), boundary(rank + 1)
        return not delimited or _plain(source, start, max(start, stop)), (start, max(start, stop))

    found = agreed(gather, mine)  # every rank's cut, found and checked, or every rank's error
    if all(plain for plain, _ in found):
        return found[rank][1]
    log.warning("%s: its quotes leave record boundaries uncertain, so every rank reads the whole "
                "file (quote every field that holds a quote or a line break to shard it)", source.path)
    return None


def row_span_of(source, rank: int, size: int, gather) -> tuple[int, int]:
    """This rank's rows of Parquet or Arrow files: [n * rank // size, n * (rank + 1) // size)
    of their n rows joined. As for a file cut by bytes, every byte of every file is hashed by
    two ranks, so hosts whose copies differ are refused instead of mixed."""
    def count() -> tuple[int, list]:
        stretches = []
        for state, path in zip(source.states, source.files):
            cuts = [state[0] * r // size for r in range(size + 1)]
            stretches.append(_stretch(path, cuts, rank, False))
        return source.rows(), stretches

    everyone = agreed(gather, count)
    for k, (state, path) in enumerate(zip(source.states, source.files)):
        _check_same_bytes(path, [stretches[k] for _, stretches in everyone],
                          [state[0] * r // size for r in range(size + 1)])
    rows = {n for n, _ in everyone}
    if len(rows) > 1:
        raise FeatxError(f"the ranks count different rows in {source.path} ({sorted(rows)}): every host "
                         "must see the same files")
    n = rows.pop()
    return n * rank // size, n * (rank + 1) // size


def _stretch(path: Path, cuts: list[int], rank: int, quoted: bool) -> tuple[int, str, str | None]:
    """(quotes in this rank's stretch of the file, its sha256, the next stretch's sha256)."""
    quotes, h = 0, hashlib.sha256()
    for _, data in _blocks(path, cuts[rank], cuts[rank + 1]):  # one read: counted and hashed
        quotes += data.count(b'"') if quoted else 0
        h.update(data)
    following = _sha256(path, cuts[rank + 1], cuts[rank + 2]) if rank + 2 < len(cuts) else None
    return quotes, h.hexdigest(), following


def _check_same_bytes(path: Path, stretches: list, cuts: list[int]) -> None:
    """Refuse ranks whose copies of the file differ (the same size, other bytes): each stretch
    was hashed by its rank and by the rank before it."""
    for r in range(1, len(stretches)):
        if stretches[r][1] != stretches[r - 1][2]:
            raise FeatxError(f"ranks {r - 1} and {r} read different bytes at {path} (bytes {cuts[r]:,} to "
                             f"{cuts[r + 1]:,}): every host must see the same file; copy it again, or put "
                             "it where every host reads it")


def _header_end(path: Path) -> int:
    with open(path, "rb") as f:
        return len(f.readline())  # source_of reads the header from the first line too


def _blocks(path: Path, start: int, stop: int):
    """(offset, bytes) of [start, stop), SCAN_BYTES at a time."""
    with open(path, "rb") as f:
        f.seek(start)
        while start < stop:
            data = f.read(min(SCAN_BYTES, stop - start))
            if not data:
                raise FeatxError(f"{path} is shorter than when featx first read it; rerun once it "
                                 "stays as it is")
            yield start, data
            start += len(data)


def _sha256(path: Path, start: int, stop: int) -> str:
    """The sha256 of bytes [start, stop) of the file."""
    h = hashlib.sha256()
    for _, data in _blocks(path, start, stop):
        h.update(data)
    return h.hexdigest()


def _next_record(path: Path, pos: int, inside: bool, quoted: bool, total: int) -> int:
    """The first record start at or after `pos` (inside a quoted field there or not): just past
    the first line break outside quotes."""
    for offset, data in _blocks(path, pos, total):
        i = 0
        while True:
            quote = data.find(b'"', i) if quoted else -1
            if inside:
                if quote < 0:
                    break
                inside, i = False, quote + 1
                continue
            newline = data.find(b"\n", i)
            if newline >= 0 and (quote < 0 or newline < quote):
                return offset + newline + 1
            if quote < 0:
                break
            inside, i = True, quote + 1
    return total


def _plain(source: stream.Source, start: int, stop: int) -> bool:
    """Whether bytes [start, stop) (starting at a record) hold quotes only where RFC 4180 puts
    them: opening a field, doubled inside one, closing one before a delimiter or line end; and
    no lone carriage return (pyarrow ends a line there). Then quote parity tells exactly where
    quoted fields are, which is what `span_of` cuts by."""
    delimiter = ord(source.delimiter)
    quoted = source.quoting != "none"
    inside, skip = False, -1
    with open(source.path, "rb") as f:
        for offset, data in _blocks(source.path, start, stop):
            f.seek(offset + len(data))
            after = f.read(1) if offset + len(data) < stop else b""
            f.seek(max(0, offset - 1))
            before = f.read(1) if offset > start else b"\n"
            view = before + data + after  # one byte of context either side
            carriage = np.flatnonzero(np.frombuffer(data, np.uint8) == 13)
            if len(carriage) and any(view[c + 2:c + 3] != b"\n" for c in carriage.tolist()):
                return False
            if not quoted:
                continue
            for q in np.flatnonzero(np.frombuffer(data, np.uint8) == 34).tolist():
                if offset + q == skip:
                    continue  # the second quote of a doubled one
                prev, nxt = view[q], view[q + 2] if q + 2 < len(view) else -1
                if not inside:
                    if prev not in (delimiter, 10):
                        return False  # a quote inside an unquoted field: a plain character
                    inside = True
                elif nxt == 34:
                    skip = offset + q + 1
                elif nxt in (delimiter, 10, 13, -1):
                    inside = False
                else:
                    return False  # text after a closing quote
    return not inside


def digest(source, rank: int = 0, size: int = 1, gather=None) -> str:
    """sha256 over the sha256 of every DIGEST_BYTES block of the file: the same value whichever
    ranks hash which blocks (each hashes 1/size of them), so a streamed dataset's fingerprint
    is the same for one process and for any number of ranks or nodes. A folder's: of each of
    its files' digests, with their names."""
    files = list(zip(source.files, source.states))
    blocks = [(i, k) for i, (_, state) in enumerate(files) for k in range(-(-state[0] // DIGEST_BYTES))]

    def mine() -> dict[int, str]:
        out = {}
        for j in range(rank, len(blocks), size):
            i, k = blocks[j]
            path, state = files[i]
            out[j] = _sha256(path, k * DIGEST_BYTES, min(state[0], (k + 1) * DIGEST_BYTES))
        stream.check_states(source)
        return out

    hashed: dict[int, str] = {}
    for part in (agreed(gather, mine) if gather is not None else [mine()]):
        hashed |= part
    digests = []
    for i, (path, state) in enumerate(files):
        h = hashlib.sha256(f"featx-file-1:{state[0]}".encode())
        for j, (file, _) in enumerate(blocks):
            if file == i:
                h.update(bytes.fromhex(hashed[j]))
        digests.append(h.hexdigest())
    if source.files == (source.path,):
        return digests[0]
    return hashlib.sha256(json.dumps(["featx-folder-1", [[path.name, d] for (path, _), d in zip(files, digests)]])
                          .encode()).hexdigest()


def merge(parts: list[stream.Parsed], source, limit: int = stream.MAX_CLASSES) -> stream.Parsed:
    """The ranks' pass 1 over their spans (in file order) as one pass over the whole file:
    labels and split values in order of first appearance, codes renumbered to them; targets and
    id hashes one after the other."""
    index: dict = {}  # stream.value_key(value) -> code
    split_index: dict = {}
    codes, splits = [], []
    for part in parts:
        if part.codes is not None:
            local = np.array([index.setdefault(stream.value_key(v), len(index)) for v in part.labels], dtype=np.int64)
            codes.append(local[part.codes] if len(part.codes) else np.zeros(0, np.int64))
        if part.splits is not None:
            names = np.array([split_index.setdefault(v, len(split_index)) for v in part.split_values],
                             dtype=np.int64)
            splits.append(names[part.splits] if len(part.splits) else np.zeros(0, np.int64))
    # The limits each rank's pass 1 kept (featx.stream.parse), now over the whole file: past
    # them one process reads the file whole, and so must every rank (the same data, one key).
    if len(split_index) > 100:
        raise stream.Fallback("more than 100 distinct split names")
    if len(index) > limit:
        raise stream.TooManyLabels(f"more than {limit:,} distinct labels: not classes")
    dtype = np.int16 if len(index) < 2 ** 15 else np.int32
    with_codes, with_splits = parts[0].codes is not None, parts[0].splits is not None
    joined = lambda arrays: None if arrays[0] is None else np.concatenate(arrays)  # noqa: E731
    return stream.Parsed(source, sum(p.n for p in parts), np.concatenate(codes).astype(dtype) if with_codes else None,
                         [stream.key_value(key) for key in index], np.concatenate(splits).astype(np.int8) if with_splits
                         else None, list(split_index), sum(p.nbytes for p in parts),
                         joined([p.targets for p in parts]), joined([p.ids for p in parts]),
                         {k: sum(p.dropped.get(k, 0) for p in parts) for k in dict.fromkeys(k for p in parts for k in p.dropped)})
