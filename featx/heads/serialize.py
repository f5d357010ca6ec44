"""Fitted heads as numeric arrays and JSON: nothing featx reads back is a pickle. No torch.

A head is one safetensors file. Its numeric arrays (coefficients, intercepts, the scaler's mean
and scale, the MLP's layer weights, TF-IDF's idf, LightGBM's own text model as UTF-8 bytes)
are its tensors; one more tensor, `__featx__`, holds a JSON document: the estimator tree and
the head's manifest (what record it belongs to).

    {"$object": "sklearn.linear_model.LogisticRegression", "state": {"$dict": {"C": 1.0, ...}}}
    {"$array": "t3"}          a numeric array, the tensor named t3
    {"$tuple": [...]}, {"$dict": {...}}, {"$pairs": [[key, value], ...]}, {"$float": "nan"}, ...

Why not joblib with a hash beside it: whoever crafts the file writes the hash too, and a pickle
runs any code it names when it is loaded. Here loading parses JSON and numbers, and rebuilds only
the classes of `allowed()` (an explicit allowlist) from their pickling state (`__getstate__`
/ `__setstate__`, the same state pickle would carry, minus the code), and only with the
attributes and values featx writes (featx/heads/states.py: an allowlisted class given another
parameter could read files, run a regex for ever or start processes). A fitted estimator
holding anything else (a callable, a class outside the list, a value featx would refuse to read
back) is an error at save time, so a new head can never silently fall back to pickle: it needs
an allowlist entry with the rules of its state, and a test of its round trip.
"""
from __future__ import annotations

import collections
import json
import logging
import math
import warnings

import numpy as np

from featx.errors import FeatxError
from featx.heads import states

log = logging.getLogger("featx")

FORMAT = "featx-head"
VERSION = 1
DOCUMENT = "__featx__"
# Strings longer than this become uint8 tensors (LightGBM's model text, big vocabularies stay
# out of the JSON parser's way).
LONG_TEXT = 4096
# The deepest nesting a real head has is about 15 (Pipeline > MultiOutput > head > booster >
# best_score > ...); a deeper document was not written by featx.
MAX_DEPTH = 64


def allowed() -> dict[str, type]:
    """The classes a head file may name: scikit-learn's and LightGBM's that featx's heads are
    made of, and featx's own (featx/heads/registry.py and the modules of its heads: fitted, those hold
    numpy arrays only). A new estimator class needs one entry here."""
    from lightgbm import Booster, LGBMClassifier, LGBMRegressor
    from sklearn.compose import TransformedTargetRegressor
    from sklearn.dummy import DummyClassifier, DummyRegressor
    from sklearn.feature_extraction.text import TfidfTransformer, TfidfVectorizer
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.multiclass import OneVsRestClassifier
    from sklearn.multioutput import MultiOutputClassifier, MultiOutputRegressor
    from sklearn.neural_network import MLPClassifier, MLPRegressor
    from sklearn.neural_network._stochastic_optimizers import AdamOptimizer, SGDOptimizer
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import LabelBinarizer, LabelEncoder, StandardScaler

    from featx.heads import boosting, lexical, logistic, mlp, ridge, targets, torchheads, torchmlp, varying
    from featx.heads import registry as heads

    classes = [Pipeline, StandardScaler, LabelBinarizer, LabelEncoder, LogisticRegression, Ridge,
               MLPClassifier, MLPRegressor, AdamOptimizer, SGDOptimizer, TransformedTargetRegressor,
               MultiOutputClassifier, MultiOutputRegressor, OneVsRestClassifier, DummyClassifier, DummyRegressor,
               TfidfVectorizer, TfidfTransformer, LGBMClassifier, LGBMRegressor, Booster,
               boosting.LightGBMClassifierHead, boosting.LightGBMRegressorHead,
               logistic.MultilabelLogistic, logistic.MultinomialLogistic,
               lexical.LexicalFeatures, heads.IncreasingScore, varying.VaryingLabels,
               mlp.MLPHead, mlp.MLPRegressorHead,
               torchheads.TorchLogistic, torchheads.TorchRidge, torchmlp.TorchMLPClassifier, torchmlp.TorchMLPRegressor,
               ridge.RidgeClassifierHead, targets.StandardisedTarget]
    # Head files written before these classes left the heads' module name them there: they still load.
    earlier = {f"featx.heads.{c.__qualname__}": c for c in (
        boosting.LightGBMClassifierHead, boosting.LightGBMRegressorHead, lexical.LexicalFeatures, varying.VaryingLabels)}
    return {_name(c): c for c in classes} | earlier


