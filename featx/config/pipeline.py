"""Pipeline configs: the frozen dataclasses of a pipeline file, each validated where it is
defined. This module holds the pipeline and what it runs on (`[data]`, `[model]`); how each
stage runs (`[extract]`, `[probe]`, `[finetune]`) is `featx.config.stages`'s, and the closed sets,
limits and layer arithmetic are `featx.config.rules`'s. Every one of those names is importable
from here, the one place callers import a config from. Reading a file, applying overrides and
giving commands back is `featx.config.load`'s.

A pipeline file (`pipelines/<name>.toml`) describes one experiment: the data, the backbone and
how each stage runs. Every field has a default and a docstring; unknown keys are errors (a typo
must not silently fall back to a default). Command-line overrides use dotted keys:
`extract.dtype="bfloat16"`, `data.max_rows=500`.

Relative paths in a pipeline are relative to the directory featx runs from (the project root
when run through `make`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

# Re-exported: callers import every config name from featx.config.pipeline, wherever it is defined.
from featx.config.rules import (ATTENTIONS, BASELINES, BUILTIN_NAMES, COMPUTE_DTYPES, DEFAULT_HEADS, FORMATS,  # noqa: F401
                               GRIDS, HEAD_INPUT_NAMES, HEAD_NAMES, INITS, LAYER_SHORTHANDS, MAX_INT, MAX_LR,
                               MAX_SEED, MAX_THREADS, MODEL_POOLING_NAMES, PAIR_FEATURES, POOLING_NAMES, PROTOCOLS,
                               QUOTING, SEARCHES, STORE_DTYPES, TASK_NAMES, WARN_LR, ZERO_TRAINING, check_finite,
                               resolve_layers)
from featx.errors import FeatxError, check_choice, shown
from featx.tasks import TASKS
from featx.config.stages import CurveConfig, ExtractConfig, FinetuneConfig, ProbeConfig


@dataclass(frozen=True)
class DataConfig:
    builtin: str | None = None
    """Built-in offline dataset read from installed packages: "trec", "sms-spam", "vader-movies"."""
    path: str | None = None
    """One file holding every row; split by `split_column`, or by a seeded stratified split."""
    train: str | tuple[str, ...] | None = None
    """Training split file (or a list of files with the same columns). Given alone, it is split
    like `path`."""
    dev: str | tuple[str, ...] | None = None
    """Development split file(s): hyperparameters and early stopping are chosen on it."""
    test: str | tuple[str, ...] | None = None
    """Test split file(s): reported numbers come from it."""
    format: str | None = None
    """File format: "csv", "tsv", "jsonl", "parquet", or "label-text" (`label text...` per line,
    as TREC ships); inferred from the file suffix when unset."""
    header: bool = True
    """Whether CSV/TSV files start with a header row. Without one, name the columns in `columns`."""
    columns: tuple[str, ...] | None = None
    """Column names for CSV/TSV files without a header row (extra trailing fields are ignored)."""
    delimiter: str | None = None
    """Field separator of CSV/TSV files: one character (";" for a European spreadsheet's CSV, "|")
    or "\\t"; unset: "," for .csv, a tab for .tsv and .txt."""
    quoting: str = "minimal"
    """CSV quoting: "minimal" (standard quotes) or "none" (quotes are text; GLUE TSVs need this)."""
    encoding: str = "utf-8"
    """Text encoding of the files (TREC's original files are "latin-1")."""
    text: str | None = None
    """Column holding the text (default "text")."""
    text_pair: str | None = None
    """Second text column for sentence-pair tasks; pairs are encoded together with token types."""
    label: str | tuple[str, ...] | None = None
    """Label column (default "label"); a list of columns for multilabel (0/1 each) or
    multi-target regression."""
    label_sep: str | None = None
    """Separator for a multilabel column stored as one string ("2,17")."""
    label_regex: str | None = None
    """Regex with one group that picks the class out of each raw label: "^([A-Z]+):" turns
    TREC's "NUM:dist" into its coarse class "NUM". A JSON list's labels are matched one by one;
    a label_sep field is matched whole and its group split ("^T:(.*)" on "T:a|b" gives a, b)."""
    label_names: str | tuple[str, ...] | None = None
    """Names for integer labels: a list, or a file with one name per line (labels index into it);
    names are trimmed, as labels are."""
    id: str | None = None
    """Column with a unique row id; when unset, ids are `<split>-<row number>`."""
    split_column: str | None = None
    """Column naming each row's split (train / dev or validation or val / test)."""
    task: str | None = None
    """binary, multiclass, multilabel or regression; inferred from the labels when unset."""
    dev_fraction: float = 0.1
    """Share of rows for dev when featx splits one file."""
    test_fraction: float = 0.1
    """Share of rows for test when featx splits one file."""
    split_seed: int = 0
    """Seed of the stratified split of a single file."""
    keep: tuple[str, ...] | None = None
    """Extra columns stored in the cache beside the labels (TREC keeps its fine label)."""
    max_rows: int | None = None
    """Use only the first N rows of each split (after splitting): quick trials."""
    drop_empty: bool = False
    """Drop the rows whose text (or second text) is empty or missing, instead of refusing the data
    with the list of them; the cache and every record say how many rows were dropped per split."""
    drop_in_train: bool = False
    """Drop the dev and test rows whose text (and second text) train holds too, the same text up
    to case, Unicode normalisation, invisible format characters and spacing: scores on them
    reward memorising the training rows. The cache and every record say how many were dropped;
    without it the report counts them."""

    def __post_init__(self):
        check_finite(self)
        self._check_sources()
        self._check_file_format()
        self._check_task_and_fractions()
        self._check_label_regex()
        if self.max_rows is not None and self.max_rows < 1:
            raise FeatxError(f"data.max_rows must be a positive integer, got {self.max_rows}")
        self._check_column_names()
        self._check_labels()

    def _check_sources(self) -> None:
        """Exactly one source of rows, and split files or a split column, never both."""
        sources = [self.builtin is not None, self.path is not None, self.train is not None]
        if sum(sources) != 1:
            raise FeatxError(
                "[data] needs exactly one source: `builtin` (trec, sms-spam, vader-movies), "
                "`path` (one file) or `train` (with optional `dev` and `test`)")
        if (self.dev or self.test) and self.train is None:
            raise FeatxError("[data] `dev`/`test` files need a `train` file beside them")
        if self.split_column is not None and (self.dev or self.test):
            # The files are read whole, so the column would be checked and then unused: a row of
            # train.csv marked "test" would be trained on.
            raise FeatxError(f"data.split_column ({shown(self.split_column)}) splits one file, and "
                             "`dev`/`test` files are the splits already: unset one of them")
        if self.builtin is not None:
            check_choice(self.builtin, BUILTIN_NAMES, "built-in dataset")

    def _check_file_format(self) -> None:
        """How the files are read: their format, CSV quoting, the names of header-less columns
        and the field separator."""
        if self.format is not None:
            check_choice(self.format, FORMATS, "data.format")
        check_choice(self.quoting, QUOTING, "data.quoting")
        if self.columns is not None:
            if self.header:  # else the file's header row is read as a row of data (a class "label")
                raise FeatxError("data.columns names the columns of CSV/TSV files without a header row: "
                                 "set data.header = false as well, or unset data.columns to use the "
                                 "header's names")
            twice = [c for i, c in enumerate(self.columns) if c in self.columns[:i]]
            if twice:  # else the last of them is read, the first's values lost
                raise FeatxError(f"data.columns names {shown(twice[0])} twice; give each column its own "
                                 "name")
        if self.delimiter is not None and (self.delimiter != "\\t" and (
                len(self.delimiter) != 1 or self.delimiter in "\"\r\n" or self.delimiter.isalnum()
                or not self.delimiter.isascii())):
            raise FeatxError(f"data.delimiter must be one ASCII separator character such as \";\" or \"|\" "
                             f"(\"\\t\" for a tab), got {shown(self.delimiter)}: the CSV reader splits fields at "
                             "one byte; save the file with one of these")

    def _check_task_and_fractions(self) -> None:
        """The task's name, and the shares of dev and test when featx splits one file."""
        if self.task is not None:
            check_choice(self.task, TASK_NAMES, "data.task")
        for name in ("dev_fraction", "test_fraction"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise FeatxError(f"data.{name} must be in [0, 1), got {value}")
        if self.dev_fraction + self.test_fraction >= 1.0:
            raise FeatxError("data.dev_fraction + data.test_fraction must leave rows for training")

    def _check_label_regex(self) -> None:
        """The label regex compiles, with exactly one group."""
        if self.label_regex is not None:
            import regex  # what featx matches labels with (it can stop a runaway match)

            try:
                if regex.compile(self.label_regex).groups != 1:
                    raise FeatxError(f"data.label_regex {shown(self.label_regex)} needs exactly one group")
            except (regex.error, re.error, RecursionError, OverflowError) as exc:
                raise FeatxError(f"data.label_regex {shown(self.label_regex)} is not a regex: "
                                 f"{str(exc)[:200]}") from None

    def _check_column_names(self) -> None:
        """Every column named (the label's, the texts', the id's, the split's) has a name."""
        if self.label is not None and not isinstance(self.label, str) and not self.label:
            raise FeatxError("data.label is an empty list; give the label column's name, or a list of "
                             "columns (one 0/1 column per label, or one per regression target)")
        for role in ("text", "text_pair", "id", "split_column"):
            if getattr(self, role) is not None and not str(getattr(self, role)).strip():
                # An empty name is falsy: text = "" would silently read the default column "text".
                raise FeatxError(f"data.{role} is empty; give a column's name (or leave it unset)")
        if self.label is not None and any(not str(c).strip() for c in
                                          ([self.label] if isinstance(self.label, str) else self.label)):
            raise FeatxError("data.label holds an empty column name; give the label column's name")
        if self.builtin is None:
            labels = [self.label or "label"] if isinstance(self.label or "label", str) else list(self.label)
            roles = [("text", self.text or "text"), ("text_pair", self.text_pair), ("id", self.id),
                     ("split_column", self.split_column)] + [("label", c) for c in labels]
            named = [(role, column) for role, column in roles if column is not None]
            for i, (role, column) in enumerate(named):
                other = next((r for r, c in named[:i] if c == column and r != role), None)
                if other is not None:  # one column in two roles: labels that are the texts, a pair of a text with itself
                    raise FeatxError(f"data.{other} and data.{role} both name column {shown(column)}; each "
                                     "role needs its own column (unset the one that is not meant)")

    def _check_labels(self) -> None:
        """How labels are read fits the label columns and the task: the separator, the regex and
        the names of one column's labels, and each label column given once."""
        if self.label_sep == "":  # str.split("") would end in ValueError's traceback on the first row
            raise FeatxError("data.label_sep is empty; give the separator between a field's labels, such "
                             "as \",\" or \"|\" (or leave it unset for one label a row)")
        several = self.label is not None and not isinstance(self.label, str) and len(self.label) > 1
        if self.label_regex is not None and several:
            raise FeatxError("data.label_regex picks the class out of one label column's values; with several "
                             "label columns (0/1 each, or regression targets) there is none to pick: unset "
                             "data.label_regex")
        regression = self.task is not None and TASKS[self.task].regression
        if self.label_names is not None and (regression or several):
            # The targets' or the columns' names would be the names, these dropped unsaid.
            raise FeatxError("data.label_names names the classes (or labels) of one label column; "
                             + ("a regression has targets, not classes" if regression else
                                "with several label columns, their names are the labels")
                             + ": unset data.label_names")
        if self.label is not None and not isinstance(self.label, str):
            # Two label columns of one name: one column read twice (a label set twice, or a
            # target twice, says nothing new).
            twice = [c for i, c in enumerate(self.label) if c in self.label[:i]]
            if twice:
                raise FeatxError(f"data.label names column {shown(twice[0])} twice; give each label "
                                 "column once")


@dataclass(frozen=True)
class ModelConfig:
    name: str = "sentence-transformers/all-MiniLM-L6-v2"
    """Model directory or hub name, resolved: local path, HF cache, packaged copy, hub."""
    init: str = "pretrained"
    """"pretrained" loads the checkpoint's weights (missing ones are an error); "random" is the
    explicitly named control: the same architecture, freshly initialised from its config."""
    seed: int = 0
    """Seed of the random initialisation of the "random" control."""
    revision: str | None = None
    """Hub revision (branch, tag or commit) when the model comes from the hub."""
    allow_pickle: bool = False
    """Allow pickled `.bin` weights when no safetensors file exists (a pickle can run code)."""
    trust_remote_code: bool = False
    """Run a model repository's own modeling code (config.json `auto_map`). It executes on load:
    set this only for a repository you trust; without it such a model is refused."""

    def __post_init__(self):
        check_finite(self)
        check_choice(self.init, INITS, "model.init")
        if not self.name:
            raise FeatxError("model.name is empty; give a model directory or a hub name")


@dataclass(frozen=True)
class Pipeline:
    name: str
    """Experiment name: names the report folder and the cache files."""
    data: DataConfig
    model: ModelConfig = field(default_factory=ModelConfig)
    extract: ExtractConfig = field(default_factory=ExtractConfig)
    probe: ProbeConfig = field(default_factory=ProbeConfig)
    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)
    curve: CurveConfig = field(default_factory=CurveConfig)
    data_dir: str = "data"
    """Where caches, runs and reports are written (git-ignored)."""
    progress: bool = True
    """Progress bars (extraction: texts/s and tokens/s; probe: fits done)."""
    source: str | None = None
    """The pipeline file this was read from (set by `load_pipeline`)."""
    overrides: tuple[str, ...] = ()
    """The `key=value` overrides applied on top of the file (set by `load_pipeline`), so a
    message can give the exact command that reproduces or continues a run."""

    def __post_init__(self):
        check_finite(self)
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", self.name):
            raise FeatxError(f"pipeline name {shown(self.name)} must start with a letter or a digit, "
                             "then letters, digits, '.', '_' or '-' (it names files under the data directory)")
        if not str(self.data_dir).strip():  # "" would be the current folder, unsaid
            raise FeatxError("data_dir is empty; give the folder for caches, runs and reports (\"data\" "
                             "by default), or leave it unset")

    @property
    def root(self) -> Path:
        """The data directory, `~` expanded (as model.name is)."""
        return Path(self.data_dir).expanduser()

    @property
    def cache_dir(self) -> Path:
        return self.root / "cache"

    @property
    def runs_dir(self) -> Path:
        return self.root / "runs"

    @property
    def reports_dir(self) -> Path:
        return self.root / "reports"

    @property
    def baselines_dir(self) -> Path:
        """The baselines fitted per data, reused by every probe of the same data and settings."""
        return self.root / "baselines"


SECTIONS = {"data": DataConfig, "model": ModelConfig, "extract": ExtractConfig,
            "probe": ProbeConfig, "finetune": FinetuneConfig, "curve": CurveConfig}
