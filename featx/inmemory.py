"""`featx.run`: the stages on data held in memory (a pandas or polars DataFrame, a `datasets.Dataset`,
an Arrow table, columns as lists), the answer returned as an object.

    answer = featx.run(train=df_train, test=df_test, text="review", label="stars")
    print(answer)                 # the verdict
    answer.frozen["metrics"], answer.comparison["interval"], answer.paths["html"]

Each split becomes a file named by the sha256 of its content under `<data_dir>/inputs/`
(Parquet; a `datasets.Dataset` its `save_to_disk` folder, whose ClassLabel names featx reads),
and the run a pipeline file beside them named by its own sha256, `<name>-<sha>.toml`, read back
by `load_pipeline`. So the data is hashed by content, the cache, records and report are the
CLI's own, every command a message names (continue a fine-tune, predict, export) runs on that
file, and two runs never write one file with different content. A stored file found again is
checked against its name before it is used.
"""
from __future__ import annotations

import hashlib
import json
import logging
import numbers
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from featx.config.load import load_pipeline, pipeline_from_dict
from featx.config.pipeline import SECTIONS, Pipeline
from featx.errors import FeatxError, shown
from featx.files import refuse_link, writable_dir, write_bytes

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
DIGEST_CHARS = 16

log = logging.getLogger("featx")


@dataclass(frozen=True)
class Answer:
    """What `featx.run` found: the verdict's text and numbers (as the report's verdict.json
    holds them), the paths of the report, and the pipeline file that reproduces the run."""
    text: str
    frozen: dict | None
    """The frozen choice: features, head, metrics, their intervals, rows scored."""
    tuned: dict | None
    """The fine-tune's record, alike (None without one)."""
    quality_ratio: float | None
    """Frozen score / fine-tuned score on the primary metric."""
    compute_ratio: float | None
    """Frozen compute / fine-tuned compute."""
    comparison: dict | None
    """The paired bootstrap over the same test rows: difference and 95% interval."""
    verdict: dict
    """verdict.json whole (the configuration, the TF-IDF check, the learning curve)."""
    paths: dict
    """The report's files: md, html, csv, json, and the pipeline's index."""
    pipeline: Path
    """The pipeline file written for this run: `featx <command> <pipeline>` works on it."""

    def __str__(self) -> str:
        return self.text

    def _repr_markdown_(self) -> str:  # a notebook shows the verdict
        return self.text


def run(train, *, dev=None, test=None, text: str = "text", label: str | Sequence[str] = "label",
        text_pair: str | None = None, model: str | Mapping = DEFAULT_MODEL, name: str = "run",
        finetune: bool | Mapping = True, data_dir: str | os.PathLike = "data", **sections) -> Answer:
    """Extract, probe, fine-tune (`finetune=False`: frozen side only) and report on data in memory.

    `train`, `dev`, `test` (these two by name): a pandas or polars DataFrame, a `datasets.Dataset`, a pyarrow Table,
    a mapping of column name -> list, a `(texts, labels)` or `(texts, text_pairs, labels)` tuple, or
    a file path as a pipeline names one. Without `test` (and `dev`), featx splits `train` as it
    splits one file. `text`, `label`, `text_pair`: column names (a tuple's are these). `model`: a
    model folder or hub name, or the [model] table. `finetune`: whether to fine-tune, or the
    [finetune] table. Any other section of a pipeline file is a keyword taking its table:
    `data={"label_names": [...]}`, `probe={"seeds": [0, 1]}`, `extract=...`, `curve={"enabled": True}`.
    """
    unknown = sorted(set(sections) - set(SECTIONS) - {"progress"})
    if unknown:
        raise FeatxError(f"featx.run got unknown keyword(s) {unknown}; besides its own it takes a "
                         f"pipeline's sections as tables: {sorted(set(SECTIONS) - {'model', 'finetune'})}")
    if not isinstance(finetune, (bool, Mapping)):
        raise FeatxError(f"finetune must be True, False or the [finetune] table, got {shown(finetune)}")
    root = Path(data_dir).expanduser().absolute()  # the pipeline file works from any folder
    inputs = writable_dir(root / "inputs", "the folder of featx.run's inputs", root=root)
    data = {"text": text, "label": list(label) if isinstance(label, (list, tuple)) else label,
            **({"text_pair": text_pair} if text_pair else {}), **dict(sections.pop("data", None) or {})}
    for split, value in {"train": train, "dev": dev, "test": test}.items():
        if value is not None:
            data[split] = str(stored(value, split, inputs, data))
    raw = {"name": name, "data_dir": str(root), "data": data, **sections,
           "model": dict(model) if isinstance(model, Mapping) else {"name": str(model)},
           "finetune": dict(finetune) if isinstance(finetune, Mapping) else {}}
    pipeline_from_dict(raw, source="featx.run")  # refused here, before the pipeline file is written
    text_of = toml_text(raw)
    path = inputs / f"{name}-{hashlib.sha256(text_of.encode()).hexdigest()[:DIGEST_CHARS]}.toml"
    refuse_link(path, "where featx.run writes the run's pipeline file")
    write_bytes(path, text_of.encode())
    return _stages(load_pipeline(path), path, finetune is not False)


