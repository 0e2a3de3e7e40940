"""The package's shape stays what CONTRIBUTING.md describes: no import cycle, the layout section names what exists,
and the estimator and harness functions stay short enough to read."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

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


def _estimator_references():
    """``bench/architecture.py``'s ``estimator_references``."""
    sys.path.insert(0, str(REPO / "bench"))
    try:
        from architecture import estimator_references
    finally:
        sys.path.remove(str(REPO / "bench"))
    return estimator_references


# The places outside estimators/ where a whole string literal equal to an estimator's name is not that estimator,
# by (path, what is named): each with its reason. An entry no longer found fails the test too: keep this short.
NOT_AN_ESTIMATOR = {
    ("lm_latent_eval/models/kglm/synthetic.py", "'is'"): "an English word in the synthetic corpus",
    ("lm_latent_eval/reports/card/reproduce.py", "'is'"): "the English verb of a note ('is' or 'are')",
    ("lm_latent_eval/reports/plots.py", "'exact'"): "the legend of the true value, whatever computed it",
}


def test_no_module_outside_estimators_names_an_estimator():
    """Issues 42 and 51: everything that differs by estimator is asked of the estimator object. No module outside
    ``lm_latent_eval/estimators/`` names an estimator of the table in any form: compares with its name or its
    object, keys a table by its name, passes its name as an argument or a default (``json_key("is")``,
    ``.get("estimator", "is")``), writes a message that names it or lists estimators by hand (``use estimator=smc
    or is``: such lists come from the table), or tests ``isinstance`` against its class or its estimate's class
    (``bench/architecture.py``'s ``estimator_references`` finds them; choosing an estimator where its settings are
    built, ``EstimatorSettings("beam")``, is not naming it). ``NOT_AN_ESTIMATOR``: the literals that are not."""
    from lm_latent_eval.estimators.registry import ESTIMATORS

    names, classes, constants = set(), set(), set()
    for estimator in ESTIMATORS.values():
        module = sys.modules[type(estimator).__module__]
        names.add(estimator.name)
        classes |= {type(estimator).__name__, estimator.result.__name__}
        constants |= {name for name, value in vars(module).items() if value is estimator}
    found = _estimator_references()(REPO, names, classes, constants)
    key = {f: (f.split(":", 1)[0], f.rsplit(" ", 1)[-1]) for f in found}
    named = [f for f in found if key[f] not in NOT_AN_ESTIMATOR]
    assert not named, f"estimators named outside estimators/: {named}"
    stale = set(NOT_AN_ESTIMATOR) - set(key.values())
    assert not stale, f"NOT_AN_ESTIMATOR lists places that no longer name an estimator: {sorted(stale)}"


@pytest.mark.parametrize(
    "line,names_one",
    [
        ('key = json_key("is")', True),
        ('name = settings.get("estimator", "is")', True),
        ('def run(estimator="smc"): ...', True),
        ('if name in ("beam", "exact"): ...', True),
        ('rows = {"smc": [], "beam": []}["smc"]', True),
        ('kind = "smc" if stepwise else "is"', True),
        ('raise ValueError(f"{n} words: use estimator=smc, is or beam")', True),
        ('raise ValueError("the ELBO reads one window (exact, smc or is read it in windows)")', True),
        ('warn("is_greedy is only computed by estimator=exact")', True),
        ("ok = isinstance(estimate, ISEstimate)", True),
        ("same = method is IMPORTANCE", True),
        ('settings = EstimatorSettings("smc" if stepwise else "is", num_samples=8)', False),
        ('run = resolve(EstimatorSettings(estimator="beam", beam_size=4), model)', False),
        ('raise ValueError(f"the text is too long: {n} is more than it is or was")', False),
        ('def f():\n    """Use estimator=smc or is."""', False),
    ],
)
def test_the_estimator_detector_finds_every_form(tmp_path, line, names_one):
    """What ``estimator_references`` counts as naming an estimator, one form per row."""
    module = tmp_path / "lm_latent_eval" / "reports" / "module.py"
    module.parent.mkdir(parents=True)
    module.write_text(line + "\n", encoding="utf-8")
    found = _estimator_references()(tmp_path, {"is", "smc", "beam", "exact"}, {"ISEstimate"}, {"IMPORTANCE"})
    assert bool(found) == names_one, found
