"""The learning curve: how the frozen-vs-tuned answer moves with the number of labelled rows.

`stage` trains both sides again at a ladder of labelled-row budgets drawn from the training split
(featx.stats.ladder): the verdict's frozen choice (its features and head, its hyperparameters
chosen again) and the fine-tune's recipe, each point a record scored on the full test split. The
numbers (intervals, fits, crossover) are featx.stats.curve's, the sentences and the plot the
report's (featx.report.curve).

Imports: top, config, stats, runs, cache, probe, finetune, report (the frozen choice it retrains).
"""
