"""Architecture figures of a checkout (issues 30 and 42, before and after): estimator-name string comparisons outside the
estimator table and, widened (issue 42), every place outside ``estimators/`` that branches on which estimator ran
(comparisons with its name or object, ``isinstance`` tests on estimator and estimate classes, tables keyed by
estimator names) and, widened again (issue 51), every place there that names one in any form (an argument, a
default, a message that lists estimators: ``estimator_references``), places that check ``num_samples``, the lines of
``LatentLMEval``, mutable module globals shared between the backend and the tasks and, widened, every place with
process-wide mutable state (``process_wide_state``), the floors of ``estimators/`` in its import graph, and
function-local imports.

    python bench/architecture.py [CHECKOUT ...]   # default: this checkout; pass an old worktree to compare

Counts are made on the source text with the patterns below (documented, so a reader can recount by hand).
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NAMES = r"(is|smc|beam|exact|auto)"
# a comparison of something named estimator / name / s with a quoted estimator name, or membership in a tuple of them
COMPARISON = re.compile(
    rf"(estimator|\bname|\bs)\b[\w.\[\]\"']*\s*(==|!=|\bin\b|\bnot in\b)\s*\(?\s*[\"']{NAMES}[\"']"
    rf"|[\"']{NAMES}[\"']\s*(==|!=)"
)
# the rule "K is a positive integer" written out: num_samples / num_particles compared with 0
NUM_SAMPLES_RULE = re.compile(r"(num_samples|num_particles)\s*<=\s*0")
# a call that applies the rule through a checker of K
NUM_SAMPLES_CHECK = re.compile(r"check_(sampling|smc|proposal)_args\(|check_num_samples\(")
SHARED_GLOBALS = ("_ESTIMATES", "_KEPT", "_CONDITIONALS", "_CACHE")


def python_files(root: Path, folder: str) -> list[Path]:
    return sorted((root / "lm_latent_eval" / folder).rglob("*.py")) if folder else [root / "lm_latent_eval"]


def string_comparisons(root: Path) -> int:
    """Lines comparing an estimator's name with a string, outside estimators/registry.py and settings.py."""
    count = 0
    for path in (root / "lm_latent_eval").rglob("*.py"):
        if path.name in ("registry.py",) and path.parent.name == "estimators":
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            code = line.split("#", 1)[0]
            if COMPARISON.search(code) and "cuda_graphs" not in code and "lda_format" not in code:
                count += 1
    return count


def _estimator_table(root: Path) -> tuple[set[str], set[str], set[str]]:
    """What names an estimator in a checkout, read from its source (so an old checkout is read by its own table):
    the names (``name = "..."`` in estimators/), the classes of the estimators and of their estimate records (every
    subclass of ``Estimator`` or ``DocumentEstimate`` there, the bases excepted), and the module constants bound to an
    estimator object (``EXACT = ExactMarginal()``)."""
    names, classes, constants = set(), set(), set()
    bases = {"Estimator", "DocumentEstimate"}
    trees = [
        ast.parse(p.read_text(encoding="utf-8"))
        for p in (root / "lm_latent_eval" / "estimators").glob("*.py")
    ]
    for _ in range(3):  # subclasses of subclasses
        for tree in trees:
            for node in tree.body:
                if isinstance(node, ast.ClassDef) and {getattr(b, "id", "") for b in node.bases} & (
                    bases | classes
                ):
                    classes.add(node.name)
    for tree in trees:
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name in classes:
                for item in node.body:
                    target = (
                        item.targets[0] if isinstance(item, ast.Assign) else getattr(item, "target", None)
                    )
                    value = getattr(item, "value", None)
                    if getattr(target, "id", "") == "name" and isinstance(value, ast.Constant):
                        names.add(value.value)
            elif (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Call)
                and getattr(node.value.func, "id", "") in classes
                and isinstance(node.targets[0], ast.Name)
            ):
                constants.add(node.targets[0].id)
    return names, classes, constants


def _chooses(node: ast.AST, parents: dict) -> bool:
    """Whether ``node`` lies in the estimator a call chooses where its settings are built: the first argument of
    ``EstimatorSettings(...)`` or the value of an ``estimator=`` keyword (``"smc" if smc else "is"`` included)."""
    while id(node) in parents:
        parent = parents[id(node)]
        if isinstance(parent, ast.keyword):
            return parent.arg == "estimator"
        if isinstance(parent, ast.Call):
            return getattr(parent.func, "id", "") == "EstimatorSettings" and parent.args[:1] == [node]
        if not isinstance(parent, (ast.IfExp, ast.Tuple, ast.List, ast.Set)):
            return False
        node = parent
    return False


