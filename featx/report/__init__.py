"""The answer written out: the records of one configuration (`collected`), the reported rows that
repeat another (`repeats`), the numbers the verdict rests on (`comparisons`) and the verdict
itself (`verdict`), the plots (`plots`), what the report's numbers rest on (`provenance`) and its
notes (`notes`), the table and pages as text (`render`), verdict.json with the pipeline's index
(`index`), and every file written (`write`).

Imports: top, config, stats, runs, cache (the cache's facts and texts). No torch.
"""