def _stages(pipeline: Pipeline, path: Path, finetune: bool) -> Answer:
    """The CLI's `featx all` stages in order, then the report read back."""
    from featx.cache.extract import extract
    from featx.probe.stage import run_probe
    from featx.report.write import write_report

    extract(pipeline)
    run_probe(pipeline)
    if finetune:
        from featx.finetune.stage import run_finetune

        run_finetune(pipeline)
    if pipeline.curve.enabled:
        from featx.curve.stage import run_curve

        run_curve(pipeline)
    paths = write_report(pipeline.runs_dir, pipeline.reports_dir, pipeline.name, pipeline)
    verdict = json.loads(paths["json"].read_text())
    return Answer(verdict["text"], verdict["frozen"], verdict["tuned"], verdict["quality_ratio"],
                  verdict["compute_ratio"], verdict["comparison"], verdict, paths, path)


def stored(value, split: str, inputs: Path, data: dict) -> Path:
    """`value` as a file under `inputs` named by its content's sha256 (written once; the same
    data again is the same file, so the pipeline file and its cache pointer stay the same)."""
    if isinstance(value, (str, os.PathLike)):
        return Path(value).expanduser().absolute()
    if type(value).__module__.partition(".")[0] == "datasets":
        return _saved_dataset(value, split, inputs)
    import pyarrow.parquet as pq

    table = _arrow_table(value, split, data)
    return _by_content(inputs, split, ".parquet", lambda f: pq.write_table(table, f))


def _by_content(inputs: Path, split: str, suffix: str, write) -> Path:
    """`write(file)` into a new temporary file, then renamed to `<split>-<its sha256><suffix>`; a
    file of that name already there is kept when its content is that (else replaced: a stored
    file edited or truncated since), and a link there is refused."""
    fd, name = tempfile.mkstemp(prefix=f".{split}-", suffix=".tmp", dir=inputs)
    tmp = Path(name)
    try:
        with open(fd, "w+b") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        digest = _file_digest(tmp)
        path = inputs / f"{split}-{digest[:DIGEST_CHARS]}{suffix}"
        refuse_link(path, "where featx.run stores its inputs")
        if not (path.is_file() and _file_digest(path) == digest):
            os.replace(tmp, path)
        return path
    except OSError as exc:
        raise FeatxError(f"cannot store the {split} rows under {inputs} ({exc.strerror or exc}); free "
                         "some space or set data_dir to another folder") from None
    finally:
        tmp.unlink(missing_ok=True)


def _file_digest(path: Path, digest=None) -> str:
    digest = digest or hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _arrow_table(value, split: str, data: dict):
    """A pyarrow Table of `value`'s columns (a tuple's named `data`'s text, text_pair, label)."""
    import pyarrow as pa

    try:
        if isinstance(value, pa.Table):
            return value
        if type(value).__module__.partition(".")[0] == "pandas" and hasattr(value, "columns"):
            return _from_pandas(value, split, data)
        if hasattr(value, "to_arrow"):  # polars
            return value.to_arrow()
        if isinstance(value, Mapping):
            return pa.table({str(k): list(v) for k, v in value.items()})
        if isinstance(value, tuple) and len(value) in (2, 3):
            return pa.table(_tuple_columns(value, split, data))
    except (pa.ArrowException, TypeError, ValueError) as exc:
        raise FeatxError(f"{split}: its columns cannot be stored as Arrow columns ({str(exc)[:300]}); give "
                         "texts as strings and labels as strings or numbers, one type a column") from None
    raise FeatxError(f"{split}: featx.run takes a DataFrame, a datasets.Dataset, a pyarrow Table, a "
                     f"mapping of columns, a (texts, labels) tuple or a file path, not {type(value).__name__}")


