"""A fine-tune candidate's state and the files it is committed to after every epoch: its
weights, its optimizer's moments and the RNG (safetensors and JSON, never a pickle), the
selection scores of its anchor and best epochs, and `state.json`, which names them. A killed run
resumes from the last committed epoch and ends as an uninterrupted one does.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from featx.errors import FeatxError
from featx.files import atomic_write, loads_json, read_text, regular_file
from featx.runs.records import write_json

BEST_SCORES = "best-scores.safetensors"  # the best epoch's selection scores, beside best.safetensors


@dataclass
class Candidate:
    """One learning rate's training state; saved after every epoch, so a killed run resumes."""
    learning_rate: float
    epoch: int = 0
    step: int = 0
    best_score: float = float("-inf")
    best_epoch: int = 0
    stale: int = 0
    """Epochs in a row at the peak rate that were not progress over the anchor."""
    threshold: float = 0.5
    anchor_epoch: int = 0
    """The last epoch that was progress (featx.finetune.convergence), 0 before the first scored one."""
    anchor_score: float = float("-inf")
    anchor_threshold: float = 0.5
    anchor_file: str | None = None
    """The anchor epoch's selection scores, which the next epochs are compared with row by row."""
    kept_annealed: bool = False
    """Whether the cooldown's last epoch was kept over a best epoch that scored no better beyond
    the selection split's noise."""
    needed: list = dataclasses.field(default_factory=list)
    """[epoch, the gain over the anchor that counted as progress] of every judged epoch."""
    plateau_epoch: int = 0
    """The epoch whose score had not risen beyond noise for `patience` epochs (0: not yet)."""
    cooldown_from: int | None = None
    """The optimizer step where the final decay began (None: the rate is still at its peak)."""
    cooldown_steps: int = 0
    cooldown_epoch: int = 0
    """The cooldown's first epoch (0: none yet)."""
    stopped_by: str | None = None
    """None while it may go on; "patience" (plateau, then cooldown), "max_epochs", "budget",
    "diverged" or "halving"."""
    seconds: float = 0.0
    train_rows: int = 0
    eval_rows: int = 0
    loss: list = dataclasses.field(default_factory=list)
    select: list = dataclasses.field(default_factory=list)
    epoch_seconds: list = dataclasses.field(default_factory=list)
    """Training seconds (evaluation included) spent when each epoch ended, cumulative."""
    weights_file: str | None = None
    optimizer_file: str | None = None
    """The last committed epoch's files (what a resumed run starts from)."""

    @property
    def name(self) -> str:
        # 12 digits: two rates that print alike under :g (2e-5, 2.0000001e-5) would share a folder
        # and resume from each other's state; the usual rates keep their names (lr-2e-05).
        return f"lr-{self.learning_rate:.12g}"

    @property
    def converged(self) -> bool:
        """The selection score plateaued at the peak rate: `patience` epochs without a gain over
        the anchor beyond the selection split's noise."""
        return self.plateau_epoch > 0

    @property
    def cooling(self) -> bool:
        return self.cooldown_from is not None


STATE_FIELDS = [f.name for f in dataclasses.fields(Candidate)]


def commit(setup, model, optimizer, candidate: Candidate) -> None:
    """Commit the epoch: its weights and optimizer state under new names, then the state file
    that names them (a crash before it leaves the previous epoch's files in charge), then
    drop the older files."""
    from safetensors.torch import save_model

    folder = setup.directory / candidate.name
    folder.mkdir(parents=True, exist_ok=True)
    candidate.weights_file = f"epoch-{candidate.epoch}.safetensors"
    candidate.optimizer_file = f"epoch-{candidate.epoch}.optimizer.safetensors"
    atomic_write(folder / candidate.weights_file, lambda p: save_model(model, str(p)))
    atomic_write(folder / candidate.optimizer_file, lambda p: save_training_state(p, optimizer))
    save_state(setup, candidate)
    for old in [*folder.glob("epoch-*"), *folder.glob("anchor-*")]:
        if old.name not in (candidate.weights_file, candidate.optimizer_file, candidate.anchor_file):
            old.unlink()


