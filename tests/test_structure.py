"""The shape of the code: packages by role, imports only downward (the few edges across named
here, with why), no import cycle, modules and functions of a readable size, no branching on a
task's name outside the task registry, the registries agreeing with the config's closed sets,
and the torch-free packages torch-free."""
from __future__ import annotations

import ast
import re
import subprocess
import sys
import typing
from collections import defaultdict

from tests.conftest import ROOT

# A package imports featx's top modules and packages of a lower rank only.
TOP = {"errors", "version", "files", "progress", "tasks", "cpus"}
RANKS = {"top": 0, "config": 1, "data": 2, "backbone": 2, "heads": 2, "stats": 2, "runs": 3, "cache": 3,
         "probe": 4, "finetune": 5, "report": 5, "serve": 6, "curve": 6, "cli": 7, "inmemory": 7, "__init__": 8,
         "__main__": 8}
# Edges between packages of one rank, each with why.
ACROSS = {
    ("data", "stats"): "featx's own split of a multilabel file is the iterative stratification the probe's "
                       "folds use (stats.stratify); data.drop_in_train compares texts as the cache counts "
                       "them (stats.duplicates)",
}
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 450, 60


def modules():
    return sorted(p for p in (ROOT / "featx").rglob("*.py"))


def package_of(path) -> str:
    parts = path.relative_to(ROOT / "featx").parts
    if len(parts) > 1:
        return parts[0]
    return "top" if path.stem in TOP else path.stem


def _target(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "featx" or len(parts) == 1:
        return None
    return "top" if parts[1] in TOP else parts[1]


def imports() -> dict[str, dict[str, set[str]]]:
    """{package: {package it imports: the modules that import it}}."""
    graph: dict = defaultdict(lambda: defaultdict(set))
    for path in modules():
        source = package_of(path)
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("featx"):
                names = [f"featx.{a.name}" for a in node.names] if node.module == "featx" else [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                target = _target(name)
                if target is not None and target != source:
                    graph[source][target].add(str(path.relative_to(ROOT)))
    return graph


def test_every_module_is_in_a_package():
    top = {p.stem for p in (ROOT / "featx").glob("*.py")}
    assert top == TOP | {"cli", "inmemory", "__init__", "__main__"}
    assert {p.name for p in (ROOT / "featx").iterdir() if p.is_dir() and p.name != "__pycache__"} == \
        set(RANKS) - {"top", "cli", "inmemory", "__init__", "__main__"}
    for package in (ROOT / "featx").iterdir():
        if package.is_dir() and package.name != "__pycache__":
            doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text()))
            assert doc and "Imports:" in doc, f"{package.name}/__init__.py says what it owns and may import"


def test_packages_import_downward():
    upward = [(a, b, sorted(where)) for a, targets in imports().items() for b, where in targets.items()
              if RANKS[b] >= RANKS[a] and (a, b) not in ACROSS]
    assert not upward, f"imports of a package of the same or a higher rank: {upward}"


def test_the_documented_graph_is_the_real_one():
    text = (ROOT / "docs" / "architecture.md").read_text()
    documented = {p: set() if rest.strip() == "-" else {t.strip() for t in rest.split(",")}
                  for p, rest in re.findall(r"^    (\w+)\s+-> (.*)$", text, flags=re.M)}
    real = {p: set(targets) for p, targets in imports().items()}
    assert documented == {p: real.get(p, set()) for p in RANKS}


def test_no_import_cycle_between_modules():
    graph: dict = defaultdict(set)
    for path in modules():
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        tree = ast.parse(path.read_text())
        typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                       and getattr(block.test, "id", None) == "TYPE_CHECKING" for n in ast.walk(block)}
        for node in ast.walk(tree):
            if id(node) in typing_only:  # an annotation's import, not run
                continue
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("featx") and node.level == 0:
                # `from featx.data import formats` imports the module featx.data.formats
                graph[name] |= {f"{node.module}.{a.name}" if _is_module(f"{node.module}.{a.name}") else node.module
                                for a in node.names}
    seen, stack, cycles = set(), [], []

    def visit(node):
        if node in stack:
            cycles.append(stack[stack.index(node):] + [node])
            return
        if node in seen:
            return
        seen.add(node)
        stack.append(node)
        for target in graph.get(node, ()):
            visit(target)
        stack.pop()

    for module in list(graph):
        visit(module)
    assert not cycles