def _tuple_columns(value: tuple, split: str, data: dict) -> dict:
    label = data["label"]
    if not isinstance(label, str):
        raise FeatxError(f"{split}: a (texts, labels) tuple holds one label column; give a DataFrame or "
                         "a mapping of columns for several label columns")
    if len(value) == 3 and "text_pair" not in data:
        raise FeatxError(f"{split}: a (texts, text_pairs, labels) tuple needs text_pair=<its column name>")
    names = [data["text"], *([data["text_pair"]] if len(value) == 3 else []), label]
    return {n: list(v) for n, v in zip(names, value)}


def _from_pandas(frame, split: str, data: dict):
    """A DataFrame's columns as Arrow, a named index as a column; a column the pipeline does not
    name that Arrow cannot hold (mixed types) is left out, one it names is an error naming it."""
    import pyarrow as pa

    if any(name is not None for name in frame.index.names):
        frame = frame.reset_index()
    named = {v for k in ("text", "text_pair", "label", "id", "split_column", "keep")
             for v in ([data[k]] if isinstance(data.get(k), str) else data.get(k) or ())}
    columns = {}
    for column in frame.columns:
        try:
            columns[str(column)] = pa.Array.from_pandas(frame[column])
        except (pa.ArrowException, TypeError, ValueError) as exc:
            if str(column) in named:
                raise FeatxError(f"{split}: column {shown(str(column))} cannot be stored as an Arrow column "
                                 f"({str(exc)[:200]}): give one type a column (strings, or numbers)") from None
            log.info("%s: column %r left out (featx.run reads no column of mixed types it is not told to)",
                     split, column)
    return pa.table(columns)


def _saved_dataset(value, split: str, inputs: Path) -> Path:
    """A `datasets.Dataset` saved with `save_to_disk` into a folder named by its Arrow files' and
    features' sha256 (its ClassLabel names are read as the labels, as from any saved folder)."""
    if isinstance(value, Mapping):
        raise FeatxError(f"{split}: a {type(value).__name__} holds several splits; pass each one: "
                         "train=d['train'], dev=d['validation'], test=d['test']")
    if not hasattr(value, "save_to_disk") or not hasattr(value, "features"):
        raise FeatxError(f"{split}: a {type(value).__name__} is read as it streams; give a Dataset "
                         "(datasets.Dataset.from_generator, or the dataset loaded without streaming)")
    tmp = Path(tempfile.mkdtemp(prefix=f".{split}-", dir=inputs))
    try:
        value.save_to_disk(str(tmp))
        digest = _folder_digest(tmp)
        path = inputs / f"{split}-{digest[:DIGEST_CHARS]}"
        refuse_link(path, "where featx.run stores its inputs")
        if path.exists() and _folder_digest(path) != digest:
            raise FeatxError(f"{path} does not hold what its name says (edited since featx.run stored it): "
                             "delete it and rerun")
        if not path.exists():
            try:
                os.rename(tmp, path)
            except OSError:  # another run stored the same content first
                if not path.is_dir():
                    raise
        return path
    except OSError as exc:
        raise FeatxError(f"cannot store the {split} dataset under {inputs} ({exc.strerror or exc}); "
                         "free some space or set data_dir to another folder") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _folder_digest(folder: Path) -> str:
    """sha256 of a saved dataset's features and Arrow files (its state.json holds a run's fingerprint)."""
    try:
        features = json.loads((folder / "dataset_info.json").read_text()).get("features")
    except (OSError, ValueError, AttributeError):
        features = None
    digest = hashlib.sha256(json.dumps(features, sort_keys=True).encode())
    for file in sorted(folder.glob("*.arrow")):
        digest.update(file.name.encode())
        _file_digest(file, digest)
    return digest.hexdigest()


def toml_text(raw: dict) -> str:
    """A pipeline's table as a TOML file: the top keys, then a table per section (a None value
    is a key left unset)."""
    lines = [f"{k} = {_value(v)}" for k, v in raw.items() if not isinstance(v, Mapping) and v is not None]
    for section, table in raw.items():
        if isinstance(table, Mapping) and table:
            lines += ["", f"[{section}]", *(f"{k} = {_value(v)}" for k, v in table.items() if v is not None)]
    text = "# written by featx.run\n" + "\n".join(lines) + "\n"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise FeatxError(f"featx.run: a setting holds a character that is not valid Unicode ({exc.reason} at "
                         f"{shown(exc.object[max(0, exc.start - 20):exc.end + 20])})") from None
    return text


def _value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):  # a TOML basic string: JSON's escapes are TOML's (DEL escaped too)
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, numbers.Integral):
        return repr(int(value))
    if isinstance(value, numbers.Real):
        return repr(float(value))
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, os.PathLike):
        return _value(str(value))
    raise FeatxError(f"featx.run: {shown(value)} is not a value a pipeline file holds (a string, number, "
                     "boolean or list of them)")