def save_training_state(path: Path, optimizer) -> None:
    """The optimizer's moments, its settings and the RNG, as safetensors (the tensors) and JSON
    (the rest): nothing a resumed run reads back is a pickle. The learning rate is a function of
    the candidate's step and cooldown (its state.json)."""
    from safetensors.torch import save_file

    state = optimizer.state_dict()
    tensors = {"rng": torch.get_rng_state()}
    plain = {}
    for index, values in state["state"].items():
        for name, value in values.items():
            if torch.is_tensor(value):
                tensors[f"state.{index}.{name}"] = value.detach().cpu().contiguous()
            else:
                plain[f"{index}.{name}"] = value
    meta = {"param_groups": state["param_groups"], "plain": plain}
    save_file(tensors, str(path), metadata={"featx": json.dumps(meta)})


def load_training_state(path: Path, optimizer) -> None:
    from safetensors import SafetensorError, safe_open

    regular_file(path, "the training state featx wrote")  # opened by name
    try:
        with safe_open(str(path), "pt") as f:
            meta = loads_json(f.metadata()["featx"])
            tensors = {k: f.get_tensor(k) for k in f.keys()}
        state: dict[int, dict] = {}
        for key, value in list(tensors.items()) + list(meta["plain"].items()):
            if key == "rng":
                continue
            index, name = key.removeprefix("state.").split(".", 1)
            state.setdefault(int(index), {})[name] = value
        optimizer.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
        torch.set_rng_state(tensors["rng"])
    except (SafetensorError, OSError, KeyError, ValueError, TypeError) as exc:
        raise FeatxError(f"{path} is not the training state featx wrote ({type(exc).__name__}: "
                         f"{str(exc)[:200]}); delete its folder ({path.parent}) to train that learning "
                         "rate again") from None


def save_state(setup, candidate: Candidate) -> None:
    folder = setup.directory / candidate.name
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / "state.json", {"run_hash": setup.run_hash} | dataclasses.asdict(candidate))


def load_state(setup, candidate: Candidate) -> Candidate:
    path = setup.directory / candidate.name / "state.json"
    if not path.is_file():
        return candidate
    saved = json_or_none(path)
    if not isinstance(saved, dict) or saved.get("run_hash") != setup.run_hash:
        return candidate
    loaded = Candidate(**{k: saved[k] for k in STATE_FIELDS if k in saved})
    # A larger cap than the one that stopped it: train on (the budget is checked again at once),
    # at the peak rate again when it had not plateaued (the cap's cooldown is undone).
    if loaded.stopped_by == "max_epochs" and loaded.epoch < setup.max_epochs or loaded.stopped_by == "budget":
        loaded.stopped_by = None
        if not loaded.converged:
            loaded.cooldown_from, loaded.cooldown_steps, loaded.cooldown_epoch = None, 0, 0
    # Killed past the cap it is resumed with (finetune.max_epochs lowered since): its cap stopped
    # it, and the record says so.
    if loaded.stopped_by is None and loaded.epoch >= setup.max_epochs:
        loaded.stopped_by = "max_epochs"
    return loaded


def json_or_none(path: Path):
    """A state or record file featx wrote, or None when it is unreadable (then it is redone)."""
    try:
        return loads_json(read_text(path, "a state file featx wrote"))
    except (FeatxError, ValueError):
        return None


def save_scores(setup, candidate: Candidate, name: str, scores: np.ndarray) -> None:
    """An epoch's selection scores, which later epochs are compared with row by row."""
    from safetensors.numpy import save_file

    folder = setup.directory / candidate.name
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write(folder / name, lambda p: save_file({"scores": np.ascontiguousarray(scores, dtype=np.float64)}, str(p)))


def read_scores(setup, candidate: Candidate, name: str) -> np.ndarray:
    """The selection scores a candidate's file `name` holds (its anchor's, or its best epoch's)."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    path = setup.directory / candidate.name / name
    regular_file(path, "the selection scores featx wrote")  # opened by name
    try:
        scores = load_file(str(path))["scores"]
    except (SafetensorError, OSError, KeyError) as exc:
        raise FeatxError(f"{path} is not the selection scores featx wrote ({type(exc).__name__}); delete "
                         f"its folder ({path.parent}) to train that learning rate again") from None
    if len(scores) != len(setup.select.labels):
        raise FeatxError(f"{path} holds {len(scores)} selection scores, the selection split has "
                         f"{len(setup.select.labels)} rows; delete its folder ({path.parent}) to train again")
    return scores


