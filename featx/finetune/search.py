"""The fine-tune's learning-rate search: every candidate trained to convergence (`full`), or
successive halving (every candidate one epoch, the better half on, one more epoch per round,
until one is left, which trains to convergence). Every candidate's state is on disk after each
epoch, so the decisions replay when a killed run resumes.
"""
from __future__ import annotations

import math

from featx.errors import FeatxError
from featx.finetune.checkpoints import Candidate, load_state, save_state
from featx.finetune.training import Setup, train


def rank(candidate: Candidate) -> tuple[float, float]:
    """How candidates are ranked, by halving and by the final pick alike: the best selection
    score, then the smaller learning rate (the safer one for a pretrained backbone). One order
    for both: the pick is never a candidate halving dropped after one epoch."""
    return candidate.best_score, -candidate.learning_rate


def search(setup: Setup) -> list[Candidate]:
    """Train the learning-rate candidates (successive halving, or each to convergence); every
    candidate's state is on disk after each epoch, so the decisions replay on resume."""
    cfg = setup.cfg
    candidates = [load_state(setup, Candidate(lr)) for lr in cfg.learning_rates]
    setup.resumed_seconds = sum(c.seconds for c in candidates)
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
