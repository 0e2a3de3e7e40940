"""Architecture figures of a checkout (issue 30's before/after): estimator-name string comparisons outside the
estimator table, places that check ``num_samples``, the lines of ``LatentLMEval``, mutable module globals shared
between the backend and the tasks, the floors of ``estimators/`` in its import graph, and function-local imports.

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


def report(root: Path) -> str:
    rules, checks = num_samples_checks(root, NUM_SAMPLES_RULE), num_samples_checks(root)
    floors = estimator_floors(root)
    lines = [
        f"## {root}",
        "",
        "| figure | value |",
        "|---|---|",
        f"| estimator-name string comparisons outside the estimator table | {string_comparisons(root)} |",
        f"| places that write out the rule on num_samples | {len(rules)} ({', '.join(rules)}) |",
        f"| functions that apply a checker of num_samples | {len(checks)} ({', '.join(checks)}) |",
        f"| LatentLMEval lines | {class_lines(root, 'lm_latent_eval/harness/backends.py', 'LatentLMEval')} |",
        f"| module globals shared between backend and tasks | {len(shared_globals(root))} |",
        f"| floors of estimators/ in the import graph | {max(floors.values()) + 1} |",
        f"| function-local imports in estimators/ and harness/ | {local_imports(root)} |",
        f"| pairs of places sharing six or more lines (lm_latent_eval/) | {duplicate_pairs(root)} |",
        "",
        "floors: "
        + "; ".join(
            f"{f}: {', '.join(n for n, v in floors.items() if v == f)}" for f in sorted(set(floors.values()))
        ),
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
