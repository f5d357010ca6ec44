"""Head files crafted from real ones: an allowlisted class given a value featx never writes is
refused before it is rebuilt, one test per kind of attack (a regex that backtracks, a vectorizer
that opens files, parameters that write files or start processes, numbers out of range,
attributes featx never writes, a LightGBM text model that loops or reads past a row), and
generated: no attribute of any head accepts a callable."""
from __future__ import annotations

import json

import numpy as np
import pytest

from featx.heads import serialize
from featx.heads.serialize import HeadFileError
from tests.heads.test_serialize import document, fitted, with_document
from tests.generated import no_hang

NOT_OURS = "was not written by featx"


def states(node, name: str) -> list[dict]:
    """The state dicts of every object of class `name` (its last dotted part) in a document tree."""
    found = []
    if isinstance(node, dict):
        if str(node.get("$object", "")).rsplit(".", 1)[-1] == name:
            found.append(node["state"]["$dict"])
        for value in node.values():
            found += states(value, name)
    elif isinstance(node, list):
        for value in node:
            found += states(value, name)
    return found


def crafted(head: str, task: str, name: str, change) -> tuple[bytes, np.ndarray]:
    """A real head of `head` on `task`, every `name` object's state changed by `change(state)`;
    (the file's bytes, inputs it predicts on)."""
    estimator, X, _ = fitted(head, task)
    data = serialize.dumps(estimator, {})
    doc = document(data)
    found = states(doc["estimator"], name)
    assert found, f"no {name} in a {head} head"
    for state in found:
        change(state)
    return with_document(data, doc), X


def refused_with(data: bytes, *said: str) -> str:
    with no_hang(), pytest.raises(HeadFileError) as error:
        serialize.loads(data, "head.safetensors")
    message = str(error.value)
    assert NOT_OURS in message and all(s in message for s in said), message
    return message


@pytest.mark.parametrize("key, value, said", [
    ("token_pattern", r"(\w|\w\w)+$", r"'(\\w|\\w\\w)+$'"),  # exponential backtracking on 60 characters
    ("token_pattern", r"(?u)\b\w+\b|(a+)+b", "token_pattern"),
    ("analyzer", {"$type": "list"}, "the type list"),  # a callable analyzer
    ("preprocessor", {"$type": "dict"}, "preprocessor"),
    ("tokenizer", {"$type": "list"}, "tokenizer"),
    ("lowercase", "yes", "lowercase"),
    ("stop_words", "english", "stop_words"),
])
def test_a_vectorizer_with_another_regex_or_analyzer_is_refused(key, value, said):
    data, _ = crafted("tfidf", "binary", "TfidfVectorizer", lambda s: s.__setitem__(key, value))
    refused_with(data, f"TfidfVectorizer.{key}", said)


@pytest.mark.parametrize("value", ["filename", "file"])
def test_a_vectorizer_that_reads_the_files_its_texts_name_is_refused(tmp_path, value):
    secret = tmp_path / "secret.txt"
    secret.write_text("the secret words")
    data, _ = crafted("tfidf", "binary", "TfidfVectorizer", lambda s: s.__setitem__("input", value))
    refused_with(data, "TfidfVectorizer.input", repr(value), "'content'")
    data, _ = crafted("tfidf", "binary", "TfidfVectorizer", lambda s: s.__setitem__("encoding", "utf-16"))
    refused_with(data, "TfidfVectorizer.encoding")


@pytest.mark.parametrize("head, task, name, key, value", [
    ("logistic", "binary", "Pipeline", "memory", "/tmp/featx-crafted-cache"),  # joblib.Memory writes there
    ("lightgbm", "regression", "MultiOutputRegressor", "n_jobs", -1),  # a process per core at predict
    ("lightgbm", "binary", "LGBMClassifier", "n_jobs", 10 ** 6),  # threads at predict
    ("lightgbm", "binary", "LGBMClassifier", "_other_params", {"$dict": {"max_bin": 63, "verbose": -1,
                                                                         "output_model": "/tmp/featx-crafted"}}),
    ("lightgbm", "binary", "LGBMClassifier", "verbose", 2),
    ("logistic", "binary", "LogisticRegression", "n_jobs", 64),
    ("logistic", "binary", "LogisticRegression", "verbose", 1),
    ("mlp", "binary", "MLPHead", "verbose", True),
    ("tfidf", "multiclass", "OneVsRestClassifier", "n_jobs", -1),
])
def test_parameters_that_write_files_or_start_work_are_refused(tmp_path, head, task, name, key, value):
    data, _ = crafted(head, task, name, lambda s: s.__setitem__(key, value))
    refused_with(data, f"{name}.{key}")


