"""Using the answer: what a predictor needs (`manifest`), predictions on new texts (`predict`),
a folder that predicts wherever it is moved (`export`), and vectors without a pipeline
(`embedding`).

Imports: every package below it (top, config, data, backbone, heads, stats, runs, cache, probe,
finetune).
"""
