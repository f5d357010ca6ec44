"""featx export: a pipeline's chosen configuration as a folder that `featx.load_predictor` reads
back wherever the folder is moved.

    featx export pipelines/trec.toml out/ --finetuned      # a standard Hugging Face folder
    featx export pipelines/trec.toml out/                  # the verdict's frozen configuration

A fine-tuned model becomes its architecture's AutoModelForSequenceClassification folder; a frozen
configuration, the backbone's files, its head (arrays and JSON) and the manifest. The record is
chosen as predict chooses it (featx.serve.manifest); predicting from the folder is featx.serve.predict's.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
from pathlib import Path

from featx.errors import FeatxError
from featx.serve.manifest import (MANIFEST, PARTIAL, Manifest, as_pipeline, check_sha256, checked_model,
                                  config_labels, manifest_for)
from featx.serve.exported import FINETUNED_CONFIG_KEYS
from featx.tasks import TASKS

log = logging.getLogger("featx")

PARTIAL_MARK = ".featx-export-in-progress"


def export(pipeline, out_dir: str | Path, *, head: str | None = None, finetuned: bool = False) -> Path:
    """A fine-tuned model -> a standard Hugging Face folder (AutoModelForSequenceClassification,
    pipeline("text-classification")); a frozen configuration -> the backbone folder, the head
    and a manifest. Both carry featx-predictor.json, which `load_predictor(folder)` reads.

    All or nothing: the export is built in `<out>.featx-partial` beside it and renamed to `out`
    when complete (a leftover partial folder is named so, and the next export replaces it). It
    carries only what featx itself loads safely: safetensors weights, the head as arrays and
    JSON, checked against its record before it is copied."""
    pipeline = as_pipeline(pipeline, "featx export")
    manifest = manifest_for(pipeline, head, finetuned)
    out = _export_target(Path(out_dir), pipeline, manifest)
    head_bytes = None
    if manifest.kind == "frozen":
        from featx.runs.headfiles import rebound_head

        # The head, checked against its record, leaves bound to every field the manifest says of
        # how its features were made (its binding's MADE_FIELDS): a reader compares the two.
        head_bytes = rebound_head(manifest.head_file, sha256=manifest.head_sha256,
                                  binding=manifest.head_binding, source=pipeline.source or "<pipeline>")
    partial = _fresh_partial(out)
    try:
        # Paths in the manifest are relative to the folder, so the export can be moved.
        if manifest.kind == "finetuned":
            _export_finetuned(manifest, partial)
            manifest = dataclasses.replace(manifest, model_path=".", checkpoint=None, head_input="model",
                                           target_scaler=None if folds_scaler(manifest) else manifest.target_scaler,
                                           model_fingerprint=_model_fingerprint(partial))
        else:
            _copy_model(Path(manifest.model_path), partial / "backbone")
            name = Path(manifest.head_file).name
            (partial / name).write_bytes(head_bytes)
            manifest = dataclasses.replace(manifest, model_path="backbone", head_file=name,
                                           head_sha256=hashlib.sha256(head_bytes).hexdigest())
        manifest = dataclasses.replace(manifest, allow_pickle=False)
        (partial / MANIFEST).write_text(json.dumps(dataclasses.asdict(manifest), indent=1) + "\n")
        (partial / PARTIAL_MARK).unlink()
        os.rename(partial, out)  # replaces an empty folder at `out`; never a full one
    except OSError as exc:
        shutil.rmtree(partial, ignore_errors=True)
        raise FeatxError(f"the export to {out} failed ({_os_reason(exc)}); nothing was written there: "
                         "free some space or choose another folder, and export again") from None
    except BaseException:  # an error or Ctrl-C: nothing half-built stays (a SIGKILL leaves the partial)
        shutil.rmtree(partial, ignore_errors=True)
        raise
    log.info("exported %s/%s (%s) to %s", manifest.features, manifest.head, manifest.kind, out)
    return out


def _export_target(out: Path, pipeline, manifest: Manifest) -> Path:
    """The export folder, refused before any work when it cannot be one: one of the pipeline's
    inputs or inside one (the model folder, the data directory), a file, a link, a folder with
    files in it, or a place that cannot be written."""
    from featx.files import refuse_link, writable_dir
    from featx.serve.output import pipeline_inputs, refuse_inputs

    out = Path(os.path.abspath(out))  # "." and ".." named: the export is renamed into place by its name
    here = Path.cwd()
    if out == here or out in here.parents:
        raise FeatxError(f"{out} is the folder featx runs in (or holds it); featx builds an export beside "
                         "its target and renames it into place, which would pull the current folder "
                         "away: export into a new folder, such as ./exported")
    refuse_inputs(out, pipeline_inputs(pipeline, manifest), "the export folder")
    refuse_link(out, "where featx would export")
    if out.exists():
        if not out.is_dir():
            raise FeatxError(f"{out} exists and is a file; export into a new folder")
        if any(out.iterdir()):
            raise FeatxError(f"{out} exists and is not empty; export into a new folder")
    writable_dir(out.parent, "the export's parent folder", fix="export into another folder")
    return out


def _fresh_partial(out: Path) -> Path:
    """An empty `<out>.featx-partial`, replacing one a killed export left (and only such one)."""
    from featx.files import refuse_link

    partial = out.with_name(out.name + PARTIAL)
    refuse_link(partial)
    if partial.exists():
        if not (partial / PARTIAL_MARK).is_file():
            raise FeatxError(f"{partial} exists and is not a partial featx export; move it away")
        log.info("removing %s, a partial export an interrupted run left", partial)
        shutil.rmtree(partial)
    partial.mkdir()
    (partial / PARTIAL_MARK).write_text("an unfinished featx export: safe to delete\n")
    return partial


def _os_reason(exc: OSError) -> str:
    import errno

    if exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
        return "the disk is full or a file-size limit applies"
    return exc.strerror or str(exc)


def _model_fingerprint(folder: Path) -> str:
    from featx.backbone import resolve as R

    return R.fingerprint(folder, allow_pickle=False)


def _copy_model(source: Path, target: Path) -> None:
    """The files the backbone's fingerprint covers, at the same relative paths, weights as
    safetensors only (an export never carries a pickle)."""
    from featx.backbone import resolve as R

    try:
        files = R.model_files(source, allow_pickle=False)
    except FeatxError as exc:
        raise FeatxError(f"{exc}. An export carries safetensors weights only") from None
    for file in files:
        relative = file.relative_to(source)
        (target / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(file, target / relative)


# Architectures whose own sequence-classification head is dropout + Linear on the pooler: a
# fine-tune with head_input = "pooler" is their class, parameter for parameter.
POOLER_HEAD_TYPES = ("bert", "albert", "megatron-bert", "nezha")


# A regression's scaler is folded into the exported output layer while every target's mean is
# within this many of its spreads of zero: float32's 24 bits then keep 4+ digits of the spread.
FOLD_MAX_RATIO = 1_000


def folds_scaler(m: Manifest) -> bool:
    """Whether the export folds the target scaler into its output layer (raw-scale logits)."""
    scaler = m.target_scaler
    return bool(TASKS[m.task].regression and scaler and all(
        abs(mean) <= FOLD_MAX_RATIO * std for mean, std in zip(scaler["mean"], scaler["std"])))


def _export_finetuned(m: Manifest, out: Path) -> None:
    """The fine-tuned model as its architecture's standard AutoModelForSequenceClassification
    folder, with its tokenizer: the model head is that class already; a pooler head on BERT or
    ALBERT is it parameter for parameter. A regression head predicts standardised targets: the
    scaler is folded into its output layer, so the exported logits are on the original scale,
    unless a target's mean is over FOLD_MAX_RATIO spreads from zero (then the manifest and
    config.json keep the scaler)."""
    from featx.backbone import load as B

    resolved = checked_model(m)
    config = _classifier_config(m, resolved.path)
    model = _finetuned_model(m, config)
    _rescale_outputs(m, config, model)
    model.save_pretrained(out)
    B.load_tokenizer(resolved.path).save_pretrained(out)
    # transformers writes model.safetensors through a private temporary file (mode 0600): every
    # file of the export takes the mode of config.json, which the user's umask made.
    mode = (out / "config.json").stat().st_mode & 0o777
    for file in out.iterdir():
        if file.is_file() and not file.is_symlink():
            file.chmod(mode)


def _classifier_config(m: Manifest, model_path):
    """The backbone's config as its standard sequence classifier's for the fine-tune's task and
    labels; refused when the fine-tune's head is not that classifier's."""
    from transformers import AutoConfig

    from featx.finetune import modeling as ML

    config = AutoConfig.from_pretrained(model_path, trust_remote_code=False)
    if m.head_input != ML.MODEL_HEAD and not (m.head_input == "pooler" and config.model_type in POOLER_HEAD_TYPES):
        raise FeatxError(f"this fine-tune reads {m.head_input!r} features with featx's linear head; "
                         f"{config.model_type}'s standard sequence classifier has a head of its own. "
                         "Fine-tune with finetune.head_input = \"model\" to export it, or use "
                         "featx.load_predictor on the pipeline")
    config.num_labels = ML.n_outputs(m.task, len(m.label_names))
    config.problem_type = TASKS[m.task].problem_type
    labels = config_labels(m.task, m.label_names)  # what a reader checks them against (exported.py)
    config.id2label = {i: str(name) for i, name in enumerate(labels)}
    config.label2id = {str(name): i for i, name in enumerate(labels)}
    # How featx reads the texts (and how the backbone started): a reader checks the manifest
    # against these (featx.serve.exported), and anyone else reads the prompt and length here.
    for field, key in FINETUNED_CONFIG_KEYS.items():
        setattr(config, key, getattr(m, field))
    return config


def _finetuned_model(m: Manifest, config):
    """The standard sequence classifier of `config` holding the fine-tuned weights (the
    checkpoint checked against its sha256); refused when they do not map onto it."""
    from safetensors.torch import load_file
    from transformers import AutoModelForSequenceClassification

    from featx.finetune import modeling as ML

    model = AutoModelForSequenceClassification.from_config(config)
    check_sha256(Path(m.checkpoint), m.checkpoint_sha256)
    saved = load_file(m.checkpoint)
    if m.head_input == ML.MODEL_HEAD:  # ReferenceClassifier keeps the class's own names under `model.`
        state = {k.removeprefix("model."): v for k, v in saved.items()}
    else:
        prefix = model.base_model_prefix
        state = {f"{prefix}.{k.removeprefix('backbone.')}": v for k, v in saved.items() if k.startswith("backbone.")}
        state |= {"classifier.weight": saved["classifier.weight"], "classifier.bias": saved["classifier.bias"]}
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith("position_ids")]
    if missing or unexpected:
        raise FeatxError(f"the fine-tuned weights do not map onto {type(model).__name__}: missing "
                         f"{missing[:5]}, unexpected {unexpected[:5]}")
    return model


def _rescale_outputs(m: Manifest, config, model) -> None:
    """A regression's target scaler folded into the model's output layer (`folds_scaler`), or
    else kept in `config` and the model's config.json, with a warning; nothing for a classifier."""
    import torch

    from featx.finetune import modeling as ML

    if folds_scaler(m):
        layer = ML.output_layer(ML.ReferenceClassifier(model))
        std = torch.tensor(m.target_scaler["std"], dtype=layer.weight.dtype)
        mean = torch.tensor(m.target_scaler["mean"], dtype=layer.weight.dtype)
        with torch.no_grad():
            layer.weight.mul_(std[:, None])
            layer.bias.mul_(std).add_(mean)
    elif TASKS[m.task].regression and m.target_scaler:
        # Targets far from zero against their spread: in float32 the folded output layer keeps too
        # few digits of the spread (1e9 + a spread of 100: every row the same value). The model
        # predicts standardised targets; featx maps them back in float64 (the manifest's
        # target_scaler), and anyone else reads the scaler from config.json.
        config.featx_target_scaler = m.target_scaler
        model.config.featx_target_scaler = m.target_scaler
        log.warning("the exported model predicts standardised targets (their mean is %s of their "
                    "spread from zero, past what float32 keeps in a folded output layer): "
                    "featx.load_predictor maps them back; elsewhere take logits * std + mean from "
                    "config.json's featx_target_scaler", "/".join(f"{abs(a) / b:.3g}x" for a, b in zip(
                        m.target_scaler["mean"], m.target_scaler["std"])))
