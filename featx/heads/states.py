"""The state each class of a head file is rebuilt with: the attributes featx writes, each value
checked (its type, its range, the closed set it comes from) before the class is rebuilt. No torch.

A head file names only the classes of `featx.heads.serialize.allowed()`, but a class is only as
safe as the values it is given: TfidfVectorizer with `input = "filename"` opens the files its
texts name, a `token_pattern` of nested repeats takes exponential time on one text, a Pipeline's
`memory` writes a cache to disk, MultiOutputRegressor's `n_jobs` starts processes at predict,
every LightGBM parameter reaches its C++ predictor, and a count sizes an output. So a state may
hold only the attributes featx writes (the parameters featx/heads/registry.py, lexical.py and
boosting.py construct, the library defaults beside them, and the fitted attributes), each with a
value featx writes (featx/heads/rules.py): the exact regex and analyzers of the TF-IDF baseline,
no callable, no path, thread counts and sizes in bounds, counts that agree with the arrays they
count, and LightGBM's text model as featx/heads/boostertext.py checks it. `states()` is the
closed set, one entry per allowlisted class; `problem(cls, state)` says what is wrong, or None.
Saving runs the same check, so featx never writes a head it would refuse to read.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import numpy as np

from featx.heads.rules import (BOOL, BOOLS, COUNT, DEVICE, FLOATS, FRACTION, INTS, LABELS, LAYERS, MAX_THREADS,
                               NAME, NONNEGATIVE, POSITIVE, SEED, SIZE, VERSION, Rule, data, either, exactly,
                               instance, items, mapping, maybe, number, one, real, shown, text)


@dataclass(frozen=True)
class State:
    rules: dict[str, Rule]
    """Every attribute the class's state may hold, and the rule its value must pass."""
    agree: Callable[[dict], str | None] | None = None
    """The counts the state holds against the arrays they count: None when they agree."""
    sklearn: bool = True
    """scikit-learn's own classes carry `_sklearn_version` (featx's and LightGBM's do not)."""


def problem(cls: type, state: dict) -> str | None:
    """What in `state` featx does not write for `cls` (the attribute, its value and what featx
    writes there), or None."""
    spec = states().get(cls)
    if spec is None:
        return f"{cls.__name__} is not a class a head file may hold"
    rules = spec.rules | ({"_sklearn_version": VERSION} if spec.sklearn else {})
    for key, value in state.items():
        if key not in rules:
            return f"{cls.__name__} has the attribute {shown(key)}, which featx does not write"
        said = rules[key](value)
        if said is not None:
            return f"{cls.__name__}.{key} is {shown(value)}, a value featx does not write (it writes {said})"
    said = spec.agree(state) if spec.agree is not None else None
    return None if said is None else f"{cls.__name__}.{said}"


def estimator(value) -> str | None:
    """An estimator of a class a head file may hold (checked itself when it was rebuilt)."""
    return None if type(value) in states() else "an estimator of featx.heads.serialize.allowed()"


def lightgbm_model(value) -> str | None:
    from featx.heads.boostertext import problem as text_problem

    return text_problem(value)


def counted(count: str, counts: str, offset: int = 0, size=len) -> Callable[[dict], str | None]:
    """A state's `count` is `size` of its `counts` (+ offset), when it holds both: predict sizes
    its work and its output by the count, and the arrays are what the file holds."""
    def agree(state):
        if count in state and counts in state and state[count] != size(state[counts]) + offset:
            return (f"{count} is {shown(state[count])}, not what its {counts} count "
                    f"({size(state[counts]) + offset}): a value featx does not write")
        return None
    return agree


def _outputs(classes) -> int:
    return len(classes) if isinstance(classes, list) else 1


ITERATIONS = number(1, 10 ** 7, integer=True)
HIDDEN = number(1, 65_536, integer=True)
LEAVES = number(2, 131_072, integer=True)  # LightGBM's own limit
TOLERANCE = NONNEGATIVE


