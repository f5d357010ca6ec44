"""Task types: one registry of what differs between binary, multiclass, multilabel and
regression, so a stage asks the task instead of branching on its name. No torch.

Scores (what a head or a fine-tuned model outputs, what `featx.stats.metrics.evaluate` takes):
binary (n,) P(positive); multiclass (n, K) class probabilities; multilabel (n, L) per-label
probabilities; regression (n, T) values on the original target scale.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TaskType:
    name: str
    primary: str
    """The metric a configuration is chosen by and the verdict compares (higher is better)."""
    metrics: tuple[str, ...]
    classes: bool
    """Labels are one class per row (binary, multiclass): stratified splits and folds, argmax."""
    thresholded: bool
    """Decisions need a threshold chosen on the selection split (multilabel)."""
    loss: str
    """The fine-tune's loss: cross_entropy, binary_cross_entropy or mse (on standardised targets)."""
    problem_type: str = "single_label_classification"
    """Hugging Face's name of the same loss (`config.problem_type`), set explicitly: DeBERTa-v2
    left to infer it reads multi-hot labels as soft cross-entropy targets, not BCE."""
    n_classes: int | None = None
    """The exact number of classes the task requires (binary: 2); None when any number will do."""

    @property
    def regression(self) -> bool:
        return self.loss == "mse"

    def n_outputs(self, n_labels: int) -> int:
        """binary -> 2 logits (softmax, as BertForSequenceClassification); else one per label/target."""
        return 2 if self.name == "binary" else n_labels

    def from_logits(self, logits: np.ndarray) -> np.ndarray:
        """Logits -> scores (regression: still standardised; the caller maps them back)."""
        logits = logits.astype(np.float64)
        if self.loss == "mse":
            return logits
        if self.loss == "binary_cross_entropy":
            return 1.0 / (1.0 + np.exp(-logits))
        shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
        probabilities = shifted / shifted.sum(axis=1, keepdims=True)
        return probabilities[:, 1] if self.name == "binary" else probabilities

    def probabilities(self, scores: np.ndarray) -> np.ndarray:
        """One column per class or label: binary (n, 2); multiclass, multilabel as they are."""
        return np.stack([1 - scores, scores], axis=1) if self.name == "binary" else scores

    def from_probabilities(self, probabilities: np.ndarray) -> np.ndarray:
        """One column per class -> scores: binary (n, 2) -> (n,) P(positive); the others as they are."""
        return probabilities[:, 1] if self.name == "binary" else probabilities

    def decode(self, scores: np.ndarray, names, threshold: float = 0.5):
        """Scores -> label names (classes), lists of names (multilabel), values (regression)."""
        names = np.asarray(names, dtype=object)
        if self.regression:
            return scores[:, 0] if scores.shape[1] == 1 else scores
        if self.thresholded:
            return [list(names[row >= threshold]) for row in scores]
        return names[(scores >= 0.5).astype(int) if self.n_classes == 2 else scores.argmax(axis=1)]

    def valid_labels(self, labels: np.ndarray, n_labels: int) -> bool:
        """Whether stored labels can be this task's: class indices in range, 0/1 rows, finite targets."""
        if self.classes:
            return labels.ndim == 1 and labels.dtype.kind in "iu" and bool(((labels >= 0) & (labels < n_labels)).all())
        if labels.ndim != 2 or labels.shape[1] != n_labels:
            return False
        return bool(np.isin(labels, (0, 1)).all()) if self.thresholded else bool(np.isfinite(labels).all())

    def score_dtype(self):
        """Stored predictions: float64, the values the metrics were computed from (probabilities
        in float32 would halve the file, but an AUC or a paired bootstrap recomputed from them
        moves in the fourth decimal, and two nearly equal probabilities become a tie)."""
        return np.float64


TASKS = {
    "binary": TaskType("binary", "mcc", ("accuracy", "f1", "mcc", "roc_auc"), classes=True,
                       thresholded=False, loss="cross_entropy", n_classes=2),
    "multiclass": TaskType("multiclass", "accuracy", ("accuracy", "macro_f1", "mcc"), classes=True,
                           thresholded=False, loss="cross_entropy"),
    "multilabel": TaskType("multilabel", "micro_f1", ("micro_f1", "macro_f1", "macro_roc_auc", "subset_accuracy"),
                           classes=False, thresholded=True, loss="binary_cross_entropy",
                           problem_type="multi_label_classification"),
    "regression": TaskType("regression", "pearson", ("mse", "mae", "r2", "pearson", "spearman"),
                           classes=False, thresholded=False, loss="mse", problem_type="regression"),
}
