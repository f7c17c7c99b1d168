"""The package's layers: every import of orchestrate's own code goes to the same layer or one
below it, never up (docs/design.md draws them). Read from the source with `ast`, so a new module
is checked as soon as it exists; a module no layer names fails the test too."""
from __future__ import annotations

import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "orchestrator"

# Lowest first. A module may import from its own layer and from any layer below it.
LAYERS = [
    {"errors", "contract", "util", "yamlload", "output", "actions", "cluster_settings", "__init__"},
    {"providers", "trainers", "state", "workload", "head"},
    {"launch"},
    {"language"},
    {"render"},
    {"reach"},
    {"cluster"},
    {"clients"},
    {"run", "observe"},
    {"serving", "results", "gitops"},
    {"api"},
    {"commands", "cli", "__main__"},
]
# The code that runs on the cluster ships with the job: it may use only these. (Above it, the
# client may read what it writes, e.g. `orchestrate results` reads a run's files through it.)
WORKLOAD_MAY_USE = {"workload", "contract", "util"}
# What runs on a cluster's head outside jobs (autostop, the log archive): copied there alone.
HEAD_MAY_USE = {"head"}


def top(module: str) -> str:
    """`orchestrator.cluster.plan` -> `cluster`; `orchestrator` -> `__init__`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def layer_of(name: str) -> int:
    for index, members in enumerate(LAYERS):
        if name in members:
            return index
    raise AssertionError(f"orchestrator.{name} is in no layer: add it to LAYERS (and to "
                         f"docs/design.md)")


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, imported module) for every import of orchestrator's own modules in `path`;
    `from pkg import name` names the module pkg.name when there is one."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    submodules = module_names()
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("orchestrator")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("orchestrator"):
                # `from .. import providers`, `from . import results`: the names are modules
                named = [f"{target}.{a.name}" for a in node.names
                         if f"{target}.{a.name}" in submodules]
                found += [(node.lineno, name) for name in named] or [(node.lineno, target)]
    return found


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


@functools.cache
def module_names() -> frozenset[str]:
    return frozenset(module_name(p) for p in modules())


def test_no_import_runs_up_a_layer():
    upward = []
    for path in modules():
        name = top("orchestrator." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts))
        if name == "workload":
            continue
        for line, target in imports(path):
            if target == "orchestrator.__version__":
                continue
            if layer_of(top(target)) > layer_of(name):
                upward.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {target}")
    assert not upward, "imports that run up a layer:\n" + "\n".join(upward)


def test_the_workload_uses_only_what_ships_with_it():
    outside = [f"{path.relative_to(PACKAGE.parent)}:{line} imports {target}"
               for path in modules() if "workload" in path.relative_to(PACKAGE).parts
               for line, target in imports(path) if top(target) not in WORKLOAD_MAY_USE]
    assert not outside, "\n".join(outside)


def test_what_runs_on_the_head_uses_only_what_is_copied_there():
    outside = [f"{path.relative_to(PACKAGE.parent)}:{line} imports {target}"
               for path in modules() if path.relative_to(PACKAGE).parts[0] == "head"
               for line, target in imports(path) if top(target) not in HEAD_MAY_USE]
    assert not outside, "\n".join(outside)


def test_the_checker_sees_imports_of_every_form():
    """The check itself can fail: each import form resolves to the module it names."""
    found = dict((target, line) for line, target in imports(PACKAGE / "cluster" / "apply.py"))
    assert {"orchestrator.cluster.plan", "orchestrator.render.cluster", "orchestrator.providers",
            "orchestrator.state"} <= set(found)
    assert layer_of("cluster") > layer_of("render") > layer_of("language") > layer_of("providers")
    # `from .. import card` in a subpackage names the module, not its package
    fit = {target for _line, target in imports(PACKAGE / "workload" / "train" / "fit.py")}
    assert {"orchestrator.workload.card", "orchestrator.workload.results",
            "orchestrator.workload.configs"} <= fit
    train = {target for _line, target in imports(PACKAGE / "workload" / "train" / "__init__.py")}
    assert {"orchestrator.workload.data", "orchestrator.workload.train.fit"} <= train


# The names of providers and launch backends, and the attributes that hold them: comparing any
# of them outside their homes is knowledge of a provider or a backend spread over the package.
# Elsewhere code asks the provider module (`providers.get(name).X`) or the backend for a
# capability (`launch.Feature`).
NAMES = {"aws", "gcp", "azure", "local", "kuberay", "ray-up"}
NAME_ATTRIBUTES = {"NAME", "LAUNCH", "RAY_UP"}
HOMES = {"providers", "launch"}


def name_comparisons(source: str) -> list[int]:
    """The lines of `source` that compare against a provider's or a backend's name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare | ast.MatchValue):
            parts = list(ast.walk(node))
            constants = {n.value for n in parts if isinstance(n, ast.Constant)}
            attributes = {n.attr for n in parts if isinstance(n, ast.Attribute)} | \
                {n.id for n in parts if isinstance(n, ast.Name)}
            if NAMES & {c for c in constants if isinstance(c, str)} or NAME_ATTRIBUTES & attributes:
                found.append(node.lineno)
    return found