@functools.cache
def states() -> dict[type, State]:
    """One entry per class of `featx.heads.serialize.allowed()` (a test keeps the two equal)."""
    return _sklearn() | _networks() | _lightgbm() | _featx()


def _sklearn() -> dict[type, State]:
    """scikit-learn's classes, with the parameters featx constructs them with."""
    from sklearn.compose import TransformedTargetRegressor
    from sklearn.dummy import DummyClassifier, DummyRegressor
    from sklearn.feature_extraction.text import TfidfTransformer, TfidfVectorizer
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.multiclass import OneVsRestClassifier
    from sklearn.multioutput import MultiOutputClassifier, MultiOutputRegressor
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import LabelBinarizer, LabelEncoder, StandardScaler

    fitted = {"n_features_in_": COUNT}
    wrapper = {"estimator": estimator, "n_jobs": one(None), "estimators_": items(estimator), **fitted}
    return {
        Pipeline: State({"steps": items(items(either(text(r"[a-z_]{1,64}", "a step name"), estimator),
                                              kind=tuple, sizes=(2, 2)), sizes=(1, 4)),
                         "memory": one(None), "verbose": one(False), "transform_input": one(None)}),
        StandardScaler: State({"copy": one(True), "with_mean": one(True), "with_std": one(True), "mean_": FLOATS,
                               "var_": FLOATS, "scale_": FLOATS, "n_samples_seen_": either(NONNEGATIVE, INTS),
                               **fitted}),
        LabelBinarizer: State({"neg_label": one(0), "pos_label": one(1), "sparse_output": BOOL, "classes_": LABELS,
                               "y_type_": one("binary", "multiclass", "multilabel-indicator"),
                               "sparse_input_": one(False)}),
        LabelEncoder: State({"classes_": LABELS}),
        LogisticRegression: State({
            "C": POSITIVE, "class_weight": one(None), "dual": BOOL, "fit_intercept": one(True),
            "intercept_scaling": one(1), "l1_ratio": one(0.0, None), "max_iter": ITERATIONS, "n_jobs": one(None),
            "penalty": one("deprecated", "l2"), "multi_class": one("deprecated", "auto"), "random_state": maybe(SEED),
            "solver": one("lbfgs", "liblinear"), "tol": TOLERANCE, "verbose": one(0), "warm_start": BOOL,
            "classes_": LABELS, "coef_": FLOATS, "intercept_": FLOATS, "n_iter_": INTS, **fitted}),
        Ridge: State({"alpha": NONNEGATIVE, "copy_X": one(True), "fit_intercept": one(True), "max_iter": one(None),
                      "positive": one(False), "random_state": maybe(SEED), "solver": one("auto"), "tol": TOLERANCE,
                      "coef_": FLOATS, "intercept_": either(FLOATS, real), "n_iter_": maybe(either(INTS, COUNT)),
                      "solver_": one("cholesky", "sparse_cg", "svd", "lsqr", "sag", "saga", "lbfgs"), **fitted}),
        TransformedTargetRegressor: State({
            "regressor": estimator, "transformer": maybe(instance(StandardScaler)), "func": one(None),
            "inverse_func": one(None), "check_inverse": BOOL, "regressor_": estimator,
            "transformer_": instance(StandardScaler), "_training_dim": number(1, 2, integer=True), **fitted}),
        MultiOutputClassifier: State(wrapper | {"classes_": items(LABELS)}),
        MultiOutputRegressor: State(wrapper),
        OneVsRestClassifier: State(wrapper | {"verbose": one(0), "label_binarizer_": instance(LabelBinarizer),
                                              "classes_": LABELS}),
        DummyClassifier: State({
            "strategy": one("prior"), "_strategy": one("prior"), "constant": one(None), "random_state": maybe(SEED),
            "class_prior_": either(FLOATS, items(FLOATS)), "classes_": either(LABELS, items(LABELS)),
            "n_classes_": either(COUNT, items(COUNT)), "n_outputs_": COUNT, "sparse_output_": one(False), **fitted},
            counted("n_outputs_", "classes_", size=_outputs)),
        DummyRegressor: State({"strategy": one("mean"), "constant": one(None), "quantile": one(None),
                               "constant_": FLOATS, "n_outputs_": COUNT, **fitted},
                              counted("n_outputs_", "constant_", size=lambda a: a.size)),
        TfidfVectorizer: State(_tfidf() | {"vocabulary_": mapping(text(r"(?s).+", "an n-gram"), COUNT),
                                           "fixed_vocabulary_": one(False), "_tfidf": instance(TfidfTransformer),
                                           "_stop_words_id": maybe(number(0, 2 ** 64, integer=True))}),
        TfidfTransformer: State({"norm": one("l2"), "use_idf": one(True), "smooth_idf": one(True),
                                 "sublinear_tf": one(True), "idf_": FLOATS, **fitted}),
    }


