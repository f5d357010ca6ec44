"""Pipeline files: a TOML file (and `key=value` overrides) read into a validated `Pipeline`,
the command that reruns a pipeline as configured, and the keys reference (docs/keys.md). The
dataclasses themselves, their validation and the layer arithmetic are `featx.config.pipeline`'s (and the
modules it re-exports from).

Every value is checked against its field's type hint before the dataclass validates it;
unknown keys are errors (a typo must not silently fall back to a default).
"""
from __future__ import annotations

import dataclasses
import math
import re
import tomllib
import types
import typing
from pathlib import Path

from featx.config.pipeline import SECTIONS, Pipeline
from featx.errors import FeatxError, check_choice, shown
from featx.files import read_bytes


def field_docs(cls) -> dict[str, str]:
    """Each field's docstring (the string literal under it in the class body), read from the
    source: the one place a key is described."""
    import ast
    import inspect

    body = ast.parse(inspect.getsource(cls)).body[0].body
    docs = {}
    for node, after in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
            docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def keys_reference(section: str | None = None) -> str:
    """Every key of a pipeline file with its type, default and docstring, as markdown (docs/keys.md
    is this text; `featx keys [section]` prints it)."""
    tables = {"pipeline": Pipeline, **SECTIONS}
    if section is not None:
        check_choice(section, tables, "section")
    lines = ["# Pipeline keys", "",
             "Every key of a pipeline file (`pipelines/<name>.toml`), with its default; generated from the "
             "dataclasses in `featx/config/pipeline.py` and `featx/config/stages.py` (`featx keys [section]` prints the same). Override any on "
             "the command line as `section.key=value`.", ""]
    for name, cls in tables.items():
        if section is not None and name != section:
            continue
        hints, docs = typing.get_type_hints(cls), field_docs(cls)
        lines += [f"## [{name}]" if name != "pipeline" else "## top level", "", "| key | type | default | meaning |",
                  "|---|---|---|---|"]
        for f in dataclasses.fields(cls):
            if f.name in SECTIONS or f.name in ("source", "overrides"):
                continue  # the sections themselves; set by featx, not by a file
            default = (f.default if f.default is not dataclasses.MISSING else
                       "(required)" if f.default_factory is dataclasses.MISSING else f.default_factory())
            shown = "(required)" if default == "(required)" else "unset" if default is None else _toml_value(default)
            shown = "the file's name" if f.name == "name" and cls is Pipeline else f"`{shown}`"  # load_pipeline
            kind = getattr(hints[f.name], "__name__", None) if isinstance(hints[f.name], type) else None
            kind = kind or str(hints[f.name]).replace("typing.", "").replace("NoneType", "None").replace(" | ", " or ")
            meaning = docs.get(f.name, "").replace("|", "\\|")  # a Markdown table cell: `|` escaped
            lines.append(f"| `{f.name}` | `{kind}` | {shown} | {meaning} |")
        lines.append("")
    return "\n".join(lines)


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return repr(value)