def _literal_use(node: ast.AST, parents: dict) -> str:
    """What a string literal equal to an estimator's name does there (its containers, tuples and ``a if c else b``,
    looked through)."""
    while isinstance(parents.get(id(node)), (ast.IfExp, ast.Tuple, ast.List, ast.Set)):
        node = parents[id(node)]
    parent = parents.get(id(node))
    if isinstance(parent, ast.Compare):
        return "compares with an estimator's name"
    if isinstance(parent, ast.Subscript) and parent.slice is node:
        return "looks up a table by an estimator's name"
    if isinstance(parent, ast.Dict) and node in parent.keys:
        return "builds a table keyed by an estimator's name"
    if isinstance(parent, ast.arguments):
        return "defaults to an estimator's name"
    if isinstance(parent, ast.Call):
        return f"passes an estimator's name to {ast.unparse(parent.func)}()"
    if isinstance(parent, ast.keyword):
        call = ast.unparse(parents[id(parent)].func)
        return f"passes an estimator's name to {call}({parent.arg}=)"
    return "names an estimator"


def _message_text(node: ast.AST) -> str:
    """A string literal's text, or an f-string's with ``{}`` for each value."""
    if isinstance(node, ast.Constant):
        return node.value
    return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)


def estimator_references(
    root: Path,
    names: set[str] | None = None,
    classes: set[str] | None = None,
    constants: set[str] | None = None,
) -> list[str]:
    """Every place outside ``lm_latent_eval/estimators/`` that names an estimator, as ``path:line: what 'name'``:

    - a string literal equal to an estimator's name, in any form: compared with (``== "smc"``, ``in ("is", "smc")``),
      a table's key (``{"is": ...}``, ``result["beam"]``), an argument or a default (``json_key("is")``,
      ``.get("estimator", "is")``, ``def f(estimator="is")``), a value (``name = "is"``); only whole literals, so the
      English word "is" inside a sentence is not one;
    - a message (a string literal or an f-string) that names one (``estimator=smc``) or lists two or more by hand
      (``"smc, is or beam"``);
    - an ``isinstance`` test against an estimator's or an estimate's class, and any use of a constant bound to an
      estimator object (``corpus.method is EXACT``, ``s.estimator == BEAM.name``).

    Choosing an estimator by name where its settings are built (``EstimatorSettings("beam", ...)``, ``estimator=
    "beam"``) is not counted, nor are docstrings. ``names``, ``classes``, ``constants``: default, read from the
    checkout's estimators/ (``_estimator_table``).
    """
    found_names, found_classes, found_constants = _estimator_table(root)
    names = found_names if names is None else names
    classes = found_classes if classes is None else classes
    constants = found_constants if constants is None else constants
    alternatives = "|".join(sorted(map(re.escape, names), key=len, reverse=True)) or "(?!)"
    named = re.compile(rf"\bestimator\s*=\s*({alternatives})\b")
    names_in_a_row = rf"\b({alternatives})\b(\s*(,|/|\bor\b|\band\b)\s*(estimator=)?\b({alternatives})\b)+"
    listed = re.compile(rf"(estimator=)?{names_in_a_row}")
    out = []
    for path in sorted((root / "lm_latent_eval").rglob("*.py")):
        if path.parent.name == "estimators" and path.parent.parent.name == "lm_latent_eval":
            continue
        where = path.relative_to(root)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            what = None
            text = (
                isinstance(node, ast.JoinedStr)
                or isinstance(node, ast.Constant)
                and isinstance(node.value, str)
            )
            if not text or isinstance(parents.get(id(node)), (ast.Expr, ast.JoinedStr)):
                pass  # not a string, a docstring, or a piece of an f-string (read with it)
            elif isinstance(node, ast.Constant) and node.value in names:
                if not _chooses(node, parents):
                    what = f"{_literal_use(node, parents)} {node.value!r}"
            elif match := listed.search(_message_text(node)) or named.search(_message_text(node)):
                what = f"a message names estimators by hand {match.group(0)!r}"
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", "") == "isinstance"
                and len(node.args) == 2
            ):
                hit = {getattr(n, "id", getattr(n, "attr", "")) for n in ast.walk(node.args[1])} & classes
                if hit:
                    what = f"tests isinstance against an estimator's or estimate's class {min(hit)!r}"
            elif isinstance(node, ast.Name) and node.id in constants:
                what = f"uses the estimator object {node.id!r}"
            elif isinstance(node, ast.alias) and node.name in constants:
                what = f"imports the estimator object {node.name!r}"
            if what:
                out.append(f"{where}:{getattr(node, 'lineno', 0)}: {what}")
    return sorted(set(out))


