"""The frozen side: heads trained on cached features under an honest protocol. The protocols and
hyperparameter search (`search`), one job from cache to record (`job`), the baselines kept per
data (`baselines`), and the stage (`stage`: `run_probe`).

Imports: top, config, heads, stats, runs, cache (its reader). No torch.
"""
