"""What a predictor needs (`Manifest`), from a pipeline or from an export: `manifest_for` reads
the pipeline's current cache and picks its record (the verdict's frozen configuration, a named
head, or the best fine-tune). `checked_model` and `check_sha256` refuse files that are not the
ones a manifest names. Reading an export's manifest back is featx.serve.exported's; running the
model featx.serve.predict's; writing an export featx.serve.export's.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from featx.errors import FeatxError, shown
from featx.runs.schema import Record

log = logging.getLogger("featx")

# The dtypes a model computes in (featx.backbone.batching.TORCH_DTYPES' names): what a manifest may name.
RESOLVED_DTYPE_NAMES = ("float32", "bfloat16", "float16")

MANIFEST = "featx-predictor.json"
PARTIAL = ".featx-partial"  # the suffix of an export still being built (featx.serve.export)


@dataclass(frozen=True)
class Manifest:
    """What a predictor needs, read from a pipeline's cache and records or from an export."""
    kind: str
    """"frozen" (a head on cached features) or "finetuned"."""
    task: str
    label_names: tuple[str, ...]
    features: str
    head: str
    pooling: str
    layers: tuple[int, ...]
    model_path: str
    model_fingerprint: str
    init: str
    init_seed: int | None
    max_length: int
    compute_dtype: str
    store_dtype: str
    text_pair: bool
    threshold: float
    combine: str = "joint"
    """A text pair's features: joint, or `featx.heads.pairs` of its two texts encoded alone."""
    prompt: str | None = None
    """The prompt put before every text, as extraction did."""
    attention: str = "auto"
    """The attention implementation extraction asked for."""
    head_file: str | None = None
    """Frozen: the head file (arrays and JSON, `featx.heads.serialize`)."""
    head_sha256: str | None = None
    """The head file's sha256, as its record names it: another file is refused."""
    head_binding: dict | None = None
    """The record the head was fitted for and how its features were made (`featx.runs.headfiles.head_binding`,
    with this manifest's `bound_fields`); the head's own binding must say the same, and so must this manifest."""
    allow_pickle: bool = False
    """Whether pickled .bin backbone weights may be loaded (the pipeline's model.allow_pickle;
    never for an export, which carries safetensors only)."""
    checkpoint: str | None = None
    """Fine-tuned: the best weights (safetensors)."""
    checkpoint_sha256: str | None = None
    """Their sha256, as the fine-tune's record names it (checked before they are loaded)."""
    head_input: str | None = None
    target_scaler: dict | None = None
    primary_metric: str | None = None
    record_metrics: dict | None = None
    """The record's test metrics, for the user's reference."""


def config_labels(task: str, label_names) -> list[str]:
    """The labels an exported fine-tune's config.json names (id2label, in output order): the
    label names, one per output (binary: its two classes)."""
    from featx.tasks import TASKS

    names = [str(name) for name in label_names]
    return ["0", "1"] if TASKS[task].n_outputs(len(names)) == 2 and len(names) != 2 else names


def bound_fields(m: Manifest) -> dict:
    """The manifest's fields that a head's binding holds (featx.runs.headfiles' IDENTITY_FIELDS
    but the seed, and MADE_FIELDS), as JSON values."""
    from featx.runs.headfiles import IDENTITY_FIELDS, MADE_FIELDS

    fields = {k: getattr(m, k) for k in MADE_FIELDS + IDENTITY_FIELDS if hasattr(m, k)}
    return fields | {"layers": list(m.layers), "label_names": list(m.label_names)}