def process_wide_state(root: Path) -> list[str]:
    """Process-wide mutable state in the package, as ``path:line: what``: a module-level container that the module
    mutates (``X[k] = ...``, ``X.update(...)``, ...), a ``global`` statement, a class attribute rebound through the
    class (``Exchange._current = ...``), an attribute of another module rebound (``sys.excepthook = ...``,
    ``evaluator_utils._compute_task_aggregations = ...``) and the calls that change the process for everyone
    (``torch.set_num_threads``, ``torch.manual_seed`` outside ``torch.random.fork_rng``, ``signal.signal``,
    ``os.environ[...] = ...``).

    A function run in a forked worker process (``estimators.workers._start_worker``) is counted like any other: the
    count is of places, for a reader to judge."""
    mutators = {
        "append",
        "extend",
        "update",
        "clear",
        "pop",
        "popitem",
        "setdefault",
        "add",
        "discard",
        "remove",
    }
    calls = {("torch", "set_num_threads"), ("signal", "signal"), ("torch", "manual_seed")}
    out = []
    for path in sorted((root / "lm_latent_eval").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        where = path.relative_to(root)
        containers, modules, classes = (
            set(),
            set(),
            {n.name for n in tree.body if isinstance(n, ast.ClassDef)},
        )
        for node in tree.body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                value = node.value
                mutable = isinstance(value, (ast.Dict, ast.List, ast.Set)) or (
                    isinstance(value, ast.Call) and getattr(value.func, "id", "") in ("dict", "list", "set")
                )
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                containers |= {t.id for t in targets if isinstance(t, ast.Name) and mutable}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules |= {(a.asname or a.name).split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                modules |= {a.asname or a.name for a in node.names if a.name[:1].islower()}
        # what runs inside ``with torch.random.fork_rng(...)`` leaves the process's random state as it found it
        forked = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.With)
            and any("fork_rng" in ast.unparse(i.context_expr) for i in node.items)
            for inner in ast.walk(node)
        }
        for node in ast.walk(tree):
            what = None
            if id(node) in forked:
                continue
            if isinstance(node, ast.Global):
                what = f"global {', '.join(node.names)}"
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                base = getattr(node.func.value, "id", "")
                if base in containers and node.func.attr in mutators:
                    what = f"mutates the module's {base}"
                elif (base, node.func.attr) in calls:
                    what = f"{base}.{node.func.attr}(...)"
            elif isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
                for t in node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]:
                    if isinstance(t, ast.Subscript) and getattr(t.value, "id", "") in containers:
                        what = f"mutates the module's {t.value.id}"
                    elif isinstance(t, ast.Subscript) and ast.unparse(t.value) == "os.environ":
                        what = "sets os.environ"
                    elif isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name):
                        if t.value.id in classes:
                            what = f"rebinds the class attribute {t.value.id}.{t.attr}"
                        elif t.value.id in modules:
                            what = f"rebinds {t.value.id}.{t.attr}"
            if what:
                out.append(f"{where}:{node.lineno}: {what}")
    return sorted(set(out))


def num_samples_checks(root: Path, pattern: re.Pattern = NUM_SAMPLES_CHECK) -> list[str]:
    """Function definitions whose body matches ``pattern``: the rule on num_samples (or K under another name) written
    out (``NUM_SAMPLES_RULE``), or applied through a checker (``NUM_SAMPLES_CHECK``)."""
    found = []
    for path in (root / "lm_latent_eval").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = ast.get_source_segment(path.read_text(encoding="utf-8"), node) or ""
                inner = "\n".join(body.splitlines()[1:])
                if pattern.search(inner):
                    found.append(f"{path.relative_to(root)}:{node.name}")
    return sorted(found)


def class_lines(root: Path, module: str, name: str) -> int:
    """Lines of a class definition (decorators and docstring included)."""
    path = root / module
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            return node.end_lineno - start + 1
    return 0


def shared_globals(root: Path) -> list[str]:
    """Mutable module-level containers of harness/ that the backend fills and the tasks read."""
    out = []
    for path in (root / "lm_latent_eval" / "harness").glob("*.py"):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            targets = [t for t in getattr(node, "targets", [getattr(node, "target", None)]) if t is not None]
            value = getattr(node, "value", None)
            mutable = isinstance(value, (ast.Dict, ast.List, ast.Set))
            for t in targets:
                if isinstance(t, ast.Name) and t.id in SHARED_GLOBALS and mutable:
                    out.append(f"{path.name}:{t.id}")
    return sorted(out)


def estimator_floors(root: Path) -> dict[str, int]:
    """Each module of estimators/ with its floor: 0 for a module importing no sibling, else 1 + its highest sibling."""
    folder = root / "lm_latent_eval" / "estimators"
    modules = {p.stem: p for p in folder.glob("*.py") if p.stem != "__init__"}
    deps = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        deps[name] = {
            node.module.split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module
            and node.module.split(".")[0] in modules
        }  # fmt: skip
    floors: dict[str, int] = {}

    def floor(name: str, seen=()) -> int:
        if name in seen:
            return -1
        if name not in floors:
            floors[name] = 1 + max((floor(d, (*seen, name)) for d in deps[name]), default=-1)
        return floors[name]

    for name in modules:
        floor(name)
    return dict(sorted(floors.items(), key=lambda kv: (kv[1], kv[0])))


