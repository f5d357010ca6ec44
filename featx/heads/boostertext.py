"""LightGBM's text model, read back from a head file and checked before LightGBM parses it. No torch.

LightGBM's C++ parser trusts the text it is given: a split on a feature past the end of a row
reads memory beyond it, a child that points back up the tree loops forever at predict, a
categorical split reads a bitset at offsets the text gives, and a huge class count sizes the
output of every prediction. featx's boosters are gbdt of numerical splits on dense features
(featx/heads/boosting.py), so the text may hold exactly that: the header LightGBM writes with an
objective featx fits, trees whose children only point further down (every walk from the root
ends at a leaf), splits on features that exist, no categorical split and no linear leaf, then
the feature importances and the parameters section as LightGBM writes them (LightGBM keeps that
section as text; nothing in it reaches a prediction).

`problem(text)` says what is wrong with a text, or None for one featx writes.
"""
from __future__ import annotations

import re

HEADER = ("version", "num_class", "num_tree_per_iteration", "label_index", "max_feature_idx", "objective",
          "feature_names", "feature_infos", "tree_sizes")
VERSIONS = ("v3", "v4")
TREE_KEYS = frozenset({"num_leaves", "num_cat", "split_feature", "split_gain", "threshold", "decision_type",
                       "left_child", "right_child", "leaf_value", "leaf_weight", "leaf_count", "internal_value",
                       "internal_weight", "internal_count", "is_linear", "shrinkage"})
# A tree's arrays of one value per inner node (LightGBM reads each count it expects, unchecked),
# those a walk down the tree reads (every tree holds them), and those read as numbers.
INNER = ("split_feature", "split_gain", "threshold", "decision_type", "left_child", "right_child", "internal_value",
         "internal_weight", "internal_count")
SPLITS = ("split_feature", "threshold", "decision_type", "left_child", "right_child")
NUMBERS = ("split_gain", "threshold", "internal_value", "internal_weight", "internal_count", "leaf_value",
           "leaf_weight", "leaf_count", "shrinkage")
# decision_type's bits: 1 a categorical split (never featx's), 2 missing values go left, 4 and 8
# the missing-value kind (none, zero, NaN).
DECISIONS = frozenset({0, 2, 4, 6, 8, 10})
# The most leaves a tree may have: LightGBM's own limit on num_leaves.
MAX_LEAVES = 131_072
# After the trees: importances (name=count), the parameters ([name: value]), no pandas categories.
# Each repeated group consumes up to a fixed character, so matching takes linear time.
TAIL = re.compile(r"end of trees\n\n(?:feature_importances:\n(?:[^\n=]+=\d+\n)*\n)?"
                  r"(?:parameters:\n(?:\[\w+: [^\n\]]*\]\n)*\nend of parameters\n\n)?pandas_categorical:null\n?")


class _Bad(ValueError):
    pass


def problem(text: str) -> str | None:
    """What makes `text` other than a LightGBM model featx writes, or None."""
    if not isinstance(text, str):
        return "LightGBM's text model"
    try:
        _check(text.encode("utf-8", "surrogatepass"))
    except _Bad as exc:
        return f"LightGBM's text model of gbdt trees on numerical splits; {exc}"
    return None


def objectives(classes: int) -> tuple[str, ...]:
    """The objective lines of the boosters featx fits, as LightGBM writes them."""
    return ("binary sigmoid:1", "regression") if classes == 1 else (f"multiclass num_class:{classes}",)


def _check(data: bytes) -> None:
    head, _, body = data.partition(b"\n\n")
    lines = head.decode("ascii", "replace").split("\n")
    if lines[0] != "tree":
        raise _Bad("this one does not begin with LightGBM's 'tree' line")
    header = _pairs(lines[1:], "its header")
    if sorted(header) != sorted(HEADER):
        raise _Bad(f"its header holds {sorted(header)[:12]}, not LightGBM's {list(HEADER)}")
    classes, features = _header(header)
    sizes = [_int(s, "a tree size", 1, len(body)) for s in header["tree_sizes"].split()]
    if len(sizes) < classes or len(sizes) % classes:
        raise _Bad(f"it holds {len(sizes)} trees for {classes} per iteration")
    position = 0
    for number, size in enumerate(sizes):
        _tree(body[position:position + size], number, features)
        position += size
    if not TAIL.fullmatch(body[position:].decode("utf-8", "replace")):
        raise _Bad("what follows its trees is not LightGBM's importances and parameters")


