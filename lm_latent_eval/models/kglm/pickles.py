"""Safe reading of the original KGLM pickles (``alias.pkl``, ``knowledge_graph.pkl``).

The original code base stores its alias database (entity id -> alias strings) and knowledge graph
(entity id -> [(relation, tail entity id)]) as Python pickles. A pickle can run arbitrary code, so we read
them with an unpickler that resolves no global except the container constructors these files need
(``list``, ``dict``, ``tuple``, ``collections.defaultdict`` / ``OrderedDict``, each building a plain
container), and then check that the result holds only dicts, lists, tuples, strings and numbers.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path

from .graph import KnowledgeGraph
from .linked_wikitext import tokenize_alias

_ATOMS = (str, int, float, bool, type(None))


def _plain_dict(factory=None, *items):
    """Stand-in for ``collections.defaultdict(factory, ...)``: a plain dict (its factory must be a container type)."""
    if factory is not None and factory not in (list, dict, tuple, set, int, str):
        raise pickle.UnpicklingError(f"defaultdict with factory {factory!r} is not allowed")
    return dict(*items)


# (module, name) -> the object the restricted unpickler hands back for that global
_ALLOWED_GLOBALS = {
    ("builtins", "list"): list,
    ("builtins", "dict"): dict,
    ("builtins", "tuple"): tuple,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("collections", "defaultdict"): _plain_dict,
    ("collections", "OrderedDict"): dict,
}
# protocol 0-2 pickles (Python 2 or ``protocol=2``) name the builtins module ``__builtin__``
_ALLOWED_GLOBALS.update(
    {
        ("__builtin__", name): obj
        for (module, name), obj in list(_ALLOWED_GLOBALS.items())
        if module == "builtins"
    }
)


class ContainerUnpickler(pickle.Unpickler):
    """Unpickler that builds only containers, strings and numbers: any other global is refused."""

    def __init__(self, file, source: str = "<pickle>"):
        super().__init__(file)
        self.source = source

    def find_class(self, module: str, name: str):
        try:
            return _ALLOWED_GLOBALS[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(
                f"{self.source}: refusing to load global {module}.{name}; only dicts, lists, tuples, strings and "
                "numbers may appear in an alias or knowledge-graph pickle"
            ) from None

    def persistent_load(self, pid):
        raise pickle.UnpicklingError(f"{self.source}: persistent ids are not allowed (got {pid!r})")


def _check_plain(obj, source: str, depth: int = 0) -> None:
    """Raise unless obj is built from dict / list / tuple / set / str / int / float / bool / None only."""
    if depth > 50:
        raise pickle.UnpicklingError(f"{source}: nesting deeper than 50 levels")
    if isinstance(obj, _ATOMS):
        return
    if type(obj) in (list, tuple, set, frozenset):
        for item in obj:
            _check_plain(item, source, depth + 1)
        return
    if type(obj) is dict:
        for key, value in obj.items():
            _check_plain(key, source, depth + 1)
            _check_plain(value, source, depth + 1)
        return
    raise pickle.UnpicklingError(f"{source}: unexpected object of type {type(obj).__name__}")


def load_plain_pickle(path: str | Path):
    """Unpickle a file that may contain only dicts, lists, tuples, sets, strings and numbers."""
    path = Path(path)
    data = path.read_bytes()
    obj = ContainerUnpickler(io.BytesIO(data), source=str(path)).load()
    _check_plain(obj, str(path))
    return obj


def load_alias_pickle(path: str | Path) -> dict[str, list[str]]:
    """The original ``alias.pkl``: entity id -> list of alias strings (untokenized)."""
    obj = load_plain_pickle(path)
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: expected a dict entity id -> aliases, got {type(obj).__name__}")
    aliases: dict[str, list[str]] = {}
    for entity, names in obj.items():
        if not isinstance(entity, str) or not isinstance(names, (list, tuple)):
            raise ValueError(f"{path}: entry {entity!r} must map a string id to a list of alias strings")
        for name in names:
            if not isinstance(name, str):
                raise ValueError(f"{path}: alias {name!r} of entity {entity!r} is not a string")
        aliases[entity] = list(names)
    return aliases


def load_knowledge_graph_pickle(path: str | Path) -> dict[str, list[tuple[str, str]]]:
    """The original ``knowledge_graph.pkl``: entity id -> list of (relation id, tail entity id) edges."""
    obj = load_plain_pickle(path)
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: expected a dict entity id -> edges, got {type(obj).__name__}")
    graph: dict[str, list[tuple[str, str]]] = {}
    for head, edges in obj.items():
        if not isinstance(head, str) or not isinstance(edges, (list, tuple)):
            raise ValueError(
                f"{path}: entry {head!r} must map a string id to a list of (relation, tail) pairs"
            )
        checked = []
        for edge in edges:
            if not (
                isinstance(edge, (list, tuple)) and len(edge) == 2 and all(isinstance(e, str) for e in edge)
            ):
                raise ValueError(
                    f"{path}: edge {edge!r} of entity {head!r} is not a (relation, tail) pair of strings"
                )
            checked.append((edge[0], edge[1]))
        graph[head] = checked
    return graph


# the original alias database keeps the first 4 aliases of an entity ...
MAX_ALIASES = 4
# ... and the first 8 tokens of each
MAX_ALIAS_TOKENS = 8


def knowledge_graph_from_pickles(
    knowledge_graph_path: str | Path,
    alias_path: str | Path | None = None,
    max_aliases: int | None = MAX_ALIASES,
    max_alias_tokens: int | None = MAX_ALIAS_TOKENS,
):
    """KnowledgeGraph from the original pickles; alias strings are tokenized and cut as the original does (4 x 8)."""
    edges = load_knowledge_graph_pickle(knowledge_graph_path)
    aliases = {}
    if alias_path is not None:
        for entity, names in load_alias_pickle(alias_path).items():
            forms = [tokenize_alias(name)[:max_alias_tokens] for name in names[:max_aliases]]
            aliases[entity] = [f for f in forms if f]
    return KnowledgeGraph.from_dicts(edges=edges, aliases=aliases)


__all__ = [
    "ContainerUnpickler",
    "knowledge_graph_from_pickles",
    "load_alias_pickle",
    "load_knowledge_graph_pickle",
    "load_plain_pickle",
]
