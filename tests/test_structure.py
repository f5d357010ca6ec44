"""The shape of the code: data flows one way (no import cycle, no module importing a layer
above it), the registries agree with the config's closed sets, and the torch-free modules stay
torch-free."""
from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict

from tests.conftest import ROOT

# Lower layers first; a module may import only modules of its own layer or below.
LAYERS = [
    {"errors", "version", "tasks", "files", "progress"},
    {"configrules", "stageconfig", "config", "configfile", "metrics", "bootstrap", "pooling", "heads", "varying", "targets", "boosting", "lexical", "torchheads",
     "pairs", "serialize", "stratify", "stream", "streamformats", "streamcolumns", "streamlabels", "spans", "ridge", "search", "readers", "builtin", "labels", "splits", "resolve",
     "recordschema"},
    {"data", "backbone", "records", "choice", "headfiles", "batching"},
    {"cacheschema", "cache", "cachewriter", "modeling", "training", "job", "baselines"},
    {"plan", "verdict", "plots", "manifest", "export"},
    {"extract", "probe", "report", "embedding"},
    {"distributed", "finetune"},
    {"predict"},
    {"cli", "__init__", "__main__"},
]


def imports() -> dict[str, set[str]]:
    graph = defaultdict(set)
    for path in (ROOT / "featx").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("featx"):
                names = [node.module.split(".")[1]] if "." in node.module else [a.name for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name.split(".")[1] for a in node.names if a.name.startswith("featx.")]
            graph[path.stem] |= {n for n in names if n != path.stem}
    return graph


def test_the_documented_import_graph_is_the_real_one():
    import re

    text = (ROOT / "docs" / "architecture.md").read_text()
    documented = {m: set() if rest.strip() == "-" else {t.strip() for t in rest.split(",")}
                  for m, rest in re.findall(r"^    (\w+)\s+-> (.*)$", text, flags=re.M)}
    real = imports()
    assert documented == {m: real[m] for m in set().union(*LAYERS)}


def test_every_module_has_a_layer():
    modules = {p.stem for p in (ROOT / "featx").glob("*.py")}
    assert modules == set().union(*LAYERS)


def test_data_flows_one_way():
    level = {m: i for i, layer in enumerate(LAYERS) for m in layer}
    upward = [(a, b) for a, targets in imports().items() for b in targets if level[b] > level[a]]
    assert not upward, f"imports of a higher layer: {upward}"


def test_no_import_cycle():
    graph, seen, stack, cycles = imports(), set(), [], []

    def visit(node):
        if node in stack:
            cycles.append(stack[stack.index(node):] + [node])
            return
        if node in seen:
            return
        seen.add(node)
        stack.append(node)
        for target in graph[node]:
            visit(target)
        stack.pop()

    for module in list(graph):
        visit(module)
    assert not cycles


def test_task_registry_is_the_config_closed_set():
    from featx import config, metrics, tasks

    assert tuple(tasks.TASKS) == config.TASKS
    assert metrics.NAMES == {name: task.metrics for name, task in tasks.TASKS.items()}


def test_head_inputs_are_defined_once():
    from featx import config, modeling

    assert (modeling.MODEL_HEAD, *modeling.HEAD_INPUTS) == config.HEAD_INPUTS


def test_cache_report_heads_and_probe_import_no_torch():
    code = ("import sys; import featx, featx.cache, featx.report, featx.heads, featx.probe, featx.records, "
            "featx.bootstrap, featx.serialize; assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_the_package_exposes_the_functions_themselves():
    """`featx.embed` and `featx.load_predictor` are the real functions (their own signatures and
    docs), imported on first use so that `import featx` needs no torch."""
    import featx
    from featx.embedding import embed
    from featx.predict import load_predictor

    assert featx.embed is embed and featx.load_predictor is load_predictor
    assert set(featx.__all__) >= {"embed", "load_predictor", "open_cache"}
