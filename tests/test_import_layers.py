"""The package's layers ("who may import whom", written down once, in ``ALLOWED`` below; README.md points here),
checked on the source: an upward import or a cycle between afm's subpackages fails here, before it becomes a tangle.

Every ``import afm.X`` / ``from afm.X import ...`` (also inside functions: a lazy import is still a dependency)
is an edge from the importing top-level module to ``X``. Each module may import only the modules listed for it in
``ALLOWED``; a module missing from ``ALLOWED`` fails the test until its layer is written down here.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "afm"

# Leaves and shared utilities first, applications last: trajectory and sandbox are leaves; tools may use
# sandbox; agent uses trajectory and tools; rewards uses trajectory and sandbox; eval and data use agent and
# rewards; sft uses trajectory; rl uses agent, tools and rewards; sft and rl never import each other; servers are
# standalone services (reached over HTTP).
ALLOWED: dict[str, set[str]] = {
    "trajectory": set(),
    "sandbox": set(),
    # stdlib leaves (names, table_io, env_defaults, chat_client, kvcache, procs, ray_scope): each imports nothing of
    # afm, not even a neighbour (test_common_modules_are_leaves)
    "common": set(),
    "launch": set(),  # launch settings declared once (SFT/DPO, RL), their checks, help and command (stdlib only)
    # pretrained models prepared for afm (GGUF reading, tokenizer rebuild, HF conversion, export) and the tiny Qwen2
    # built from nothing (afm.model.tiny: --local's toy policy needs it, so it is product code, not a stand-in)
    "model": set(),
    "prompts": {"trajectory", "common"},
    "tools": {"sandbox", "common"},
    "servers": {"common", "demo_content"},
    "demo_content": {"trajectory"},  # the demo's documents, questions and samples: data every layer may read
    # the offline stand-ins (OpenAI-compatible server, Qwen2.5 tokenizer, reference SPM): tests, benchmarks and the
    # quickstart use them, no product code does (test_product_code_imports_no_stand_in)
    "offline": {"common", "model"},
    "agent": {"trajectory", "tools", "prompts", "common"},
    "rewards": {"trajectory", "sandbox", "common"},
    "eval": {"agent", "rewards", "trajectory", "tools", "prompts", "demo_content", "common"},
    "data": {"agent", "rewards", "trajectory", "tools", "prompts", "common"},
    "sft": {"trajectory", "launch"},  # afm.sft.knobs re-exports afm.launch.sft; the watchdog reads its variable
    # the toy task of the local RL profile builds its parquet with afm.data and its policy with afm.model.tiny; the
    # CPU process-group patch takes a free port from afm.common.procs
    "rl": {"agent", "tools", "rewards", "trajectory", "prompts", "sandbox", "data", "model", "demo_content", "launch",
           "common"},
    # applications: the quickstart (afm/quickstart: the recipe in miniature), the CLI and the doctor sit on top
    "quickstart": {"agent", "common", "data", "eval", "launch", "model", "prompts", "servers", "offline", "rewards",
                   "tools", "trajectory", "sandbox", "demo_content", "view"},
    "doctor": {"sft", "sandbox"},
    # afm view: the trajectory viewer page of eval runs, inference output, SFT sets and verl dumps (reads their files;
    # eval's metrics and report figures, trajectory's parser)
    "view": {"eval", "trajectory", "common"},
    "cli": {"agent", "common", "data", "doctor", "eval", "quickstart", "sandbox", "trajectory", "servers", "model",
            "view"},
}


# Outside the product: the stand-ins of tests and benchmarks, and the quickstart (an application of the product).
# Only they, and the CLI's `afm quickstart` command, may import them.
OUTSIDE_PRODUCT = {"offline", "quickstart"}
IMPORTS_OUTSIDE = {"cli": {"quickstart"}}


def _module(path: Path) -> str:
    return path.relative_to(PKG).parts[0].removesuffix(".py")


def _imported(path: Path) -> set[str]:
    """Top-level afm modules imported anywhere in one file (absolute and relative imports)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    rel_parts = list(path.relative_to(PKG).parts[:-1])
    out: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = rel_parts[: len(rel_parts) - (node.level - 1)]
                if not base:  # `from .. import x` at the package root: x is the module
                    out.update(a.name for a in node.names)
                    continue
                names = [".".join(["afm", *base])]
            elif node.module:
                names = [node.module]
        for name in names:
            parts = name.split(".")
            if parts[0] == "afm" and len(parts) > 1:
                out.add(parts[1])
    return out


