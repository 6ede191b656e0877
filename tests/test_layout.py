"""The package's layers (docs/reference/layout.md, "The layers"): the real-data path (parsers, collation,
campaign, analyses, report) never loads the simulator, and the simulator never loads the
analyses; what they share lives in modules of its own (data.rawlayout, experiments, defaults).
Below every stage: the helpers (util), the data model (data) and the system model (system)."""

from __future__ import annotations

import subprocess
import sys

import pytest

REAL_DATA_PATH = ["hpcvar.parsers", "hpcvar.collate", "hpcvar.data.dataset", "hpcvar.campaign.reframe_import",
                  "hpcvar.campaign.rounds", "hpcvar.campaign.interference", "hpcvar.analyses.overview",
                  "hpcvar.analyses.neighbourhood",
                  "hpcvar.analyses.deviation", "hpcvar.analyses.forecast", "hpcvar.analyses.distributions",
                  "hpcvar.analyses.compare", "hpcvar.analyses.interference", "hpcvar.analyses.explain",
                  "hpcvar.analyses.assemble", "hpcvar.report.build",
                  "hpcvar.data.rawlayout", "hpcvar.experiments.spec", "hpcvar.experiments.placement"]


def loaded_after_importing(modules: list[str]) -> set[str]:
    code = ("import importlib, sys\n"
            f"for m in {modules!r}: importlib.import_module(m)\n"
            "print('\\n'.join(sorted(m for m in sys.modules if m.startswith('hpcvar'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


@pytest.mark.parametrize("module", REAL_DATA_PATH)
def test_the_real_data_path_does_not_load_the_simulator(module):
    loaded = loaded_after_importing([module])
    assert module in loaded
    assert not {m for m in loaded if m == "hpcvar.simulate" or m.startswith("hpcvar.simulate.")}


def test_the_simulator_does_not_load_the_analyses():
    loaded = loaded_after_importing(["hpcvar.simulate", "hpcvar.simulate.interference"])
    assert "hpcvar.simulate.interference" in loaded
    assert not {m for m in loaded if m.startswith(("hpcvar.analyses", "hpcvar.report", "hpcvar.campaign"))}


def test_the_report_renders_and_loads_no_analysis():
    """The report computes nothing: its numbers and figures are the analyses' (their typed
    results, hpcvar.results), so loading it loads no analysis, nor collation."""
    loaded = loaded_after_importing(["hpcvar.report"])
    assert "hpcvar.report.build" in loaded and "hpcvar.results.overview" in loaded
    assert not {m for m in loaded if m.startswith(("hpcvar.analyses", "hpcvar.collate", "hpcvar.simulate"))}


def module_imports() -> dict[str, set[str]]:
    """Each hpcvar module's module-level imports of other hpcvar modules (imports inside functions,
    which run only when called, left out), from the source."""
    import ast
    from pathlib import Path

    src = Path(__file__).resolve().parents[1] / "src"
    modules = {}
    for path in (src / "hpcvar").rglob("*.py"):
        parts = path.relative_to(src).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        edges = set()
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            edges |= {t for t in targets if t in modules and t != name}
        graph[name] = edges
    return graph


def test_the_import_graph_has_no_cycle():
    """Module-level imports between hpcvar's modules form no cycle (a package's __init__ counts as
    the package), so every module can be read, and changed, after the ones it builds on."""
    from graphlib import CycleError, TopologicalSorter

    graph = module_imports()
    assert len(graph) > 90 and "hpcvar.analyses.assemble" in graph
    try:
        order = list(TopologicalSorter(graph).static_order())
    except CycleError as exc:
        pytest.fail(f"import cycle: {' -> '.join(exc.args[1])}")
    # Lower layers first: settings and results before the analyses, the analyses before the CLI.
    position = {m: i for i, m in enumerate(order)}
    assert position["hpcvar.settings"] < position["hpcvar.results.forecast"] < position["hpcvar.analyses.forecast"]
    assert position["hpcvar.analyses.registry"] < position["hpcvar.analyses.assemble"]



def test_helpers_and_models_build_on_no_stage():
    """The helpers (hpcvar.util) import no other hpcvar module; the data model (hpcvar.data) and the
    system model (hpcvar.system) import only each other, the helpers and the parsers' errors."""
    def within(module: str, packages: tuple[str, ...]) -> bool:
        return any(module == p or module.startswith(p + ".") for p in packages)

    graph = module_imports()
    below = ("hpcvar.util", "hpcvar.data", "hpcvar.system", "hpcvar.parsers.errors")
    for name, edges in graph.items():
        if within(name, ("hpcvar.util",)):
            assert not edges, f"{name} imports {sorted(edges)}"
        elif within(name, ("hpcvar.data", "hpcvar.system")):
            assert all(within(e, below) for e in edges), f"{name} imports {sorted(edges)}"


def test_the_reframe_suite_loads_without_pandas():
    """ReFrame imports every file of the suite at each start (a campaign round, each test's own
    ReFrame run): what the suite imports from hpcvar at module level (the raw layout's names, the
    container helpers, the grids) must not pull in pandas, about half a second of every start.
    (``import hpcvar.parsers.errors`` used to import every format's reader.)"""
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    files = sorted(p for p in (repo / "reframe_tests").rglob("*.py") if "build" not in p.parts)
    modules = [".".join(p.relative_to(repo).with_suffix("").parts).removesuffix(".__init__") for p in files]
    code = ("import importlib, sys\n"
            f"for m in {modules!r}: importlib.import_module(m)\n"
            "print(sorted(m for m in ('pandas', 'pyarrow', 'hpcvar.parsers.sacct') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=repo)
    assert out.returncode == 0, out.stderr[-3000:]
    assert len(modules) > 10 and "reframe_tests.common.containers" in modules
    assert out.stdout.strip() == "[]", out.stdout