@pytest.mark.parametrize("head, task, name, key, value", [
    ("tfidf", "binary", "TfidfVectorizer", "ngram_range", {"$tuple": [1, 10 ** 6]}),
    ("tfidf", "binary", "LexicalFeatures", "word_ngrams", {"$tuple": [1, 40]}),
    ("tfidf", "binary", "TfidfVectorizer", "max_features", 10 ** 12),
    ("majority", "regression", "DummyRegressor", "n_outputs_", 10 ** 9),  # predict's output is (n, n_outputs_)
    ("majority", "binary", "DummyClassifier", "n_outputs_", 10 ** 9),
    ("mlp", "multiclass", "MLPHead", "n_layers_", 10 ** 9),
    ("mlp", "multiclass", "MLPHead", "n_layers_", 5),  # in range, but not its layers' count
    ("lightgbm", "binary", "LightGBMClassifierHead", "num_leaves", -5),
    ("lightgbm", "multiclass", "LGBMClassifier", "_n_classes", 10 ** 8),
    ("logistic", "binary", "LogisticRegression", "C", {"$float": "nan"}),
    ("logistic", "binary", "LogisticRegression", "random_state", -1),
    ("logistic-torch", "binary", "TorchLogistic", "n_jobs", 10 ** 6),
    ("ridge", "binary", "RidgeClassifierHead", "alpha", -1.0),
])
def test_numbers_out_of_range_are_refused(head, task, name, key, value):
    data, _ = crafted(head, task, name, lambda s: s.__setitem__(key, value))
    refused_with(data, name, key)


@pytest.mark.parametrize("head, task, name, key, value", [
    ("lightgbm", "binary", "LGBMClassifier", "callbacks", None),
    ("logistic", "binary", "LogisticRegression", "__class__", "os.system"),
    ("logistic", "binary", "StandardScaler", "__dict__", {"$dict": {}}),
    ("mlp", "binary", "MLPHead", "_fit_callback", None),
    ("tfidf", "binary", "TfidfVectorizer", "build_analyzer", None),
    ("ridge", "binary", "RidgeClassifierHead", "_cache", None),
    ("logistic-torch", "multiclass", "TorchLogistic", "device_map", "auto"),
])
def test_attributes_featx_never_writes_are_refused(head, task, name, key, value):
    data, _ = crafted(head, task, name, lambda s: s.__setitem__(key, value))
    refused_with(data, f"{name} has the attribute {key!r}, which featx does not write")


def booster_text(data: bytes) -> tuple[dict, str, str]:
    """(the document, the tensor that holds the first Booster's text model, the text)."""
    from safetensors.numpy import load

    doc = document(data)
    [state, *_] = states(doc["estimator"], "Booster")
    name = state["_handle"]["$text"]
    return doc, name, bytes(load(data)[name]).decode()


def with_text(data: bytes, doc: dict, name: str, text: str) -> bytes:
    from safetensors.numpy import load, save

    tensors = load(data)
    tensors[name] = np.frombuffer(text.encode(), np.uint8)
    tensors[serialize.DOCUMENT] = np.frombuffer(json.dumps(doc).encode(), np.uint8)
    return save(tensors)


def first_split(text: str, key: str, value: str) -> str:
    """The text with the first tree of more than one leaf given `key=value` (its first split's),
    its tree_sizes made to agree (as a crafted file would)."""
    start = text.index("num_leaves=", text.index("Tree="))
    while text[start:].startswith("num_leaves=1\n"):
        start = text.index("num_leaves=", start + 1)
    line = text.index(f"\n{key}=", start) + 1
    end = text.index("\n", line)
    values = text[line + len(key) + 1:end].split(" ")
    return resized(text[:line] + f"{key}={' '.join([value] + values[1:])}" + text[end:])


