"""The package's shape stays what CONTRIBUTING.md describes: no import cycle, the layout section names what exists,
and the estimator and harness functions stay short enough to read."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "lm_latent_eval"
MAX_FUNCTION_LINES = 60


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Package modules imported anywhere in ``path`` (module level and inside functions), resolved to modules."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            if base.startswith("lm_latent_eval"):
                out.add(base)
                out.update(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names if alias.name.startswith("lm_latent_eval"))
    return out


def test_the_package_has_no_import_cycle():
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {m: {i for i in _imports(p) if i in modules and i != m} for m, p in modules.items()}
    # a package's __init__ re-exporting its own modules is not a cycle between modules: drop package -> child edges
    graph = {m: {i for i in deps if not i.startswith(m + ".")} for m, deps in graph.items()}
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for dep in sorted(graph[m]):
            if state.get(dep) == 1:
                raise AssertionError("import cycle: " + " -> ".join([*path[path.index(dep) :], dep]))
            if dep not in state:
                visit(dep, [*path, dep])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])


def test_contributing_layout_names_every_module_of_the_core_and_nothing_that_is_gone():
    layout = (REPO / "CONTRIBUTING.md").read_text(encoding="utf-8").split("```", 2)[1]
    for folder in ("estimators", "harness"):
        for path in (PACKAGE / folder).glob("*.py"):
            if path.name != "__init__.py":
                assert path.name in layout, f"CONTRIBUTING.md's layout does not name {folder}/{path.name}"
    for top in PACKAGE.iterdir():
        if (
            top.suffix == ".py"
            and top.name != "__init__.py"
            or top.is_dir()
            and (top / "__init__.py").exists()
        ):
            assert top.name.removesuffix(".py") in layout, (
                f"CONTRIBUTING.md's layout does not name {top.name}"
            )
    named = set(re.findall(r"\b(\w+\.py)\b", layout))
    existing = {p.name for folder in (PACKAGE, REPO / "tests", REPO / "bench") for p in folder.rglob("*.py")}
    missing = named - existing - {"_lm_latent_eval_hook.py"}
    assert not missing, f"CONTRIBUTING.md's layout names files that do not exist: {sorted(missing)}"


def test_no_function_in_estimators_or_harness_is_over_60_lines():
    long = []
    for folder in ("estimators", "harness"):
        for path in (PACKAGE / folder).glob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    lines = node.end_lineno - node.lineno + 1
                    if lines > MAX_FUNCTION_LINES:
                        long.append(f"{folder}/{path.name}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, long


def test_no_module_outside_estimators_branches_on_which_estimator_ran():
    """Issue 42: everything that differs by estimator is asked of the estimator object. For every estimator of the
    table, no module outside ``lm_latent_eval/estimators/`` compares with its name or its object, keys a table by its
    name, or tests ``isinstance`` against its class or its estimate's class (``bench/architecture.py``'s
    ``estimator_references`` finds them; choosing an estimator where it is built, ``EstimatorSettings("beam")``, is
    not branching)."""
    import sys

    from lm_latent_eval.estimators.registry import ESTIMATORS

    sys.path.insert(0, str(REPO / "bench"))
    try:
        from architecture import estimator_references
    finally:
        sys.path.remove(str(REPO / "bench"))
    for estimator in ESTIMATORS.values():
        module = sys.modules[type(estimator).__module__]
        constants = {name for name, value in vars(module).items() if value is estimator}
        classes = {type(estimator).__name__, estimator.result.__name__}
        found = estimator_references(REPO, {estimator.name}, classes, constants)
        assert not found, f"estimator={estimator.name} named outside estimators/: {found}"
