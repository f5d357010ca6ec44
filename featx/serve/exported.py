"""An export folder read back (`read_export`), trusting nothing in it. Every entry below the
folder must be a regular file or a folder, checked before any is opened (a FIFO blocks its
reader forever, and transformers opens the model's files itself); the manifest's fields are
checked (`read_manifest`); and every field that describes something else in the folder is
checked against it: a fine-tune's label names and their order, task and label count against its
config.json, its prompt, max_length and init against the featx_* keys export writes there, and
its weights for a trained head of that many outputs; a frozen configuration's layers against its
backbone's config.json, and every field that says how its head's features were made or its
outputs are read (featx.runs.headfiles.MADE_FIELDS: prompt, dtypes, init, max_length, pooling,
layers, label names in order, ...) against its head's binding, which the head file carries
(checked against the head itself when it is loaded: featx.serve.predict). A disagreement is one
error naming the field and both values: the folder was edited.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import stat
from pathlib import Path

from featx.errors import FeatxError
from featx.serve.manifest import MANIFEST, PARTIAL, Manifest, check_frozen, config_labels
from featx.tasks import TASKS

log = logging.getLogger("featx")

# More entries than an export ever holds (a backbone's files, a head, the manifest): a folder
# of more was not written by featx export.
MAX_ENTRIES = 10_000
EXPORT_AGAIN = "the folder was edited or damaged after featx export wrote it: export again"


def read_export(folder: Path) -> Manifest:
    """An export's manifest, once the folder's files are regular and its manifest agrees with
    them (a fine-tune's config.json and weights, a frozen backbone's layer count)."""
    if folder.name.endswith(PARTIAL):
        raise FeatxError(f"{folder} is a partial export (an export was interrupted there); export again")
    if not os.path.lexists(folder / MANIFEST):
        raise FeatxError(f"{folder} is not a featx export (no {MANIFEST}); give a pipeline file or "
                         "a folder written by featx export")
    check_files(folder)
    manifest = read_manifest(folder)
    if manifest.kind == "finetuned":
        check_finetuned(manifest, folder)
        return manifest
    if manifest.pooling != "text":
        check_layers(manifest, folder)
    check_frozen(manifest, f"{folder / MANIFEST}: {EXPORT_AGAIN}")
    return manifest


def check_files(folder: Path) -> None:
    """Every entry below `folder` is a regular file (or a link to one) or a folder (not a link
    to one, which would take the reader elsewhere), and there are at most MAX_ENTRIES."""
    from featx.files import READ_LIMIT
    from featx.files import kind_of

    count = 0
    for root, folders, files in os.walk(folder):  # a link to a folder is listed, never entered
        for name in folders + files:
            count += 1
            path = Path(root) / name
            if count > MAX_ENTRIES:
                raise FeatxError(f"{folder} holds more than {MAX_ENTRIES:,} files, more than any export; "
                                 f"it is not a folder featx export wrote: export again")
            if name in folders and path.is_symlink():
                raise FeatxError(f"{path} is a link to a folder; an export holds its own files (featx "
                                 f"export writes no link): {EXPORT_AGAIN}")
            try:
                info = os.stat(path)
            except OSError as exc:
                raise FeatxError(f"{path} cannot be read ({exc.strerror}): {EXPORT_AGAIN}") from None
            if not stat.S_ISREG(info.st_mode) and not stat.S_ISDIR(info.st_mode):
                raise FeatxError(f"{path} is {kind_of(info)}, not a regular file: an export holds regular "
                                 f"files only (a FIFO or a device would block or never end); {EXPORT_AGAIN}")
            if name.endswith(".json") and info.st_size > READ_LIMIT:  # read whole, by featx or transformers
                raise FeatxError(f"{path} holds {info.st_size:,} bytes, more than any JSON file of a model "
                                 f"or an export ({READ_LIMIT:,}); {EXPORT_AGAIN}")


def read_manifest(folder: Path) -> Manifest:
    """An export's manifest, its paths resolved against the folder (exports can move). An export
    is a file someone handed over: its fields are checked, its paths must stay inside the
    folder, and its backbone loads from safetensors only."""
    from featx.files import loads_json, read_text

    path = folder / MANIFEST
    text = read_text(path, "an export's manifest")
    try:
        raw = loads_json(text)
        if not isinstance(raw, dict):
            raise TypeError("not a JSON object")
        fields = {f.name for f in dataclasses.fields(Manifest)}
        manifest = Manifest(**{k: v for k, v in raw.items() if k in fields})
        _check_manifest(manifest)
    except (ValueError, TypeError) as exc:
        raise FeatxError(f"{path} is not a valid featx manifest ({str(exc)[:200]}); export again") from None
    inside = folder.resolve()

    def place(p):
        if p is None:
            return None
        resolved = (folder / p).resolve()
        if resolved != inside and inside not in resolved.parents:
            raise FeatxError(f"{path} names {str(p)[:100]!r}, outside the export folder; export again")
        return str(resolved)
    return dataclasses.replace(manifest, model_path=place(manifest.model_path),
                               head_file=place(manifest.head_file), checkpoint=place(manifest.checkpoint),
                               label_names=tuple(manifest.label_names), layers=tuple(manifest.layers),
                               allow_pickle=False)


def _check_manifest(m: Manifest) -> None:
    """The types every field must have (a TypeError names the first that does not)."""
    from featx.config.pipeline import ATTENTIONS, HEAD_INPUT_NAMES, PAIR_FEATURES, POOLING_NAMES
    from featx.serve.manifest import RESOLVED_DTYPE_NAMES

    def need(ok: bool, what: str):
        if not ok:
            raise TypeError(what)
    need(m.kind in ("frozen", "finetuned"), "kind is neither frozen nor finetuned")
    need(m.task in TASKS, f"task is not one of {', '.join(TASKS)}")
    need(isinstance(m.label_names, list) and m.label_names and all(isinstance(n, str) for n in m.label_names),
         "label_names is not a list of names (strings)")
    # featx trims every label name and refuses an empty one (featx.data); a manifest's must be so too.
    need(all(n.strip() and n == n.strip() for n in m.label_names),
         "label_names holds an empty or blank name, or one with spaces around it")
    need(isinstance(m.layers, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in m.layers),
         "layers is not a list of indices")
    # A fine-tune's pooling is its head input ("model": the architecture's own head, the default).
    need(m.pooling in POOLING_NAMES + ("text",) + (HEAD_INPUT_NAMES if m.kind == "finetuned" else ()), "pooling is not a pooling")
    for name in ("features", "head", "model_path", "model_fingerprint", "init", "compute_dtype", "store_dtype"):
        need(isinstance(getattr(m, name), str), f"{name} is not a string")
    need(m.store_dtype in ("float16", "float32"), "store_dtype is not float16 or float32")
    need(m.compute_dtype in RESOLVED_DTYPE_NAMES, f"compute_dtype is not one of {', '.join(RESOLVED_DTYPE_NAMES)}")
    need(len(set(m.label_names)) == len(m.label_names), "label_names names a label twice")
    need(isinstance(m.max_length, int) and m.max_length >= 2, "max_length is not a length")
    need(isinstance(m.threshold, (int, float)) and 0 <= m.threshold <= 1, "threshold is not in [0, 1]")
    need(isinstance(m.text_pair, bool), "text_pair is not true or false")
    if m.kind == "frozen":
        need(isinstance(m.head_file, str) and isinstance(m.head_sha256, str), "a frozen export names no head and its sha256")
    need(not str(m.head_file).endswith(".joblib"), "its head is a joblib pickle of an older featx, which "
         "featx no longer loads (a pickle runs code)")
    need(m.head_binding is None or isinstance(m.head_binding, dict), "head_binding is not an object")
    need(m.checkpoint is None, "an export carries its weights as a Hugging Face folder, not a checkpoint")
    need(m.target_scaler is None or _scaler_of(m), "target_scaler is not a mean and a positive std per target")
    need(m.combine in PAIR_FEATURES, f"combine is not one of {', '.join(PAIR_FEATURES)}")
    need(m.prompt is None or isinstance(m.prompt, str), "prompt is not a string")
    need(m.attention in ATTENTIONS, f"attention is not one of {', '.join(ATTENTIONS)}")
    need(m.head_input is None or m.head_input in HEAD_INPUT_NAMES, f"head_input is not one of {', '.join(HEAD_INPUT_NAMES)}")


def _scaler_of(m: Manifest) -> bool:
    """Whether the manifest's target_scaler is one a regression export keeps (featx/serve/export.py):
    finite means and positive finite stds, one per target."""
    import math

    scaler = m.target_scaler
    if not TASKS[m.task].regression or not isinstance(scaler, dict) or set(scaler) != {"mean", "std"}:
        return False
    mean, std = scaler["mean"], scaler["std"]
    numbers = lambda v: isinstance(v, list) and len(v) == len(m.label_names) and all(  # noqa: E731
        isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in v)
    return numbers(mean) and numbers(std) and all(x > 0 for x in std)


# ---------------------------------------------------------------------------------------------
# The manifest against the rest of the folder


def config_json(folder: Path) -> dict:
    """A model folder's config.json, read bounded (a regular file of at most 64 MiB, checked
    before it is opened)."""
    from featx.files import loads_json, read_text

    path = folder / "config.json"
    try:
        config = loads_json(read_text(path, "a model's config.json"))
    except ValueError as exc:
        raise FeatxError(f"{path} is not valid JSON ({str(exc)[:200]}): the model folder is damaged; "
                         "restore it (or export again)") from None
    if not isinstance(config, dict):
        raise FeatxError(f"{path} is not a JSON object: the model folder is damaged; restore it (or export again)")
    return config


def check_finetuned(m: Manifest, folder: Path) -> None:
    """A fine-tune's manifest (in the export `folder`) against its model's config.json (task,
    label names in order, label count, target scaler: what transformers' pipeline reads) and
    weights (a trained sequence-classification head with one output per label)."""
    model = Path(m.model_path)
    config = config_json(model)
    rows = trained_head_rows(model, config)
    problem = TASKS[m.task].problem_type
    expected = {str(i): name for i, name in enumerate(config_labels(m.task, m.label_names))}
    id2label = config.get("id2label")
    found = {str(k): v for k, v in id2label.items()} if isinstance(id2label, dict) else id2label
    differ = []
    if config.get("problem_type") != problem:
        differ.append(f"its task {m.task!r} is problem_type {problem!r}, config.json's problem_type is "
                      f"{config.get('problem_type')!r}")
    if found != expected:
        differ.append(f"its label_names {list(m.label_names)} ({len(expected)} outputs) against config.json's "
                      f"id2label {_listed(found)}")
    if config.get("featx_target_scaler") != m.target_scaler:
        differ.append(f"its target_scaler {m.target_scaler} against config.json's featx_target_scaler "
                      f"{config.get('featx_target_scaler')}")
    if m.head_input not in (None, "model"):
        differ.append(f"its head_input {m.head_input!r}: an exported fine-tune is its architecture's own "
                      "classifier (head_input 'model')")
    differ += _finetuned_inputs(m, config)
    if len(expected) not in rows:
        differ.append(f"its {len(expected)} outputs against the {' or '.join(map(str, rows))} of the "
                      "classification head in the weights")
    if differ:
        raise FeatxError(f"{folder / MANIFEST} disagrees with the model in {model}: {'; '.join(differ)}; "
                         f"{EXPORT_AGAIN}")


# The manifest's fields that say how an exported fine-tune reads its texts, and the config.json
# keys featx export writes them to (featx.serve.export).
FINETUNED_CONFIG_KEYS = {"prompt": "featx_prompt", "max_length": "featx_max_length", "init": "featx_init",
                         "init_seed": "featx_init_seed"}


def _finetuned_inputs(m: Manifest, config: dict) -> list[str]:
    """How the fine-tune reads its texts (prompt, max_length) and was initialised, against the
    featx_* keys of its config.json (a folder exported by an older featx holds none: not
    compared); a pair combination, which a fine-tune never has, is refused."""
    differ = [] if m.combine == "joint" else [f"its combine {m.combine!r}: a fine-tune encodes a pair jointly"]
    if not any(key in config for key in FINETUNED_CONFIG_KEYS.values()):
        log.debug("%s: config.json holds no featx_* keys (an older featx's export): "
                                         "its prompt, max_length and init are not compared", m.model_path)
        return differ
    for field, key in FINETUNED_CONFIG_KEYS.items():
        if key not in config or config[key] != getattr(m, field):
            found = repr(config[key]) if key in config else "nothing"
            differ.append(f"its {field} {getattr(m, field)!r} against config.json's {key} {found}")
    return differ


def _listed(id2label):
    """config.json's id2label as a list in index order, where its keys are 0..n-1."""
    if isinstance(id2label, dict) and set(id2label) == {str(i) for i in range(len(id2label))}:
        return [id2label[str(i)] for i in range(len(id2label))]
    return id2label


# The heads' names across architectures: BERT's classifier, GPT-2's score, BART's
# classification_head, XLNet's logits_proj.
HEAD_NAMES = ("classifier", "score", "classification_head", "logits_proj")


def trained_head_rows(folder: Path, config: dict) -> list[int]:
    """The output counts the classification head in `folder`'s weights can have (the rows of
    its 2-D weights); without a head (a frozen export's backbone called "finetuned") the class
    would start a new, random one and predict noise without a word."""
    from safetensors import safe_open

    architectures = config.get("architectures") or []
    shapes = {}
    for file in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(str(file), "np") as weights:
                shapes |= {k: weights.get_slice(k).get_shape() for k in weights.keys()
                           if any(name in k for name in HEAD_NAMES)}
        except (OSError, ValueError, RuntimeError) as exc:
            raise FeatxError(f"{file} is not a safetensors file ({str(exc)[:200]}): {EXPORT_AGAIN}") from None
    rows = sorted({shape[0] for k, shape in shapes.items() if k.endswith("weight") and len(shape) == 2})
    if not isinstance(architectures, list) or not rows or not any(
            isinstance(a, str) and a.endswith("ForSequenceClassification") for a in architectures):
        raise FeatxError(f"{folder} holds no trained sequence-classification head (config.json's "
                         f"architectures: {architectures or 'none'}): it is not a fine-tuned export, and "
                         "its head would be new and random. Export the fine-tune again (featx export "
                         "... --finetuned)")
    return rows


def check_layers(m: Manifest, folder: Path) -> None:
    """A frozen configuration's layers (in the export `folder`'s manifest) exist in its
    backbone (0 = the embeddings)."""
    from featx.backbone import resolve as R

    n_layers = R.num_layers(config_json(Path(m.model_path)))
    outside = [i for i in m.layers if not 0 <= i <= n_layers]
    if not m.layers or outside:
        raise FeatxError(f"{folder / MANIFEST} reads layers {list(m.layers)}, and the backbone in "
                         f"{m.model_path} has layers 0..{n_layers}: {EXPORT_AGAIN}")