# Types that appear as values (TfidfVectorizer's dtype=np.float32; a defaultdict's factory).
_TYPES = {_t.__name__: _t for _t in (np.float16, np.float32, np.float64, np.int8, np.int16, np.int32,
                                     np.int64, np.uint8, np.uint16, np.uint32, np.uint64, np.bool_)}
_TYPES["OrderedDict"] = collections.OrderedDict
_TYPES["dict"] = dict
_TYPES["list"] = list


# The module part of the names head files give featx's classes. The names are the file format's:
# they stay what they were when the format was set, wherever the code lives now.
FORMAT_MODULES = {"featx.heads.registry": "featx.heads", "featx.heads.boosting": "featx.boosting",
                  "featx.heads.lexical": "featx.lexical", "featx.heads.targets": "featx.targets",
                  "featx.heads.varying": "featx.varying", "featx.heads.ridge": "featx.ridge",
                  "featx.heads.torchheads": "featx.torchheads",
                  # The logistic and MLP heads are named as the registry's heads, the torch MLP probe as
                  # the linear torch probes.
                  "featx.heads.logistic": "featx.heads", "featx.heads.mlp": "featx.heads",
                  "featx.heads.torchmlp": "featx.torchheads"}


def _name(cls: type) -> str:
    return f"{FORMAT_MODULES.get(cls.__module__, cls.__module__)}.{cls.__qualname__}"


class HeadFileError(FeatxError):
    """A head file that featx did not write, or wrote with another format."""


# ---------------------------------------------------------------------------------------------
# Saving


def dumps(estimator, manifest: dict) -> bytes:
    """The head file's bytes: `estimator`'s tree and arrays, and `manifest` (JSON values)."""
    from safetensors.numpy import save

    encoder = _Encoder(allowed())
    tree = encoder.encode(estimator, "head")
    document = json.dumps({"format": FORMAT, "version": VERSION, "manifest": manifest, "estimator": tree},
                          allow_nan=False, ensure_ascii=False)
    tensors = dict(encoder.tensors)
    tensors[DOCUMENT] = np.frombuffer(document.encode("utf-8", "surrogatepass"), dtype=np.uint8)
    return save(tensors, metadata={"format": FORMAT, "version": str(VERSION)})


class _Encoder:
    def __init__(self, classes: dict[str, type]):
        self.classes = classes
        self.tensors: dict[str, np.ndarray] = {}

    def _tensor(self, array: np.ndarray) -> str:
        name = f"t{len(self.tensors)}"
        self.tensors[name] = np.ascontiguousarray(array)
        return name

    def encode(self, value, where: str, depth: int = 0):
        if depth > MAX_DEPTH:
            raise TypeError(f"{where}: nested deeper than {MAX_DEPTH} (a cycle?); cannot save the head")
        inner = lambda v, w: self.encode(v, w, depth + 1)  # noqa: E731
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, int) and type(value) is int:
            return value
        if isinstance(value, float) and type(value) is float:
            return value if math.isfinite(value) else {"$float": repr(value)}
        if isinstance(value, str) and type(value) is str:
            if len(value) > LONG_TEXT:
                return {"$text": self._tensor(np.frombuffer(value.encode("utf-8", "surrogatepass"), np.uint8))}
            return value
        if isinstance(value, np.ndarray):
            return self._array(value, where, inner)
        if isinstance(value, np.generic):
            if value.dtype.kind not in "biuf" or value.dtype.name not in _TYPES:
                raise TypeError(f"{where}: numpy scalar of dtype {value.dtype} cannot be saved")
            return {"$scalar": value.dtype.name, "value": inner(value.item(), where)}
        if isinstance(value, np.dtype):
            if value.kind not in "biuf":
                raise TypeError(f"{where}: dtype {value} cannot be saved")
            return {"$dtype": value.name}
        if isinstance(value, type):
            names = [k for k, t in _TYPES.items() if t is value]
            if not names:
                raise TypeError(f"{where}: the type {_name(value)} is not one a head may hold")
            return {"$type": names[0]}
        if type(value) is list:
            return [inner(v, f"{where}[{i}]") for i, v in enumerate(value)]
        if type(value) is tuple:
            return {"$tuple": [inner(v, f"{where}[{i}]") for i, v in enumerate(value)]}
        if type(value) in (set, frozenset):
            return {"$set": [inner(v, f"{where}{{}}") for v in sorted(value, key=repr)],
                    "frozen": type(value) is frozenset}
        if type(value) in (dict, collections.OrderedDict, collections.defaultdict):
            out = self._mapping(value, where, inner)
            if type(value) is collections.OrderedDict:
                out["ordered"] = True
            if type(value) is collections.defaultdict:
                out["factory"] = None if value.default_factory is None else inner(value.default_factory, where)
            return out
        if isinstance(value, np.random.RandomState):
            return {"$random_state": inner(value.get_state(legacy=False), f"{where}.state")}
        name = _name(type(value))
        if name not in self.classes:
            raise TypeError(f"{where}: a {name} is not in featx.heads.serialize.allowed(); add the class "
                            "there (with a round-trip test) to save heads that hold one")
        state = value.__getstate__()
        if not isinstance(state, dict):
            raise TypeError(f"{where}: {name}'s state is not a dict; cannot save it")
        # Its values first: a value of a class outside the allowlist is named as such, not as an attribute.
        encoded = inner(state, f"{where}({type(value).__name__})")
        refused = states.problem(type(value), state)
        if refused is not None:
            raise TypeError(f"{where}: {refused}; featx would refuse to read the head back (featx/heads/states.py "
                            "lists what a head holds)")
        return {"$object": name, "state": encoded}

    def _array(self, array: np.ndarray, where: str, inner):
        if array.dtype.kind in "biuf" and array.dtype.name in _TYPES:
            return {"$array": self._tensor(array)}
        if array.dtype.kind == "U":
            return {"$strings": array.ravel().tolist(), "shape": list(array.shape)}
        if array.dtype == object:
            return {"$objects": [inner(v, f"{where}[]") for v in array.ravel().tolist()],
                    "shape": list(array.shape)}
        raise TypeError(f"{where}: an array of dtype {array.dtype} cannot be saved")

    def _mapping(self, mapping: dict, where: str, inner) -> dict:
        if all(type(k) is str for k in mapping):
            return {"$dict": {k: inner(v, f"{where}.{k}") for k, v in mapping.items()}}
        return {"$pairs": [[inner(k, f"{where}[key]"), inner(v, f"{where}[{k!r}]")] for k, v in mapping.items()]}


