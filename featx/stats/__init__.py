"""Numbers the verdict rests on: metrics per task (`metrics`), bootstrap intervals and paired
comparisons (`bootstrap`), the rows that count as one observation (`duplicates`: texts compared
up to case, Unicode form, format characters and spacing, repeated rows grouped), iterative stratification of multilabel rows
(`stratify`).

Imports: featx's top modules only. No torch.
"""
