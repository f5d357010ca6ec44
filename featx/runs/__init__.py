"""Run records: the record's one type (`schema`) and the values its fields may hold when read
back (`fields`), where records and their predictions live and how they are written and read
(`records`; an arrays file checked before numpy opens it, `npz`), the pipeline's other
configurations and the commands that select them (`others`), fitted heads bound to their record
(`headfiles`), and the choice among records that the verdict and predict stand for (`choice`).

Imports: top, config, heads (a record's head file, the heads' registry), stats. No torch.
"""