def _is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def test_modules_and_functions_are_of_a_readable_size():
    long_modules = [(str(p.relative_to(ROOT)), n) for p in modules()
                    if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES]
    long_functions = [(str(p.relative_to(ROOT)), node.name, node.end_lineno - node.lineno + 1)
                      for p in modules() for node in ast.walk(ast.parse(p.read_text()))
                      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                      and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long_modules and not long_functions, (long_modules, long_functions)


def test_no_branch_on_a_tasks_name_outside_the_registry():
    """Stages ask the task registry (`TASKS[task].classes`), never the task's name."""
    named = re.compile(r"""task\s*(==|!=)\s*["']|["'](binary|multiclass|multilabel|regression)["']\s*(==|!=)\s*\w*task""")
    found = [(str(p.relative_to(ROOT)), i + 1) for p in modules() if p.name != "tasks.py"
             for i, line in enumerate(p.read_text().splitlines()) if named.search(line)]
    assert not found


def test_no_get_on_a_record():
    """Readers index a record's sections: featx.runs.schema.parse_record migrates a record of an
    older featx (every key a reader takes present, null where it was not recorded), so a reader
    needs no fallback. Flags `.get(` on a Record field, on an item of one, and on a name a
    function assigns from one."""
    import dataclasses

    from featx.runs.schema import Record

    hints = typing.get_type_hints(Record)
    sections = {f.name for f in dataclasses.fields(Record) if {dict, list} & _kinds(hints[f.name])}
    found = []
    for path in modules():
        if path.relative_to(ROOT / "featx").as_posix() == "runs/schema.py":  # the migration itself
            continue
        for function in ast.walk(ast.parse(path.read_text())):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            aliases = {target.id for node in ast.walk(function) if isinstance(node, ast.Assign)
                       and _section(node.value) in sections for target in node.targets
                       if isinstance(target, ast.Name)}
            for node in ast.walk(function):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
                    receiver = node.func.value
                    while isinstance(receiver, ast.Subscript):
                        receiver = receiver.value
                    if _section(node.func.value) in sections or getattr(receiver, "id", None) in aliases:
                        found.append((str(path.relative_to(ROOT)), node.lineno, ast.unparse(node)))
    assert not found


def _kinds(hint) -> set:
    return {typing.get_origin(kind) or kind for kind in typing.get_args(hint) or (hint,)}


def _section(node) -> str | None:
    """The attribute an expression reads from (through items, `or` and `if`), or None."""
    if isinstance(node, ast.BoolOp):
        return next(filter(None, map(_section, node.values)), None)
    if isinstance(node, ast.IfExp):
        return _section(node.body) or _section(node.orelse)
    while isinstance(node, ast.Subscript):
        node = node.value
    return node.attr if isinstance(node, ast.Attribute) else None


def test_task_registry_is_the_config_closed_set():
    from featx import tasks
    from featx.config import rules
    from featx.stats import metrics

    assert tuple(tasks.TASKS) == rules.TASK_NAMES
    assert metrics.NAMES == {name: task.metrics for name, task in tasks.TASKS.items()}


def test_head_inputs_are_defined_once():
    from featx.config import rules
    from featx.finetune import modeling

    assert (modeling.MODEL_HEAD, *modeling.HEAD_INPUTS) == rules.HEAD_INPUT_NAMES


def test_cache_report_heads_data_and_probe_import_no_torch():
    code = ("import sys; import featx, featx.cache.reader, featx.report.write, featx.heads.registry, "
            "featx.probe.stage, featx.runs.records, featx.stats.bootstrap, featx.heads.serialize, featx.data; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_the_package_exposes_the_functions_themselves():
    """`featx.embed` and `featx.load_predictor` are the real functions (their own signatures and
    docs), imported on first use so that `import featx` needs no torch."""
    import featx
    from featx.serve.embedding import embed
    from featx.serve.predict import load_predictor

    assert featx.embed is embed and featx.load_predictor is load_predictor
    assert set(featx.__all__) >= {"embed", "load_predictor", "open_cache"}