def test_no_provider_or_backend_name_is_compared_outside_their_homes():
    """Provider knowledge lives in orchestrator/providers/, a launch backend's in its folder of
    orchestrator/launch/; elsewhere code asks the provider module or the backend's Feature."""
    found = [f"{path.relative_to(PACKAGE.parent)}:{line}" for path in modules()
             if not HOMES & set(path.relative_to(PACKAGE).parts)
             for line in name_comparisons(path.read_text())]
    assert not found, "provider or backend names compared outside their homes: " + \
        ", ".join(found)


def test_the_name_guard_sees_every_form_of_comparison():
    """The guard itself can fail: each way of asking "is this KubeRay?" by name is found."""
    comparisons = [
        "if providers.get(p).LAUNCH == providers.kuberay.LAUNCH: pass",
        "ok = provider != providers.kuberay.NAME",
        "ok = record.provider not in providers.RAY_UP",
        "ok = kind in ('aws', 'gcp')",
        "match provider:\n    case 'kuberay':\n        pass",
        "ok = launch_name == 'ray-up'",
    ]
    for source in comparisons:
        assert name_comparisons(source), source
    assert name_comparisons("ok = Feature.RESOURCE in launch.features(p)") == []
    assert name_comparisons("ok = provider in providers.PROVIDERS") == []


def module_name(path: Path) -> str:
    """orchestrator/state/__init__.py -> orchestrator.state; orchestrator/cli.py -> orchestrator.cli"""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of orchestrate it imports, at the top or inside a function alike
    (an import moved into a function to dodge a circle is still the circle), and the packages
    those lie in (importing `a.b.c` runs `a/b/__init__.py` first), but for its own."""
    paths = modules()
    names = {module_name(p) for p in paths}
    graph: dict[str, set[str]] = {}
    for path in paths:
        name = module_name(path)
        targets = set()
        for _line, imported in imports(path):
            target = imported
            while target not in names and "." in target:  # `from .m import Name`: the module
                target = target.rsplit(".", 1)[0]
            parts = target.split(".")
            packages = {".".join(parts[:i]) for i in range(2, len(parts))}
            targets |= {t for t in {target, *packages}
                        if t in names and t != name and not name.startswith(t + ".")}
        graph[name] = targets
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_circles_are_found():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle():
    found = circles(import_graph())
    assert not found, "modules that import each other (directly or round a circle):\n" + \
        "\n".join(" <-> ".join(c) for c in found)


# Reads of a spec's raw `document` (the YAML as parsed) outside language/, per module: the
# typed spec is what the rest of the package reads (issue 53 brings these to 0). A ratchet:
# a module may read it less, never more, and a module not listed not at all.
RAW_READS = {
    "providers/aws.py": 10, "providers/gcp.py": 6, "providers/cloud.py": 5,
    "render/service.py": 3, "render/experiment.py": 5, "run/experiment.py": 4,
    "commands/render.py": 1, "providers/azure.py": 4, "providers/local.py": 2,
    "gitops/desired.py": 1, "gitops/planner.py": 1, "providers/kuberay.py": 1,
    "render/cluster.py": 1, "serving/predict.py": 1, "run/tracking.py": 1,
}


def raw_reads(source: str) -> int:
    return sum(isinstance(node, ast.Attribute) and node.attr == "document"
               for node in ast.walk(ast.parse(source)))


def test_the_specs_raw_document_is_read_outside_language_no_more_than_before():
    found = {str(path.relative_to(PACKAGE)): raw_reads(path.read_text()) for path in modules()
             if path.relative_to(PACKAGE).parts[0] != "language"}
    more = {name: count for name, count in found.items() if count > RAW_READS.get(name, 0)}
    assert not more, f"read the typed spec's fields, not its document: {more}"
    fewer = {name: count for name, count in found.items()
             if name in RAW_READS and count < RAW_READS[name]}
    assert not fewer, f"fewer raw reads than RAW_READS allows: lower it to {fewer}"
    assert raw_reads("spec.document.get('x'); other.document") == 2
