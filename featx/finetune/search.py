"""The fine-tune's learning-rate search: every candidate trained to convergence (`full`), or
successive halving (every candidate one epoch, the better half on, one more epoch per round,
until one is left, which trains to convergence). Every candidate's state is on disk after each
epoch, so the decisions replay when a killed run resumes.
"""
from __future__ import annotations

import logging
import math

from featx.errors import FeatxError
from featx.finetune.checkpoints import Candidate, load_state, save_state
from featx.finetune.training import Setup, train

log = logging.getLogger("featx")

def rank(candidate: Candidate) -> tuple[float, float]:
    """How candidates are ranked, by halving and by the final pick alike: the best selection
    score, then the smaller learning rate (the safer one for a pretrained backbone). One order
    for both: the pick is never a candidate halving dropped after one epoch."""
    return candidate.best_score, -candidate.learning_rate


def _done(candidate: Candidate) -> str:
    """What a checkpoint holds of one learning rate: its epochs, best score, and why it stopped."""
    if not candidate.epoch:
        return f"{candidate.name} not started"
    stopped = f", stopped by {candidate.stopped_by}" if candidate.stopped_by else ", continues"
    best = (f"best {candidate.best_score:.4f} at epoch {candidate.best_epoch}" if candidate.best_epoch
            else "no score yet")
    return f"{candidate.name} {candidate.epoch} epoch(s) done, {best}{stopped}"


def search(setup: Setup) -> list[Candidate]:
    """Train the learning-rate candidates (successive halving, or each to convergence); every
    candidate's state is on disk after each epoch, so the decisions replay on resume."""
    cfg = setup.cfg
    candidates = [load_state(setup, Candidate(lr)) for lr in cfg.learning_rates]
    setup.resumed_seconds = sum(c.seconds for c in candidates)
    if setup.resumed_seconds:
        log.info("resuming the fine-tune from its checkpoints (%.0f s spent before): %s", setup.resumed_seconds,
                 "; ".join(_done(c) for c in candidates))
    if len(candidates) == 1 or setup.strategy == "full":
        for candidate in candidates:
            train(setup, candidate, candidates, until=setup.max_epochs)
    else:
        alive, rung = list(candidates), 1
        while len(alive) > 1:
            for candidate in alive:
                train(setup, candidate, candidates, until=rung)
            # A finished candidate (patience, cap) stays in the comparison with its best score.
            ranked = sorted((c for c in alive if c.best_epoch), key=rank, reverse=True)
            keep = ranked[:math.ceil(len(alive) / 2)] or alive[:1]
            for candidate in alive:
                if candidate not in keep and candidate.stopped_by is None:
                    candidate.stopped_by = "halving"
                    save_state(setup, candidate)
            alive, rung = keep, rung + 1
        train(setup, alive[0], candidates, until=setup.max_epochs)
    if not any(c.best_epoch for c in candidates):
        raise FeatxError("fine-tuning produced no usable epoch: every learning rate diverged or the "
                         "selection metric was never a number; check the data and the learning rates")
    return candidates