def _tfidf() -> dict[str, Rule]:
    """The vectorizer's parameters as featx/heads/lexical.py sets them: texts given as content,
    its two analyzers, their n-gram ranges and token patterns exactly; no callable anywhere."""
    from featx.heads import lexical

    return {"input": one("content"), "encoding": one("utf-8"), "decode_error": one("strict"),
            "strip_accents": one(None), "lowercase": one(True), "preprocessor": one(None), "tokenizer": one(None),
            "analyzer": one("word", "char_wb"), "stop_words": one(None),
            "token_pattern": one(lexical.WORD_PATTERN, lexical.CHAR_PATTERN),
            "ngram_range": one(lexical.WORD_NGRAMS, lexical.CHAR_NGRAMS), "max_df": one(1.0), "min_df": one(1),
            "max_features": one(lexical.MAX_FEATURES), "vocabulary": one(None), "binary": one(False),
            "dtype": one(np.float32), "norm": one("l2"), "use_idf": one(True), "smooth_idf": one(True),
            "sublinear_tf": one(True)}


def _networks() -> dict[type, State]:
    """scikit-learn's MLPs (and featx's MLPHead, MLPRegressorHead) and their optimizers."""
    from sklearn.neural_network import MLPClassifier, MLPRegressor
    from sklearn.neural_network._stochastic_optimizers import AdamOptimizer, SGDOptimizer
    from sklearn.preprocessing import LabelBinarizer

    from featx.heads.mlp import MLPHead, MLPRegressorHead

    network = {
        "hidden_layer_sizes": items(HIDDEN, kind=tuple, sizes=(1, 4)), "activation": one("relu"),
        "solver": one("adam"), "alpha": NONNEGATIVE, "batch_size": one("auto"), "learning_rate": one("constant"),
        "learning_rate_init": POSITIVE, "power_t": NONNEGATIVE, "max_iter": ITERATIONS, "shuffle": one(True),
        "random_state": maybe(SEED), "tol": TOLERANCE, "verbose": one(False), "warm_start": one(False),
        "momentum": number(0, 1), "nesterovs_momentum": one(True), "early_stopping": BOOL,
        "validation_fraction": number(0, 1, above=True), "beta_1": number(0, 1), "beta_2": number(0, 1),
        "epsilon": POSITIVE, "n_iter_no_change": ITERATIONS, "max_fun": ITERATIONS,
        "loss": one("log_loss", "squared_error"),
        "_best_coefs": LAYERS, "_best_intercepts": LAYERS, "_label_binarizer": instance(LabelBinarizer),
        "_no_improvement_count": COUNT, "_optimizer": maybe(instance(AdamOptimizer, SGDOptimizer)),
        "_random_state": instance(np.random.RandomState),
        "best_loss_": maybe(real), "best_validation_score_": maybe(real), "classes_": LABELS, "coefs_": LAYERS,
        "intercepts_": LAYERS, "loss_": real, "loss_curve_": items(real), "n_features_in_": COUNT,
        "n_iter_": COUNT, "n_layers_": number(2, 6, integer=True), "n_outputs_": COUNT,
        "out_activation_": one("logistic", "softmax", "identity"), "t_": COUNT,
        "validation_scores_": maybe(items(real))}
    layers = counted("n_layers_", "coefs_", offset=1)
    optimizer = {"learning_rate_init": POSITIVE, "learning_rate": real}
    return {cls: State(network, layers, sklearn=cls.__module__.startswith("sklearn."))
            for cls in (MLPClassifier, MLPRegressor, MLPHead, MLPRegressorHead)} | {
        AdamOptimizer: State(optimizer | {"beta_1": number(0, 1), "beta_2": number(0, 1), "epsilon": POSITIVE,
                                          "t": COUNT, "ms": LAYERS, "vs": LAYERS}, sklearn=False),
        SGDOptimizer: State(optimizer | {"lr_schedule": one("constant", "invscaling", "adaptive"),
                                         "momentum": number(0, 1), "nesterov": BOOL, "power_t": NONNEGATIVE,
                                         "velocities": LAYERS}, sklearn=False)}