def resized(text: str) -> str:
    """`text` with its tree_sizes line counting its trees' bytes again."""
    header, _, rest = text.partition("\n\n")
    trees, tail = rest[:rest.index("end of trees")], rest[rest.index("end of trees"):]
    sizes = [len(("Tree=" + block).encode()) for block in trees.split("Tree=")[1:]]
    lines = [f"tree_sizes={' '.join(map(str, sizes))}" if line.startswith("tree_sizes=") else line
             for line in header.split("\n")]
    return "\n".join(lines) + "\n\n" + trees + tail


@pytest.mark.parametrize("change, said", [
    # a root whose left child is itself, every row sent left: predict never ends
    (lambda t: first_split(first_split(t, "left_child", "0"), "threshold", "1e300"), "points back up"),
    (lambda t: first_split(t, "split_feature", "999"), "split feature"),  # reads past the row (a crash)
    (lambda t: first_split(t, "decision_type", "1"), "decision type"),  # a categorical bitset
    (lambda t: resized(t.replace("num_cat=0", "num_cat=1", 1)), "categorical"),
    (lambda t: t.replace("objective=binary sigmoid:1", "objective=lambdarank"), "objective"),
    (lambda t: t.replace("objective=binary sigmoid:1", "objective=custom"), "objective"),
    (lambda t: t.replace("num_class=1\nnum_tree_per_iteration=1", "num_class=100000000\n"
                                                                  "num_tree_per_iteration=100000000"), "num_class"),
    (lambda t: resized(t.replace("\nTree=0\n", "\nTree=0\nfeature_path=/etc/passwd\n")), "feature_path"),
    (lambda t: t.replace("[num_threads: 1]", "[num_threads: 1]\n<script>"), "importances and parameters"),
    (lambda t: t.replace("version=v4", "version=v9"), "version"),
    (lambda t: resized(t.replace("\nleaf_value=", "\nleaf_value=1 ", 1)), "one value per leaf"),  # counts unchecked
    (lambda t: resized(t.replace("\ninternal_count=", "\ninternal_count=1 ", 1)), "one split per inner node"),
])
def test_a_lightgbm_text_model_featx_does_not_write_is_refused(change, said):
    estimator, X, _ = fitted("lightgbm", "binary")
    data = serialize.dumps(estimator, {})
    doc, name, text = booster_text(data)
    changed = change(text)
    assert changed != text
    refused_with(with_text(data, doc, name, changed), "Booster._handle", said)
    again, _ = serialize.loads(with_text(data, doc, name, text))  # the text as written loads
    np.testing.assert_array_equal(again.predict_proba(X), estimator.predict_proba(X))


HEADS = [("logistic", "binary"), ("logistic", "multiclass"), ("mlp", "multilabel"), ("lightgbm", "multiclass"),
         ("lightgbm", "regression"), ("tfidf", "multiclass"), ("tfidf", "multilabel"), ("majority", "multilabel"),
         ("majority", "regression"), ("ridge", "multiclass"), ("identity", "regression"),
         ("logistic-torch", "multilabel"), ("mlp-torch", "regression"), ("mlp", "regression")]


@pytest.mark.parametrize("head, task", HEADS, ids=[f"{h}-{t}" for h, t in HEADS])
def test_no_attribute_of_any_head_accepts_a_callable(head, task):
    """Generated from each head's own document: every attribute of every object in it, given a
    callable (a type the decoder can build), is refused, and the error names that attribute."""
    estimator, _, _ = fitted(head, task)
    data = serialize.dumps(estimator, {})
    doc = document(data)
    places = []

    def walk(node):
        if isinstance(node, dict):
            if "$object" in node:
                places.extend((node, key) for key in node["state"]["$dict"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
    walk(doc["estimator"])
    assert len(places) >= 3
    for node, key in places:
        state = node["state"]["$dict"]
        kept = state[key]
        state[key] = {"$type": "list"}
        refused_with(with_document(data, doc), f".{key} is the type list")
        state[key] = kept


def test_every_allowlisted_class_has_the_rules_of_its_state():
    from featx.heads.states import states

    assert set(states()) == set(serialize.allowed().values())