def check_frozen(m: Manifest, fix: str) -> None:
    """A frozen configuration's manifest agrees with its head's binding (`head_binding`, which
    the head file's own is checked against when it is read: featx.runs.headfiles.check_binding)
    on every field the binding holds (`bound_fields`: the features, head and task, and how the
    features were made and the outputs are read), and its pooling, layers and combination spell
    its features. An edited manifest (another prompt, dtype, task, layer or label order) would
    predict other numbers, or put them under other names, without a word; `fix` says what to do."""
    from featx.probe.job import Features

    binding = m.head_binding
    if not isinstance(binding, dict):
        raise FeatxError("the manifest binds its head to no record (head_binding is missing): it was "
                         f"edited or written by an older featx; {fix}")
    differ = [f"{k} {v!r} against the head's {binding[k]!r}" + _counted(k, v, binding[k])
              for k, v in bound_fields(m).items() if k in binding and binding[k] != v]
    spelled = Features(m.pooling, tuple(m.layers), m.combine).name
    if spelled != m.features:
        differ.append(f"pooling, layers and combine spell {spelled!r}, not its features {m.features!r}")
    if m.combine != "joint" and not m.text_pair:
        differ.append(f"combine {m.combine!r} combines a text pair's two texts, and text_pair is false")
    if differ:
        raise FeatxError(f"the manifest disagrees with its head: {'; '.join(differ)}: {fix}")


def _counted(field: str, names, bound) -> str:
    if field != "label_names" or not isinstance(bound, list) or len(names) == len(bound):
        return ""
    return f" (the manifest names {len(names)} labels, the head was fitted on {len(bound)})"


def checked_model(m: Manifest):
    """The backbone files, refused unless they are the ones the cache (or export) was built from."""
    from featx.backbone import resolve as R

    resolved = R.resolve(m.model_path)
    found = R.fingerprint(resolved.path, allow_pickle=m.allow_pickle)
    if found != m.model_fingerprint:
        raise FeatxError(f"the model files at {resolved.path} (fingerprint {found[:16]}) are not the "
                         f"ones this head was trained on (fingerprint {m.model_fingerprint[:16]}); "
                         "restore them, or rerun extract and probe with the new files")
    return resolved


def check_sha256(path: Path, expected: str | None) -> None:
    """`path` is the file its record names: a regular file (checked before it is opened: a FIFO
    would block the read forever) whose sha256 is `expected`."""
    import hashlib

    from featx.files import regular_file

    regular_file(path, "the fine-tuned weights")
    with open(path, "rb") as f:
        found = hashlib.file_digest(f, "sha256").hexdigest()
    if found != expected:
        raise FeatxError(f"{path} is not the fine-tuned model its record names (its sha256 differs): it "
                         "was replaced or changed since; rerun featx finetune")


# ---------------------------------------------------------------------------------------------
# Choosing the record to predict with


def as_pipeline(pipeline, command: str):
    """A pipeline given as a TOML path or a `Pipeline`, as a `Pipeline`; an export folder is
    refused with how to open one (`command` names what was asked of it)."""
    from featx.config.pipeline import Pipeline
    from featx.config.load import load_pipeline

    if not isinstance(pipeline, Pipeline):
        refuse_export(Path(pipeline), command)
    return pipeline if isinstance(pipeline, Pipeline) else load_pipeline(pipeline)


def refuse_export(path: Path, command: str) -> None:
    """An export folder where a pipeline file is expected is named as one: `command` reads a
    pipeline's cache and records, which an export does not carry."""
    if path.is_dir() and (os.path.lexists(path / MANIFEST) or path.name.endswith(PARTIAL)):
        raise FeatxError(f"{str(path)!r} is a folder written by featx export, not a pipeline file: {command} "
                         "takes the pipeline file the export was made from. An export predicts in Python: "
                         f"featx.load_predictor({str(path)!r}).predict(texts)")