def _lightgbm() -> dict[type, State]:
    """LightGBM's estimators as featx/heads/boosting.py builds them (each parameter reaches its C++
    predictor), and the Booster with its text model."""
    from lightgbm import Booster, LGBMClassifier, LGBMRegressor
    from sklearn.preprocessing import LabelEncoder

    model = {
        "boosting_type": one("gbdt"), "class_weight": one(None), "colsample_bytree": FRACTION,
        "importance_type": one("split"), "learning_rate": POSITIVE, "max_depth": one(-1),
        "min_child_samples": COUNT, "min_child_weight": one(0.001), "min_split_gain": one(0.0),
        "n_estimators": ITERATIONS, "n_jobs": number(1, MAX_THREADS, integer=True), "num_leaves": LEAVES,
        "objective": one(None), "random_state": SEED, "reg_alpha": one(0.0), "reg_lambda": NONNEGATIVE,
        "subsample": FRACTION, "subsample_for_bin": one(200_000), "subsample_freq": one(1), "verbose": one(-1),
        "max_bin": number(2, 65_535, integer=True),
        "_other_params": exactly({"max_bin": number(2, 65_535, integer=True), "verbose": one(-1)}),
        "_Booster": instance(Booster), "_best_iteration": COUNT, "_best_score": data, "_class_map": maybe(data),
        "_class_weight": one(None), "_evals_result": data,
        "_fitted_with_feature_names": one(False), "_n_features": COUNT, "_n_features_in": COUNT,
        "fitted_": one(True)}
    classifier = model | {"_le": instance(LabelEncoder), "_n_classes": number(2, 2 ** 31 - 1, integer=True),
                          "_classes": LABELS, "_objective": one("binary", "multiclass")}
    booster = {
        "_handle": lightgbm_model, "_network": one(False), "_train_data_name": NAME, "best_iteration": COUNT,
        "best_score": data, "name_valid_sets": items(NAME), "pandas_categorical": one(None), "params": data,
        "train_set_version": COUNT, "_Booster__init_predictor": one(None), "_Booster__inner_predict_buffer": data,
        "_Booster__is_predicted_cur_iter": items(BOOL), "_Booster__higher_better_inner_eval": items(BOOL),
        "_Booster__name_inner_eval": maybe(items(NAME)), "_Booster__need_reload_eval_info": BOOL,
        "_Booster__num_class": COUNT, "_Booster__num_dataset": COUNT, "_Booster__num_inner_eval": COUNT,
        "_Booster__set_objective_to_none": BOOL}
    return {LGBMClassifier: State(classifier, counted("_n_classes", "_classes"), sklearn=False),
            LGBMRegressor: State(model | {"_n_classes": one(-1), "_classes": one(None), "_objective": one("regression")},
                                 sklearn=False),
            Booster: State(booster, sklearn=False)}


