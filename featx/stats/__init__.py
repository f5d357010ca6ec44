"""Numbers the verdict rests on: metrics per task (`metrics`), bootstrap intervals and paired
comparisons (`bootstrap`), iterative stratification of multilabel rows (`stratify`).

Imports: featx's top modules only. No torch.
"""