def load_pipeline(path: str | Path, overrides: typing.Sequence[str] = ()) -> Pipeline:
    """Read a pipeline TOML file, apply `key=value` overrides, validate, return the config."""
    path = Path(path)
    if path.is_dir():
        raise FeatxError(f"{str(path)!r} is a folder, not a pipeline file; give a .toml file such as "
                         f"{_pipelines_hint()}")
    if not path.exists():
        raise FeatxError(f"pipeline file {str(path)!r} not found; {_pipelines_hint()}")
    try:
        # utf-8-sig: an editor's byte-order mark is not part of the first key (data files strip it too)
        raw = _toml(read_bytes(path, "a pipeline file", limit=1 << 20).decode("utf-8-sig"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, ValueError) as exc:
        raise FeatxError(f"pipeline file {str(path)!r} is not valid TOML: {str(exc)[:300]}") from None
    raw.setdefault("name", path.stem)
    for item in overrides:
        _apply_override(raw, item)
    return pipeline_from_dict(raw, source=str(path), overrides=tuple(overrides))


def command(pipeline: Pipeline | None, stage: str, *extra: str, args: tuple[str, ...] = ()) -> str:
    """The shell command that runs `stage` on this pipeline as configured: the command's own
    arguments `args` after the pipeline file, then its overrides and `extra` ones (an extra
    override of the same key replaces the pipeline's)."""
    import shlex

    source, shown = _command_parts(pipeline, extra)
    return " ".join(["featx", stage, shlex.quote(source), *args] + [shlex.quote(o) for o in shown])


def make_command(pipeline: Pipeline | None, target: str, *extra: str) -> str:
    """`command`'s `make` form: `make report PIPELINE=pipelines/x.toml ARGS='key=value ...'`."""
    import shlex

    source, shown = _command_parts(pipeline, extra)
    # make expands $ in ARGS ($$ is a $), then hands it to a shell in the recipe
    overrides = " ".join(shlex.quote(o) for o in shown).replace("$", "$$")
    if "'" in overrides:  # quoted overrides inside: double quotes around them read better than '"'"'
        quoted = '"' + re.sub(r'(["\\$`])', r"\\\1", overrides) + '"'
    else:
        quoted = shlex.quote(overrides)
    return " ".join(["make", target, f"PIPELINE={shlex.quote(source)}"] + ([f"ARGS={quoted}"] if overrides else []))


def _command_parts(pipeline: Pipeline | None, extra) -> tuple[str, list[str]]:
    overrides = pipeline.overrides if pipeline is not None else ()
    shown = [o for o in overrides if o.partition("=")[0].strip() != "progress"]
    keys = {e.partition("=")[0] for e in extra}
    shown = [o for o in shown if o.partition("=")[0].strip() not in keys] + list(extra)
    source = pipeline.source if pipeline is not None and pipeline.source else "PIPELINE.toml"
    return source, shown


def _toml(text: str) -> dict:
    """tomllib.loads whose every failure is a TOMLDecodeError or ValueError (a table nested
    thousands deep exhausts the parser's recursion, which is the file's fault, not featx's)."""
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise ValueError("it is nested too deeply (thousands of arrays or tables inside each other)") from None


def _pipelines_hint() -> str:
    found = sorted(str(p) for p in Path("pipelines").glob("*.toml"))
    if found:
        return "the pipelines here are: " + ", ".join(found[:20]) + (" ..." if len(found) > 20 else "")
    return (f"there is no pipelines/ folder with .toml files in {str(Path.cwd())!r} (relative paths start "
            "at the directory featx runs from)")


def pipeline_from_dict(raw: dict, source: str | None = None, overrides: tuple[str, ...] = ()) -> Pipeline:
    """Build a validated `Pipeline` from a parsed TOML table (unknown keys are errors)."""
    raw = dict(raw)
    if "data" not in raw:
        raise FeatxError(f"pipeline {source or ''} has no [data] section; say which dataset to use")
    for key, cls in SECTIONS.items():
        table = raw.get(key, {})
        if not isinstance(table, dict):
            raise FeatxError(f"[{key}] must be a table, got {type(table).__name__}")
        raw[key] = _build(cls, table, key)
    return _build(Pipeline, {**raw, "source": source, "overrides": tuple(overrides)}, "pipeline")


def _apply_override(raw: dict, item: str) -> None:
    key, sep, text = item.partition("=")
    if not sep or not key.strip():
        raise FeatxError(f"override {shown(item)} must look like section.key=value, e.g. data.max_rows=500")
    try:  # a TOML literal (numbers, booleans, lists, quoted strings) ...
        value = _toml(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:  # ... or a bare word, taken as a string
        value = text
    except ValueError as exc:
        raise FeatxError(f"override {shown(item)}: {exc}") from None
    *parents, leaf = key.strip().split(".")
    table = raw
    for part in parents:
        table = table.setdefault(part, {})
        if not isinstance(table, dict):
            raise FeatxError(f"override {shown(item)}: {shown(part)} is not a section")
    table[leaf] = value


def _build(cls, table: dict, where: str):
    hints = typing.get_type_hints(cls)
    known = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(table) - set(known))
    if unknown:
        listed = "[" + ", ".join(shown(k) for k in unknown[:10]) + (", ...]" if len(unknown) > 10 else "]")
        raise FeatxError(f"unknown key(s) {listed} in [{where}]; known keys: {', '.join(known)}")
    kwargs = {name: _coerce(value, hints[name], f"{where}.{name}") for name, value in table.items()}
    try:
        return cls(**kwargs)
    except TypeError as exc:  # a required field is missing
        raise FeatxError(f"[{where}]: {exc}") from None


def _coerce(value, hint, where: str):
    """Check `value` against a simple type hint; lists become tuples (configs are frozen)."""
    options = typing.get_args(hint) if _is_union(hint) else (hint,)
    for option in options:
        if option is type(None) and value is None:
            return None
        origin = typing.get_origin(option)
        if origin is tuple and isinstance(value, (list, tuple)):
            item_type = typing.get_args(option)[0]
            if all(_is_instance(v, item_type) for v in value):
                if item_type is float and not all(math.isfinite(v) for v in value):
                    raise FeatxError(f"{where} must hold finite numbers, got {shown(list(value))}")
                return tuple(float(v) for v in value) if item_type is float else tuple(value)
        elif origin is None and option is not type(None) and _is_instance(value, option):
            if option is float and not math.isfinite(value):
                raise FeatxError(f"{where} must be a finite number, got {shown(value)}")
            return float(value) if option is float else value
    wanted = " or ".join(_type_name(o) for o in options)
    raise FeatxError(f"{where} must be {wanted}, got {shown(value)}")


def _is_union(hint) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType)


def _is_instance(value, kind) -> bool:
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def _type_name(kind) -> str:
    if typing.get_origin(kind) is tuple:
        item = typing.get_args(kind)[0]
        return f"a list of {getattr(item, '__name__', None) or str(item)}"
    return "nothing" if kind is type(None) else f"a {kind.__name__}"