def _featx() -> dict[type, State]:
    """featx's own heads, with the parameters their registry builds them with."""
    from lightgbm import LGBMClassifier, LGBMRegressor
    from sklearn.feature_extraction.text import TfidfVectorizer

    from featx.heads import (boosting, lexical, logistic, registry, ridge, targets, torchbase, torchheads, torchmlp,
                             varying)

    kinds = one(*(k for k in torchbase.OUTPUTS if k != "regression"))
    fitted = {"n_features_in_": COUNT, "classes_": LABELS}
    boosted = {"num_leaves": LEAVES, "learning_rate": POSITIVE, "n_estimators": ITERATIONS,
               "early_stopping_rounds": ITERATIONS, "validation_fraction": FRACTION, "min_child_samples": COUNT,
               "colsample_bytree": FRACTION, "subsample": FRACTION, "reg_lambda": NONNEGATIVE,
               "max_bin": number(2, 65_535, integer=True), "random_state": SEED,
               "n_jobs": number(1, MAX_THREADS, integer=True), "best_iteration_": COUNT, **fitted}
    linear = {"C": POSITIVE, "max_iter": ITERATIONS, "tol": TOLERANCE, "warm_start": BOOL, "coef_": FLOATS,
              "intercept_": FLOATS, "n_iter_": either(COUNT, INTS), **fitted}
    torch = {"device": DEVICE, "n_jobs": number(0, MAX_THREADS, integer=True)}
    network = torch | {
        "hidden": HIDDEN, "alpha": NONNEGATIVE, "learning_rate": POSITIVE, "batch_size": SIZE,
        "max_iter": ITERATIONS, "early_stopping": BOOL, "validation_fraction": number(0, 1, above=True),
        "n_iter_no_change": ITERATIONS, "tol": TOLERANCE, "round_rows": SIZE, "random_state": SEED,
        "coefs_": items(FLOATS, sizes=(2, 2)), "intercepts_": items(FLOATS, sizes=(2, 2)), "n_iter_": COUNT,
        "loss_curve_": items(real), "best_loss_": real, "n_features_in_": COUNT}
    labels = {"varying_": BOOLS, "constant_": FLOATS, "classes_": LABELS}
    featx = {
        boosting.LightGBMClassifierHead: boosted | {"model_": instance(LGBMClassifier)},
        boosting.LightGBMRegressorHead: boosted | {"model_": instance(LGBMRegressor)},
        logistic.MultilabelLogistic: linear | labels,
        logistic.MultinomialLogistic: linear,
        lexical.LexicalFeatures: {"word_ngrams": one(lexical.WORD_NGRAMS), "char_ngrams": one(lexical.CHAR_NGRAMS),
                                  "max_features": one(lexical.MAX_FEATURES),
                                  "vectorizers_": items(instance(TfidfVectorizer), sizes=(1, 2))},
        registry.IncreasingScore: {"coef_": FLOATS, "intercept_": FLOATS, "n_features_in_": COUNT,
                                   "n_targets_": COUNT},
        varying.VaryingLabels: {"estimator": estimator, "estimator_": maybe(estimator), **labels},
        ridge.RidgeClassifierHead: {"alpha": NONNEGATIVE, "warm_start": BOOL, "coef_": FLOATS, "intercept_": FLOATS,
                                    "multilabel_": BOOL, "offset_": FLOATS, "temperature_": real, **labels,
                                    **fitted},
        targets.StandardisedTarget: {"estimator": estimator, "estimator_": estimator, "mean_": FLOATS,
                                     "scale_": FLOATS},
        torchheads.TorchLogistic: linear | torch | {"kind_": kinds},
        torchheads.TorchRidge: torch | {"alpha": NONNEGATIVE, "block_rows": SIZE, "coef_": FLOATS,
                                        "intercept_": either(FLOATS, real), "n_features_in_": COUNT},
        torchmlp.TorchMLPClassifier: network | {"kind_": kinds, "classes_": LABELS},
        torchmlp.TorchMLPRegressor: network | {"kind_": one("regression"), "n_outputs_": COUNT},
    }
    return {cls: State(rules, sklearn=False) for cls, rules in featx.items()}
