"""What featx computes, as one comparable file: the check that a refactor changed nothing.

`python -m bench.snapshot capture OUT.json [PIPELINE ...]` runs extract + probe + report on every
pipeline in pipelines/ whose data is here (or those named), and `featx all` (the fine-tune
included) on pipelines/trec.toml, in a fresh data folder (FEATX_SNAPSHOT_DATA, default
data/snapshot), then writes what they made: per cache its key and a digest of every dataset
(vectors, ids, texts, labels) and attribute that is not a time or a version; per record its
fields less times, dates and versions; per report its text with times masked.
`python -m bench.snapshot compare A.json B.json` lists every difference (exit 1 if any);
`python -m bench.snapshot read DATA OUT.json` snapshots a data folder made earlier.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from bench.common import ROOT, SHARED

# Record and cache fields that hold a time, a date, a version or a machine's facts.
VOLATILE = re.compile(r"seconds|created|version|_at$|^device$|wall|elapsed|threads|machine|epoch_seconds|hostname|"
                      r"^git$|^python$|^torch$|^transformers$|^platform$|extracted|rows_per_second|throughput|"
                      r"peak_rss|cpu|^completed$|^saved$|_per_s$|_wait_s$|"
                      # Checksums over fields above: the attributes' crc32; a head file's sha256 (its
                      # document holds its save time; the snapshot digests its arrays and document).
                      # And the address of scikit-learn's stop-word list, which TfidfVectorizer keeps.
                      r"^attrs_crc32$|^sha256$|^_stop_words_id$")
# Times in a report's text ("11 s", "7.9 s", "319 s", "1.2 min").
TIMES = re.compile(r"\d[\d,.]*\s*(s|min|h|ms)\b|\d{4}-\d\d-\d\dT[\d:.+Z-]+|\d{4}-\d\d-\d\d \d\d:\d\d(:\d\d)?")


def _featx(*args: str, data: Path) -> None:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    done = subprocess.run([sys.executable, "-m", "featx", "-q", *args, f"data_dir={data}", "progress=false"],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"featx {' '.join(args)} failed:\n{done.stderr[-4000:]}")


def _available(path: Path) -> bool:
    return "../shared/data" not in path.read_text() or SHARED.is_dir()


def capture(out: Path, names: list[str]) -> None:
    data = Path(os.environ.get("FEATX_SNAPSHOT_DATA", ROOT / "data" / "snapshot")).resolve()
    shutil.rmtree(data, ignore_errors=True)
    pipelines = [ROOT / n for n in names] if names else sorted((ROOT / "pipelines").glob("*.toml"))
    for path in pipelines:
        if not _available(path):
            print(f"skipped {path.name}: its data is not here")
            continue
        print(f"{path.name} ...", flush=True)
        for stage in ("extract", "probe", "report"):
            _featx(stage, str(path.relative_to(ROOT)), data=data)
    if not names:
        print("trec.toml: all ...", flush=True)
        _featx("all", "pipelines/trec.toml", data=data)
    out.write_text(json.dumps(snapshot(data), indent=1, sort_keys=True) + "\n")
    print(f"wrote {out}")


def snapshot(data: Path) -> dict:
    global _PLACES
    _PLACES = ((str(data), "<data>"), (str(ROOT), "<root>"))  # a checkout elsewhere writes the same
    return {"caches": {p.name: _cache(p) for p in sorted((data / "cache").glob("*.h5"))},
            "heads": {str(p.relative_to(data)): _head(p) for p in sorted((data / "runs").rglob("heads/*.safetensors"))},
            "records": {str(p.relative_to(data)): _record(p) for p in sorted((data / "runs").rglob("*.json"))
                        if "/lr-" not in str(p)},
            "reports": {str(p.relative_to(data)): _report(p) for p in sorted((data / "reports").rglob("*"))
                        if p.suffix in (".md", ".csv") and p.is_file()}}


def _cache(path: Path) -> dict:
    import h5py
    import numpy as np

    out: dict = {}
    with h5py.File(path, "r") as f:
        out["attrs"] = {k: _plain(v) for k, v in f.attrs.items() if not VOLATILE.search(k)}

        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                values = obj[()]
                digest = hashlib.sha256(np.ascontiguousarray(values).tobytes() if values.dtype.kind != "O"
                                        else json.dumps([_plain(v) for v in values.ravel()]).encode())
                out[name] = f"{values.dtype}{list(values.shape)}:{digest.hexdigest()[:16]}"
        f.visititems(visit)
    return out


_PLACES: tuple = ()


def _placed(text: str) -> str:
    for path, name in _PLACES:
        text = text.replace(path, name)
    return text


def _plain(value):
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if hasattr(value, "tolist"):
        return _plain(value.tolist())
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, str) and value[:1] in "{[":
        try:
            return _strip(json.loads(value))
        except ValueError:
            pass
    return _placed(value) if isinstance(value, str) else value


def _strip(value):
    """A JSON value less its volatile keys, at any depth."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if not VOLATILE.search(str(k))}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return _placed(value) if isinstance(value, str) else value