def import_graph() -> dict[str, dict[str, list[str]]]:
    """{module: {imported module: [files importing it]}} between afm's top-level modules."""
    graph: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for path in sorted(PKG.rglob("*.py")):
        src = _module(path)
        if src == "__init__":
            continue
        for dst in _imported(path) - {src}:
            graph[src][dst].append(str(path.relative_to(PKG.parent)))
    return graph


def test_every_module_has_a_layer():
    modules = {_module(p) for p in PKG.iterdir() if (p.suffix == ".py" or (p / "__init__.py").exists())}
    missing = sorted(modules - set(ALLOWED) - {"__init__"})
    assert not missing, f"add these afm modules to ALLOWED in {__file__} (which layer?): {missing}"


def test_no_upward_imports():
    graph = import_graph()
    assert "agent" in graph["eval"] and "trajectory" in graph["agent"]  # the scan sees real edges
    bad = [f"afm.{src} -> afm.{dst} ({', '.join(files)})"
           for src, deps in sorted(graph.items()) for dst, files in sorted(deps.items())
           if dst not in ALLOWED.get(src, set())]
    assert not bad, "imports against the layers (ALLOWED):\n" + "\n".join(bad)


def test_no_cycles():
    graph = {src: set(deps) for src, deps in import_graph().items()}
    cycles = []
    for start in graph:
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in graph.get(node, ()):
                if nxt == start:
                    cycles.append(" -> ".join([*path, nxt]))
                elif nxt not in path and len(path) < len(graph):
                    stack.append((nxt, [*path, nxt]))
    assert not cycles, "import cycles between afm modules:\n" + "\n".join(sorted(set(cycles)))


@pytest.mark.parametrize("framework", ["llamafactory", "verl"])
def test_frameworks_imported_only_by_their_overlay(framework):
    home = {"llamafactory": "sft", "verl": "rl"}[framework]
    bad = []
    for path in PKG.rglob("*.py"):
        if _module(path) in (home, "doctor"):  # the doctor reports the versions installed
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else [])
            bad += [f"{path.relative_to(PKG.parent)}: {n}" for n in names if n.split(".")[0] == framework]
    assert not bad, f"{framework} imported outside afm/{home}:\n" + "\n".join(bad)


def _module_imports(path: Path) -> set[str]:
    """Dotted afm modules one file imports (``from afm.x import y`` counts ``afm.x.y`` when that is a module)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("afm."))
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level and node.module.startswith("afm"):
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                as_file = PKG.parent / (sub.replace(".", "/") + ".py")
                out.add(sub if as_file.is_file() or (as_file.with_suffix("") / "__init__.py").is_file() else node.module)
    return out


# Two-file circles still open; one broken should leave this list (issue 29's three are all closed).
KNOWN_CIRCLES: set[tuple[str, str]] = set()


def test_no_two_file_import_circles():
    """Inside a package too: two modules importing each other (even lazily) hide which of them is the lower one."""
    imports = {".".join(p.relative_to(PKG.parent).with_suffix("").parts): _module_imports(p)
               for p in PKG.rglob("*.py") if p.name != "__init__.py"}
    circles = {tuple(sorted((a, b))) for a, deps in imports.items() for b in deps
               if a != b and a in imports.get(b, set())}
    assert circles - KNOWN_CIRCLES == set()


def test_common_modules_are_leaves():
    """afm/common holds stdlib leaves: a module there importing afm (even a neighbour) belongs in a layer above."""
    bad = {str(p.relative_to(PKG.parent)): sorted(deps) for p in sorted((PKG / "common").glob("*.py"))
           if (deps := _module_imports(p))}
    assert not bad, f"afm/common modules importing afm: {bad}"


def test_product_code_imports_no_stand_in():
    """No product module imports the offline stand-ins or the quickstart (tests and benchmarks are not under afm/)."""
    graph = import_graph()
    bad = [f"afm.{src} -> afm.{dst} ({', '.join(files)})"
           for src, deps in sorted(graph.items()) if src not in OUTSIDE_PRODUCT
           for dst, files in sorted(deps.items())
           if dst in OUTSIDE_PRODUCT and dst not in IMPORTS_OUTSIDE.get(src, set())]
    assert not bad, "product code importing the stand-ins or the quickstart:\n" + "\n".join(bad)


if __name__ == "__main__":  # `python tests/test_import_layers.py`: the size of the map (issue 29 counts rooms/arrows)
    edges = import_graph()
    rooms = {_module(p) for p in PKG.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()} - {"__init__"}
    print(f"{len(rooms)} top-level modules (rooms), {sum(len(d) for d in edges.values())} import edges (arrows)")