# ---------------------------------------------------------------------------------------------
# Loading


def loads(data: bytes, source: str = "the head file") -> tuple[object, dict]:
    """(estimator, manifest) from a head file's bytes. Nothing is unpickled or imported by name
    from the file: arrays are numbers, classes come from `allowed()`. A file featx did not write
    in this format is a `HeadFileError` that says so."""
    from safetensors.numpy import load

    if data[:2] == b"\x80\x04" or data[:2] == b"\x80\x03" or data[:2] == b"\x80\x05":
        raise HeadFileError(f"{source} is a pickle (a joblib head of an older featx); pickles can run "
                            "code when loaded, so featx no longer reads them")
    try:
        tensors = load(data)
        document = _parse(bytes(tensors.pop(DOCUMENT)))
    except HeadFileError:
        raise
    except Exception as exc:  # safetensors raises its own error types for malformed files
        raise HeadFileError(f"{source} is not a featx head file ({type(exc).__name__}: "
                            f"{str(exc)[:200]})") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise HeadFileError(f"{source} is not a featx head file (no {FORMAT!r} document)")
    if document.get("version") != VERSION:
        raise HeadFileError(f"{source} is a featx head of format version {document.get('version')!r}; "
                            f"this featx reads version {VERSION}")
    manifest = document.get("manifest")
    if not isinstance(manifest, dict):
        raise HeadFileError(f"{source} has no manifest")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            estimator = _Decoder(allowed(), tensors).decode(document.get("estimator"), 0)
    except _Refused as exc:
        raise HeadFileError(f"{source} was not written by featx: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - any failure to rebuild (an allowlisted class's
        # __setstate__ or LightGBM's model parser on crafted input) means the same: not our file
        raise HeadFileError(f"{source} does not describe a head featx can rebuild "
                            f"({type(exc).__name__}: {str(exc)[:200]})") from None
    if not hasattr(estimator, "predict"):
        raise HeadFileError(f"{source} does not hold an estimator")
    if any("version" in str(w.message) for w in caught):  # scikit-learn's, worded for pickles
        log.warning("%s was saved with another scikit-learn version than this one: its predictions "
                    "can differ; refit it with featx probe to be sure", source)
    return estimator, manifest


def _parse(raw: bytes):
    try:
        return json.loads(raw.decode("utf-8", "surrogatepass"))
    except (ValueError, RecursionError) as exc:
        raise HeadFileError(f"its JSON document is not valid ({type(exc).__name__})") from None


class _Refused(ValueError):
    """A state that holds an attribute or a value featx does not write (featx/heads/states.py)."""


class _Decoder:
    def __init__(self, classes: dict[str, type], tensors: dict[str, np.ndarray]):
        self.classes = classes
        self.tensors = tensors

    def _tensor(self, name) -> np.ndarray:
        if not isinstance(name, str) or name not in self.tensors:
            raise ValueError(f"it names a tensor {str(name)[:40]!r} the file does not hold")
        return np.array(self.tensors[name])  # a writable copy (safetensors' views are read-only)

    def decode(self, node, depth: int):
        if depth > MAX_DEPTH:
            raise ValueError(f"it is nested deeper than {MAX_DEPTH}")
        inner = lambda v: self.decode(v, depth + 1)  # noqa: E731
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        if isinstance(node, list):
            return [inner(v) for v in node]
        if not isinstance(node, dict) or not node:
            raise ValueError(f"an unexpected {type(node).__name__}")
        tag = next(iter(node))
        value = node[tag]
        if tag == "$float":
            if value not in ("nan", "inf", "-inf"):
                raise ValueError(f"a non-finite float {str(value)[:20]!r}")
            return float(value)
        if tag == "$text":
            return self._tensor(value).astype(np.uint8).tobytes().decode("utf-8", "surrogatepass")
        if tag == "$array":
            return self._tensor(value)
        if tag == "$strings":
            return np.array([_str(v) for v in value], dtype=str).reshape(_shape(node))
        if tag == "$objects":
            out = np.empty(len(_list(value)), dtype=object)
            for i, item in enumerate(value):
                out[i] = inner(item)
            return out.reshape(_shape(node))
        if tag == "$scalar":
            return self._type(value)(inner(node["value"]))
        if tag == "$dtype":
            return np.dtype(self._type(value))
        if tag == "$type":
            return self._type(value)
        if tag == "$tuple":
            return tuple(inner(v) for v in _list(value))
        if tag == "$set":
            items = [inner(v) for v in _list(value)]
            return frozenset(items) if node.get("frozen") else set(items)
        if tag in ("$dict", "$pairs"):
            return self._mapping(tag, node, inner)
        if tag == "$random_state":
            state = inner(value)
            generator = np.random.RandomState()
            generator.set_state(state)
            return generator
        if tag == "$object":
            return self._object(node, inner)
        raise ValueError(f"an unknown tag {str(tag)[:40]!r}")

    @staticmethod
    def _mapping(tag: str, node: dict, inner):
        """A dict, OrderedDict or defaultdict, from an object's items ($dict) or a list of
        [key, value] pairs ($pairs: keys that are not strings)."""
        value = node[tag]
        if tag == "$dict":
            if not isinstance(value, dict):
                raise ValueError("a $dict that is not an object")
            items = [(k, inner(v)) for k, v in value.items()]
        else:
            items = [(inner(k), inner(v)) for k, v in (_pair(p) for p in _list(value))]
        if "factory" in node:
            factory = node["factory"]
            return collections.defaultdict(None if factory is None else inner(factory), items)
        return collections.OrderedDict(items) if node.get("ordered") else dict(items)

    def _object(self, node: dict, inner):
        """An instance of an allowed class, its state checked (featx/heads/states.py) and restored
        as pickle would restore it (`__setstate__`, else the instance dict), without running its
        `__init__`."""
        value = node["$object"]
        if value not in self.classes:
            raise ValueError(f"it names the class {str(value)[:80]!r}, which is not one a head is made of")
        state = inner(node.get("state"))
        if not isinstance(state, dict):
            raise ValueError(f"the state of {value} is not a dict")
        cls = self.classes[value]
        refused = states.problem(cls, state)
        if refused is not None:  # before the class sees any of it
            raise _Refused(refused)
        obj = cls.__new__(cls)
        if hasattr(cls, "__setstate__"):
            obj.__setstate__(state)
        else:
            obj.__dict__.update(state)
        return obj

    def _type(self, name):
        if name not in _TYPES:
            raise ValueError(f"the type {str(name)[:40]!r}, which is not one a head may hold")
        return _TYPES[name]


def _list(value) -> list:
    if not isinstance(value, list):
        raise ValueError("a list was expected")
    return value


def _pair(value) -> tuple:
    if not isinstance(value, list) or len(value) != 2:
        raise ValueError("a [key, value] pair was expected")
    return value[0], value[1]


def _str(value) -> str:
    if not isinstance(value, str):
        raise ValueError("a string array holds a non-string")
    return value


def _shape(node: dict) -> tuple[int, ...]:
    shape = node.get("shape")
    if not (isinstance(shape, list) and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                                            for s in shape)):
        raise ValueError("an array shape is not a list of sizes")
    return tuple(shape)
