"""Heads saved as arrays and JSON (featx.heads.serialize): every head of every task type predicts after
a round trip exactly what the fitted estimator predicts, and nothing but the allowlisted classes
and numbers is ever rebuilt."""
from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from featx.heads import registry as H
from featx.heads import serialize
from featx.errors import FeatxError
from featx.probe.job import _saved

TASKS = ("binary", "multiclass", "multilabel", "regression")
WORDS = "cat dog sat mat big small red blue ran flew".split()


def problem(task: str, n: int = 90, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 6)).astype(np.float32)
    y = {"binary": (X[:, 0] > 0).astype(np.int64),
         "multiclass": np.digitize(X[:, 0], [-0.5, 0.5]).astype(np.int64),
         "multilabel": (X[:, :3] > 0).astype(np.uint8),
         "regression": X[:, :2].astype(np.float64) * 3 + 1}[task]
    words = np.array(WORDS)
    texts = np.array([" ".join(words[rng.integers(0, len(words), 4)]) + f" {int(X[i, 0] > 0)}"
                      for i in range(n)], dtype=object)
    return X, y, texts


def fitted(head: str, task: str, pairs: bool = False):
    X, y, texts = problem(task)
    inputs = np.stack([texts, texts[::-1]], axis=1) if pairs else texts
    transformer = H.HEADS[head].prepare
    if transformer is not None:
        transformer = transformer().fit(inputs)
        X, X_new = transformer.transform(inputs), inputs
    else:
        X_new = X
    if head == "identity":  # the no-training head reads one feature (a pair's cosine)
        X = X_new = X[:, :1]
    params = H.HEADS[head].grid(task)[-1]
    estimator = H.fit(H.build(head, task, params, seed=1, threads=1), X, y)
    return _saved(transformer, estimator), X_new, len(np.unique(y)) if y.ndim == 1 else y.shape[1]


CASES = [(head, task, False) for head in H.HEADS for task in TASKS
         if head != "identity" or task == "regression"] + [
    ("tfidf", task, True) for task in TASKS]


@pytest.mark.parametrize("head, task, pairs", CASES, ids=[f"{h}-{t}{'-pairs' if p else ''}" for h, t, p in CASES])
def test_round_trip_predicts_what_the_fitted_head_predicts(head, task, pairs):
    estimator, X, n_classes = fitted(head, task, pairs)
    data = serialize.dumps(estimator, {"record": {"head": head}})
    assert b"\x80\x04" not in data[:2]
    again, manifest = serialize.loads(data)
    assert manifest == {"record": {"head": head}}
    assert type(again) is type(estimator)
    n = n_classes if task in ("binary", "multiclass") else 0
    np.testing.assert_array_equal(H.predict_scores(again, X, task, n), H.predict_scores(estimator, X, task, n))
    np.testing.assert_array_equal(np.asarray(again.predict(X)), np.asarray(estimator.predict(X)))


def test_lightgbm_is_stored_in_its_own_text_format():
    estimator, _, _ = fitted("lightgbm", "binary")
    data = serialize.dumps(estimator, {})
    from safetensors.numpy import load

    texts = [bytes(a).decode() for k, a in load(data).items() if a.dtype == np.uint8 and k != serialize.DOCUMENT]
    assert any(t.startswith("tree\nversion=") for t in texts)


class Unknown:
    pass


def test_anything_outside_the_allowlist_is_an_error_at_save_time():
    estimator, _, _ = fitted("logistic", "binary")
    estimator.steps[-1][1].extra_ = Unknown()
    with pytest.raises(TypeError, match="not in featx.heads.serialize.allowed"):
        serialize.dumps(estimator, {})
    estimator.steps[-1][1].extra_ = lambda x: x  # a callable is code: never saved
    with pytest.raises(TypeError):
        serialize.dumps(estimator, {})


def document(data: bytes) -> dict:
    from safetensors.numpy import load

    return json.loads(bytes(load(data)[serialize.DOCUMENT]).decode())


def with_document(data: bytes, doc: dict | str) -> bytes:
    from safetensors.numpy import load, save

    tensors = load(data)
    text = doc if isinstance(doc, str) else json.dumps(doc)
    tensors[serialize.DOCUMENT] = np.frombuffer(text.encode(), np.uint8)
    return save(tensors)


@pytest.mark.parametrize("head, task", [("tfidf", "multilabel"), ("lightgbm", "multilabel"), ("lightgbm", "regression")])
def test_a_head_file_naming_its_classes_in_featx_heads_still_loads(head, task):
    # As written before the LightGBM, TF-IDF and VaryingLabels classes left featx/heads/registry.py.
    estimator, X, _ = fitted(head, task)
    data = serialize.dumps(estimator, {})
    text = json.dumps(document(data))
    earlier = text
    for module in ("boosting", "lexical", "varying"):
        earlier = earlier.replace(f'"featx.{module}.', '"featx.heads.')
    assert earlier != text
    again, _ = serialize.loads(with_document(data, earlier))
    np.testing.assert_array_equal(H.predict_scores(again, X, task, 0), H.predict_scores(estimator, X, task, 0))


