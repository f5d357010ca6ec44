"""Run records: the record's one type (`schema`), where records and their predictions live and
how they are written and read (`records`), fitted heads bound to their record (`headfiles`),
and the choice among records that the verdict and predict stand for (`choice`).

Imports: top, config, heads (a record's head file), stats. No torch.
"""