def manifest_for(pipeline, head: str | None, finetuned: bool) -> Manifest:
    """The chosen record of the pipeline's current cache, as a Manifest."""
    from featx.cache.plan import cached_plan
    from featx.runs.records import record_dir

    if head is not None and finetuned:
        raise FeatxError("give --head or --finetuned, not both")
    # What the cache says of itself (its key, task, labels, model fingerprint, lengths, dtypes):
    # nothing planned again; the predictor checks the model files against the fingerprint
    # when it loads them (`checked_model`).
    plan = cached_plan(pipeline)
    meta = plan.meta
    record = _current_record(pipeline, meta["key"], head, finetuned)
    directory = record_dir(pipeline.runs_dir, record)
    if record.stage == "probe":
        _check_probe_finished(directory, pipeline, record, chosen_by_verdict=head is None)
    common = dict(allow_pickle=pipeline.model.allow_pickle,
                  task=meta["task"], label_names=tuple(meta["label_names"]), features=record.features,
                  head=record.head, model_path=str(plan.model.path), model_fingerprint=plan.fingerprint,
                  init=meta["init"], init_seed=meta.get("init_seed"), max_length=int(meta["max_length"]),
                  compute_dtype=meta["compute_dtype"], store_dtype=meta["store_dtype"],
                  text_pair=bool(meta.get("text_pair")), prompt=meta.get("prompt"),
                  attention=meta.get("attention", "auto"),
                  threshold=float(record.threshold or 0.5), primary_metric=record.primary_metric,
                  record_metrics=record.metrics)
    if record.stage == "finetune":
        return _finetuned_manifest(pipeline, directory, record, common)
    from featx.runs.headfiles import head_binding, head_entry

    entry = head_entry(record, pipeline.source or "<pipeline>")
    manifest = Manifest(kind="frozen", pooling=record.pooling, layers=tuple(record.layers),
                        combine=record.combine, head_file=str(directory / "heads" / entry["file"]),
                        head_sha256=entry["sha256"], **common)
    # The head must have been made as the cache says its features are (its binding's MADE_FIELDS).
    return dataclasses.replace(manifest, head_binding=head_binding(record, entry["seed"]) | bound_fields(manifest))


def _current_record(pipeline, key: str, head: str | None, finetuned: bool) -> Record:
    """The record to predict with, among the current configuration's records on the cache `key`."""
    from featx.runs.records import current_records, pipeline_records, probe_config_hash, probe_dir

    # The current configuration's records only, as the report takes them; the others (another
    # probe or fine-tune configuration on this cache, or another cache) are named when nothing fits.
    everything = pipeline_records(pipeline.runs_dir, pipeline.name)
    records = current_records(pipeline, everything, key)
    mine = {id(r) for r in records}
    probes = probe_dir(pipeline.runs_dir, pipeline.name, key, probe_config_hash(pipeline.probe))
    try:
        return _choose(records, head, finetuned, pipeline, others=[r for r in everything if id(r) not in mine])
    except FeatxError as exc:
        from featx.runs.records import probe_interrupted

        if not finetuned and probe_interrupted(probes, probe_config_hash(pipeline.probe)) is not None:
            raise FeatxError(f"{exc}. The last probe of this configuration was interrupted before it "
                             "wrote them: rerun it to finish") from None
        raise


def _finetuned_manifest(pipeline, directory: Path, record: Record, common: dict) -> Manifest:
    """A fine-tune record's Manifest, once its weights are found where and as it names them."""
    from featx.runs.records import checkpoint_path

    checkpoint = checkpoint_path(directory, record)
    source = pipeline.source or "<pipeline>"
    # Weights named by a record are taken from this run's folder only, and only as written.
    if not checkpoint.resolve().is_relative_to(directory.resolve()) or not os.path.exists(checkpoint):
        raise FeatxError(f"the fine-tuned weights {checkpoint} are gone (or not under {directory}); "
                         f"rerun featx finetune {source}")
    if not checkpoint.is_file():  # a FIFO or a device: reading it would block or never end
        raise FeatxError(f"the fine-tuned weights {checkpoint} are not a regular file; remove it and rerun "
                         f"featx finetune {source}")
    if not isinstance(record.checkpoint_sha256, str):
        raise FeatxError(f"the fine-tune record of {checkpoint} names no sha256 of its weights (an "
                         f"older featx wrote it); rerun featx finetune {source}")
    # Predictions run in the dtype the record's own test scores were computed in (float32 on a
    # CPU), not the cache's extraction dtype: in bf16 a regression's scores move by up to 0.27
    # on a 100..400 scale, and a probability by 4e-4, from the record's.
    evaluated = record.hyperparameters["eval_dtype"]
    if evaluated in RESOLVED_DTYPE_NAMES:
        common = common | {"compute_dtype": evaluated}
    return Manifest(kind="finetuned", pooling=record.pooling, layers=tuple(record.layers),
                    checkpoint=str(checkpoint), checkpoint_sha256=record.checkpoint_sha256,
                    head_input=record.pooling, target_scaler=record.target_scaler, **common)