def _head(path: Path) -> dict:
    """A head file's arrays (digests) and its document less its volatile keys."""
    import numpy as np
    from safetensors.numpy import load_file

    tensors = load_file(path)
    document = tensors.pop("__featx__", None)
    out = {name: hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest()[:16] for name, v in tensors.items()}
    out["document"] = _strip(json.loads(bytes(document).decode())) if document is not None else None
    return out


def _record(path: Path):
    try:
        return _strip(json.loads(path.read_text()))
    except ValueError:
        return "unreadable"


def _report(path: Path) -> str:
    text = _placed(path.read_text())
    text = _mask_csv(text) if path.suffix == ".csv" else _mask_table(text)
    return TIMES.sub("<time>", text)


def _mask_table(text: str) -> str:
    """A report's Markdown with its tables' time columns (headers ending in " s") masked."""
    out, timed = [], set()
    for line in text.splitlines():
        cells = line.split("|")
        if not line.startswith("|"):
            timed = set()
        elif not timed and any(c.strip().endswith(" s") for c in cells):
            timed = {i for i, c in enumerate(cells) if c.strip().endswith(" s")}
        elif not set(line) <= set("|-: "):
            cells = ["<time>" if i in timed else c for i, c in enumerate(cells)]
        out.append("|".join(cells))
    return "\n".join(out)


def _mask_csv(text: str) -> str:
    """A results CSV with its volatile columns masked."""
    import csv
    import io

    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        return text
    timed = {i for i, name in enumerate(rows[0]) if VOLATILE.search(name)}
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(
        [rows[0]] + [["<time>" if i in timed else v for i, v in enumerate(row)] for row in rows[1:]])
    return buffer.getvalue()


def compare(a: Path, b: Path) -> int:
    left, right = json.loads(a.read_text()), json.loads(b.read_text())
    differences = list(_diff(left, right, ""))
    for line in differences[:200]:
        print(line)
    print(f"{len(differences)} difference(s)")
    return 1 if differences else 0


def _diff(x, y, where: str):
    if isinstance(x, dict) and isinstance(y, dict):
        for key in sorted(set(x) | set(y)):
            if key not in x or key not in y:
                yield f"{where}/{key}: only in {'B' if key not in x else 'A'}"
            else:
                yield from _diff(x[key], y[key], f"{where}/{key}")
    elif isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
        for i, (u, v) in enumerate(zip(x, y)):
            yield from _diff(u, v, f"{where}[{i}]")
    elif x != y and not (isinstance(x, float) and isinstance(y, float) and x != x and y != y):  # NaN: equal
        if isinstance(x, str) and isinstance(y, str) and "\n" in x:
            import difflib

            for line in difflib.unified_diff(x.splitlines(), y.splitlines(), lineterm="", n=0):
                yield f"{where}: {line}"
        else:
            yield f"{where}: {str(x)[:200]} != {str(y)[:200]}"


if __name__ == "__main__":
    command, *rest = sys.argv[1:] or ["help"]
    if command == "capture" and rest:
        capture(Path(rest[0]), rest[1:])
    elif command == "read" and len(rest) == 2:
        Path(rest[1]).write_text(json.dumps(snapshot(Path(rest[0]).resolve()), indent=1, sort_keys=True) + "\n")
    elif command == "compare" and len(rest) == 2:
        sys.exit(compare(Path(rest[0]), Path(rest[1])))
    else:
        print(__doc__)
        sys.exit(2)