def _header(header: dict) -> tuple[int, int]:
    """(trees per iteration, features) of a header whose values are LightGBM's."""
    if header["version"] not in VERSIONS:
        raise _Bad(f"its version is {header['version'][:20]!r}, not one of {VERSIONS}")
    classes = _int(header["num_class"], "num_class", 1, MAX_LEAVES)
    if _int(header["num_tree_per_iteration"], "num_tree_per_iteration", 1, MAX_LEAVES) != classes:
        raise _Bad("its trees per iteration are not its classes")
    _int(header["label_index"], "label_index", 0, 0)
    features = _int(header["max_feature_idx"], "max_feature_idx", 0, 2 ** 31 - 2) + 1
    if len(header["feature_names"].split()) != features:
        raise _Bad(f"it names {len(header['feature_names'].split())} features, not {features}")
    if header["objective"] not in objectives(classes):
        raise _Bad(f"its objective is {header['objective'][:60]!r}, not one of {objectives(classes)}")
    return classes, features


def _tree(block: bytes, number: int, features: int) -> None:
    """One `Tree=` block: numerical splits on existing features, children that point down."""
    lines = block.decode("ascii", "replace").rstrip("\n").split("\n")
    if lines[0] != f"Tree={number}":
        raise _Bad(f"its tree {number} does not begin where its tree_sizes say")
    tree = _pairs(lines[1:], f"its tree {number}")
    if not set(tree) <= TREE_KEYS or "num_leaves" not in tree:
        raise _Bad(f"its tree {number} holds keys {sorted(set(tree) - TREE_KEYS)[:5]} LightGBM's trees do not")
    leaves = _int(tree["num_leaves"], "num_leaves", 1, MAX_LEAVES)
    if tree.get("num_cat", "0") != "0" or tree.get("is_linear", "0") != "0":
        raise _Bad(f"its tree {number} has categorical splits or linear leaves")
    values = {k: tree.get(k, "").split() for k in TREE_KEYS}
    splits = {k: values[k] for k in INNER if k in tree or k in SPLITS}  # others: checked where present
    if any(len(v) != leaves - 1 for v in splits.values()) or len(values["leaf_value"]) != leaves \
            or any(len(values[k]) not in (0, leaves) for k in ("leaf_weight", "leaf_count")):
        raise _Bad(f"its tree {number} does not hold one split per inner node and one value per leaf")
    for node in range(leaves - 1):
        _int(splits["split_feature"][node], "a split feature", 0, features - 1)
        if _int(splits["decision_type"][node], "a decision type", 0, 255) not in DECISIONS:
            raise _Bad(f"its tree {number} has a split of decision type {splits['decision_type'][node]}")
        for side in ("left_child", "right_child"):
            child = _int(splits[side][node], "a child", -leaves, leaves - 2)
            if 0 <= child <= node:  # an inner node's children come after it: no walk loops
                raise _Bad(f"its tree {number} has a node whose child points back up (a loop)")
    for value in (v for k in NUMBERS for v in values[k]):
        try:
            float(value)
        except ValueError:
            raise _Bad(f"its tree {number} holds {value[:20]!r} where a number belongs") from None


def _pairs(lines: list[str], where: str) -> dict[str, str]:
    pairs = {}
    for line in lines:
        key, sep, value = line.partition("=")
        if not sep or key in pairs:
            raise _Bad(f"{where} holds the line {line[:40]!r}")
        pairs[key] = value
    return pairs


def _int(text: str, what: str, low: int, high: int) -> int:
    if not re.fullmatch(r"-?\d{1,12}", text) or not low <= int(text) <= high:
        raise _Bad(f"{what} is {text[:20]!r}, not an integer from {low} to {high}")
    return int(text)
