"""Heads on cached features: scikit-learn estimators and their registry with grids (`registry`),
featx's logistic regressions (`logistic`), scikit-learn's MLP fitted where early stopping cannot
split (`mlp`), the ridge scout (`ridge`), LightGBM (`boosting`), TF-IDF (`lexical`), torch heads
(`torchheads`: the linear probes, `torchmlp`: the MLP probe, `torchbase`: what they share),
multilabel columns that do not vary (`varying`), standardised regression targets (`targets`),
text-pair feature sets (`pairs`), and their arrays+JSON files (`serialize`: never a pickle; the
state each class is rebuilt with, `states`, by the value rules of `rules`, LightGBM's text model
checked by `boostertext`).

Imports: featx's top modules only. No torch outside the torch heads, which import it lazily.
"""