# The class names head files hold: the file format's, whatever package the code is in.
FORMAT_NAMES = {
    "featx.boosting.LightGBMClassifierHead", "featx.boosting.LightGBMRegressorHead", "featx.heads.IncreasingScore",
    "featx.heads.LexicalFeatures", "featx.heads.LightGBMClassifierHead", "featx.heads.LightGBMRegressorHead",
    "featx.heads.MLPHead", "featx.heads.MLPRegressorHead", "featx.heads.MultilabelLogistic",
    "featx.heads.MultinomialLogistic", "featx.heads.VaryingLabels", "featx.lexical.LexicalFeatures",
    "featx.ridge.RidgeClassifierHead", "featx.targets.StandardisedTarget", "featx.torchheads.TorchLogistic",
    "featx.torchheads.TorchMLPClassifier", "featx.torchheads.TorchMLPRegressor", "featx.torchheads.TorchRidge",
    "featx.varying.VaryingLabels",
}


def test_head_files_name_featx_classes_as_the_format_does():
    """A head written by any featx of this format loads: moving a class to another module keeps
    the name its files give it (featx.heads.serialize.FORMAT_MODULES)."""
    assert {name for name in serialize.allowed() if name.startswith("featx.")} == FORMAT_NAMES


class Boom:
    def __reduce__(self):
        import os
        return (os.system, ("touch /tmp/featx-pwned",))


def test_a_pickle_is_refused_without_being_loaded(tmp_path):
    with pytest.raises(FeatxError, match="pickle"):
        serialize.loads(pickle.dumps(Boom()))
    import joblib

    joblib.dump(Boom(), tmp_path / "h.joblib")
    with pytest.raises(FeatxError, match="pickle|not a featx head"):
        serialize.loads((tmp_path / "h.joblib").read_bytes())


@pytest.mark.parametrize("name", ["os.system", "builtins.eval", "subprocess.Popen", "featx.heads.HEADS",
                                  "sklearn.pipeline.make_pipeline"])
def test_a_class_outside_the_allowlist_is_never_built(name):
    estimator, _, _ = fitted("logistic", "binary")
    data = serialize.dumps(estimator, {})
    doc = document(data)
    doc["estimator"]["$object"] = name
    with pytest.raises(FeatxError, match="not one a head is made of"):
        serialize.loads(with_document(data, doc))


def mutate(node, rng, budget=[0]):
    """One random change somewhere in a document tree."""
    if isinstance(node, dict) and node:
        key = rng.choice(sorted(node))
        if rng.random() < 0.3:
            node[key] = rng.choice([None, 1, "os.system", [], {}, {"$object": "os.system"}, {"$type": "eval"},
                                    {"$array": "missing"}, {"$float": "1e309"}, {"$strings": [1], "shape": [1]},
                                    {"$scalar": "int64", "value": 10 ** 30}, {"$nope": 1}])
        else:
            mutate(node[key], rng)
    elif isinstance(node, list) and node:
        i = rng.randrange(len(node))
        if rng.random() < 0.3:
            node[i] = {"$object": "subprocess.Popen", "state": {"$dict": {}}}
        else:
            mutate(node[i], rng)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10 ** 6), head=st.sampled_from(["logistic", "mlp", "lightgbm", "tfidf", "majority"]))
def test_a_crafted_document_is_a_featx_error_or_an_allowlisted_estimator(seed, head):
    import random

    estimator, _, _ = fitted(head, "multiclass")
    data = serialize.dumps(estimator, {})
    doc = document(data)
    mutate(doc["estimator"], random.Random(seed))
    try:
        again, _ = serialize.loads(with_document(data, doc))
    except FeatxError:
        return
    allowed = set(serialize.allowed().values())
    seen = []

    def classes(obj, depth=0):
        if depth > 80:
            return
        if isinstance(obj, (list, tuple)):
            for v in obj:
                classes(v, depth + 1)
        elif isinstance(obj, dict):
            for v in obj.values():
                classes(v, depth + 1)
        elif hasattr(obj, "__dict__") and not isinstance(obj, type):
            seen.append(type(obj))
            classes(vars(obj), depth + 1)
    classes(again)
    import ctypes

    # RandomState is rebuilt by numpy from its state; a ctypes handle is LightGBM's own, made by its
    # model parser: neither is a class the document could name.
    assert all(c in allowed or c is np.random.RandomState or issubclass(c, ctypes._SimpleCData)
               for c in seen), seen


@pytest.mark.parametrize("data", [b"", b"\x00" * 8, b"garbage" * 10, (2 ** 60).to_bytes(8, "little") + b"{}"])
def test_bytes_that_are_not_a_head(data):
    with pytest.raises(FeatxError, match="not a featx head"):
        serialize.loads(data)


def test_a_document_nested_too_deeply():
    estimator, _, _ = fitted("majority", "binary")
    data = serialize.dumps(estimator, {})
    doc = document(data)
    deep = {"$tuple": []}
    for _ in range(100):  # deeper than any head, within what json can write
        deep = {"$tuple": [deep]}
    doc["estimator"] = deep
    with pytest.raises(FeatxError, match="deeper"):
        serialize.loads(with_document(data, doc))
    raw = json.dumps(doc | {"estimator": None}).replace("null", '{"$tuple": [' * 5000 + "]}" * 5000)
    with pytest.raises(FeatxError, match="not valid"):  # the JSON parser's own recursion limit
        serialize.loads(with_document(data, raw))