def _choose(records: list[Record], head: str | None, finetuned: bool, pipeline,
            others: tuple | list = ()) -> Record:
    """The record to predict with; `others` are this pipeline's records of other configurations
    (named when nothing of the current one fits, with the command that selects them)."""
    from featx.runs.choice import best_frozen, best_tuned

    source = pipeline.source or "<pipeline>"
    if finetuned:
        frozen = best_frozen(records, pipeline.runs_dir)
        metric = frozen.primary_metric if frozen else None
        tunes = [r for r in records if r.stage == "finetune"]
        tuned = best_tuned(records, metric) if metric else (tunes[0] if tunes else None)
        if tuned is None:
            raise FeatxError(f"no fine-tune record of the current configuration for this cache"
                             f"{_elsewhere(others, pipeline, 'finetune', ('INPUT', '--finetuned'))}: run "
                             f"`featx finetune {source}` first")
        return tuned
    if head is None:
        chosen = best_frozen(records, pipeline.runs_dir)
        if chosen is None:
            raise FeatxError(f"no probe record of the current configuration for this cache yet"
                             f"{_elsewhere(others, pipeline, 'probe', ('INPUT',))}: run `featx probe {source}` "
                             "first (the default head is the verdict's best frozen configuration)")
        return chosen
    features, sep, name = head.partition("/")
    # A head as the records name it, or as the report shows it (a regression's `logistic` is `ridge`).
    matches = [r for r in records if r.stage == "probe" and r.features == features and name in (r.head, r.shown_head)]
    if not sep or not matches:
        available = sorted(f"{r.features}/{r.shown_head}" for r in records if r.stage == "probe"
                           and r.protocol["name"] != "mteb")
        raise FeatxError(f"no probe record {shown(head)} for this cache; heads are named features/head, "
                         f"and these exist: {', '.join(available) or 'none (run featx probe)'}"
                         f"{_elsewhere(others, pipeline, 'probe', ('INPUT', '--head', head))}")
    return max(matches, key=lambda r: r.created)


def _elsewhere(others, pipeline, stage: str, args: tuple[str, ...]) -> str:
    """The configurations of `stage` records of this pipeline other than the current one, each
    with the command that predicts with it (featx.runs.records.elsewhere)."""
    from featx.runs.others import elsewhere

    lines = elsewhere([r for r in others if r.stage == stage], pipeline, "predict", args=args, limit=4)
    return (f" (records of {len(lines)} other configuration(s) exist: " + "; ".join(lines) + ")") if lines else ""


def _check_probe_finished(directory: Path, pipeline, record: Record, chosen_by_verdict: bool) -> None:
    """An interrupted probe's best record is the best of the fits that finished, not the
    verdict's choice: refused for the default head, said for a named one."""
    from featx.runs.records import probe_config_hash, probe_interrupted

    status = probe_interrupted(directory, probe_config_hash(pipeline.probe))
    if status is None:
        return
    source = pipeline.source or "<pipeline>"
    what = (f"the last probe of this configuration was interrupted ({status.get('planned')} fits "
            f"planned, not all have records)")
    if chosen_by_verdict:
        raise FeatxError(f"{what}: the best of the fits that finished is not the verdict's "
                         f"configuration. Rerun `featx probe {source}` to finish it, or name a head "
                         f"with --head {record.features}/{record.head}")
    log.warning("%s; predicting with %s/%s as asked", what, record.features, record.head)
