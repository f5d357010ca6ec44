"""Using the answer: what a predictor needs (`manifest`), predictions on new texts (`predict`)
and where they are written (`output`), a folder that predicts wherever it is moved (`export`)
and that folder read back (`exported`), and vectors without a pipeline (`embedding`).

Imports: every package below it (top, config, data, backbone, heads, stats, runs, cache, probe,
finetune).
"""