def local_imports(root: Path, folders=("estimators", "harness")) -> int:
    """Import statements inside a function of estimators/ or harness/."""
    count = 0
    for folder in folders:
        for path in (root / "lm_latent_eval" / folder).glob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    count += sum(isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.walk(node))
    return count


def duplicate_pairs(root: Path) -> str:
    """The first line of ``duplicates`` over the package (pairs of places sharing six or more lines)."""
    try:
        out = subprocess.run(
            ["duplicates", "--repo", str(root / "lm_latent_eval"), "--most", "200", "--seconds", "60"],
            capture_output=True, text=True, check=False,
        ).stdout  # fmt: skip
    except FileNotFoundError:
        return "n/a (the duplicates tool is not installed)"
    first = out.splitlines()[0] if out else ""
    return first.split(" pairs", 1)[0] if " pairs of places" in first else "n/a"


STEPWISE_METHODS = {"smc_init", "_smc_init", "smc_step", "smc_reorder", "smc_latents", "smc_init_documents",
                    "smc_step_documents"}  # fmt: skip


def package_lines(root: Path) -> tuple[int, int]:
    """Lines of the package's Python files, and those inside docstrings (module, class and function)."""
    total = docs = 0
    for path in (root / "lm_latent_eval").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        total += len(text.splitlines())
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and ast.get_docstring(
                node, clean=False
            ):
                first = node.body[0]
                docs += first.end_lineno - first.lineno + 1
    return total, docs


def hand_written_stepwise(root: Path) -> list[str]:
    """Model classes outside the stepwise base (``models/stepwise_module.py``) that define stepwise methods
    themselves (one way to write the stepwise part: none but the prefix views, which adapt another model)."""
    out = []
    for path in sorted((root / "lm_latent_eval" / "models").rglob("*.py")):
        if path.name == "stepwise_module.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                own = {f.name for f in node.body if isinstance(f, ast.FunctionDef)} & STEPWISE_METHODS
                if own:
                    out.append(f"{path.relative_to(root / 'lm_latent_eval').as_posix()}:{node.name}")
    return out


def capability_functions(root: Path) -> int:
    """Public module-level functions of the capabilities module (``protocol/capabilities.py``)."""
    path = root / "lm_latent_eval" / "protocol" / "capabilities.py"
    if not path.exists():
        return 0
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return sum(isinstance(n, ast.FunctionDef) and not n.name.startswith("_") for n in tree.body)


def report(root: Path) -> str:
    rules, checks = num_samples_checks(root, NUM_SAMPLES_RULE), num_samples_checks(root)
    references, state = estimator_references(root), process_wide_state(root)
    floors = estimator_floors(root)
    total, docs = package_lines(root)
    stepwise = hand_written_stepwise(root)
    lines = [
        f"## {root}",
        "",
        "| figure | value |",
        "|---|---|",
        f"| package lines (lm_latent_eval/*.py) | {total:,} |",
        f"| of them in docstrings | {docs:,} ({docs / total:.0%}) |",
        f"| model classes writing stepwise methods by hand | {len(stepwise)} ({', '.join(stepwise)}) |",
        f"| public functions of protocol/capabilities.py | {capability_functions(root)} |",
        f"| estimator-name string comparisons outside the estimator table | {string_comparisons(root)} |",
        f"| places outside estimators/ that name an estimator (widened twice: any form) | {len(references)} |",
        f"| places that write out the rule on num_samples | {len(rules)} ({', '.join(rules)}) |",
        f"| functions that apply a checker of num_samples | {len(checks)} ({', '.join(checks)}) |",
        f"| LatentLMEval lines | {class_lines(root, 'lm_latent_eval/harness/backends.py', 'LatentLMEval')} |",
        f"| module globals shared between backend and tasks | {len(shared_globals(root))} |",
        f"| places with process-wide mutable state (widened) | {len(state)} |",
        f"| floors of estimators/ in the import graph | {max(floors.values()) + 1} |",
        f"| function-local imports in estimators/ and harness/ | {local_imports(root)} |",
        f"| pairs of places sharing six or more lines (lm_latent_eval/) | {duplicate_pairs(root)} |",
        "",
        "floors: "
        + "; ".join(
            f"{f}: {', '.join(n for n, v in floors.items() if v == f)}" for f in sorted(set(floors.values()))
        ),
        "",
        "estimator named outside estimators/: " + ("; ".join(references) or "none"),
        "",
        "process-wide mutable state: " + "; ".join(state),
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkouts", nargs="*", type=Path, default=[REPO])
    for root in parser.parse_args().checkouts:
        print(report(root))


if __name__ == "__main__":
    main()
