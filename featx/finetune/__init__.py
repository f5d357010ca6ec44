"""The tuned side: the same backbone fine-tuned with its own head. The model, loss and scores
(`modeling`), one learning rate trained epoch by epoch and committed for resume (`training`),
the schedule and the plateau rule (`convergence`), and the stage (`stage`: `run_finetune`).

Imports: top, config, data, backbone, heads, stats, runs, cache, and probe (LP-FT starts its head
from the logistic probe).
"""
