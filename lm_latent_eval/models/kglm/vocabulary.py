"""AllenNLP vocabulary folders (``vocabulary/<namespace>.txt`` + ``non_padded_namespaces.txt``), read without AllenNLP.

File format (AllenNLP 0.9, used by the original KGLM archives): one token per line in index order;
``@@NEWLINE@@`` stands for a newline inside a token. A namespace is *padded* unless its name matches a
pattern of ``non_padded_namespaces.txt`` (``*suffix`` matches by suffix, other patterns exactly); a padded
namespace has ``@@PADDING@@`` at index 0 (not written in the file), so line i gets index i + 1, and must
contain ``@@UNKNOWN@@``, to which unknown strings map.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

PADDING_TOKEN = "@@PADDING@@"
OOV_TOKEN = "@@UNKNOWN@@"
NON_PADDED_FILE = "non_padded_namespaces.txt"


def namespace_matches(pattern: str, namespace: str) -> bool:
    """AllenNLP rule: ``*tags`` matches any namespace ending in ``tags``; other patterns match exactly."""
    return namespace.endswith(pattern[1:]) if pattern.startswith("*") else namespace == pattern


@dataclass
class Vocabulary:
    """namespace -> index-to-token list (``tokens[namespace][i]`` is the string of id i)."""

    tokens: dict[str, list[str]]
    non_padded_namespaces: tuple[str, ...] = ()

    def __post_init__(self):
        self._index = {ns: {tok: i for i, tok in enumerate(toks)} for ns, toks in self.tokens.items()}
        for ns, toks in self.tokens.items():
            if len(self._index[ns]) != len(toks):
                raise ValueError(f"vocabulary namespace {ns!r} lists a token twice")

    @classmethod
    def from_files(cls, directory: str | Path) -> Vocabulary:
        """Read every ``<namespace>.txt`` of an AllenNLP vocabulary folder."""
        directory = Path(directory)
        if not directory.is_dir():
            raise FileNotFoundError(f"vocabulary folder not found: {directory}")
        pad_file = directory / NON_PADDED_FILE
        if not pad_file.is_file():
            raise FileNotFoundError(
                f"{directory} is not an AllenNLP vocabulary folder: {NON_PADDED_FILE} is missing"
            )
        files = {
            p.stem: p.read_text(encoding="utf-8") for p in sorted(directory.glob("*.txt")) if p != pad_file
        }
        return cls.from_texts(pad_file.read_text(encoding="utf-8"), files, where=str(directory))

    @classmethod
    def from_texts(cls, non_padded_text: str, files: dict[str, str], where: str = "vocabulary") -> Vocabulary:
        """Build from the text of ``non_padded_namespaces.txt`` and ``{namespace: text of <namespace>.txt}``."""
        patterns = tuple(line.strip() for line in non_padded_text.splitlines() if line.strip())
        tokens: dict[str, list[str]] = {}
        for namespace, text in sorted(files.items()):
            lines = text.split("\n")
            if lines and lines[-1] == "":
                lines = lines[:-1]
            entries = [line.replace("@@NEWLINE@@", "\n") for line in lines]
            # padded namespace
            if not any(namespace_matches(p, namespace) for p in patterns):
                if OOV_TOKEN not in entries:
                    raise ValueError(f"{where}: padded namespace {namespace!r} has no {OOV_TOKEN} line")
                entries = [PADDING_TOKEN] + entries
            tokens[namespace] = entries
        return cls(tokens, patterns)

    def is_padded(self, namespace: str) -> bool:
        """True when id 0 of the namespace is padding (and unknown strings map to ``@@UNKNOWN@@``)."""
        toks = self.tokens[namespace]
        return bool(toks) and toks[0] == PADDING_TOKEN

    def size(self, namespace: str) -> int:
        """Number of ids in the namespace (padding included)."""
        return len(self._namespace(namespace))

    def index(self, token: str, namespace: str) -> int:
        """Id of ``token``; ``@@UNKNOWN@@``'s id for an unknown token of a padded namespace, KeyError otherwise."""
        ids = self._index[self._namespace_name(namespace)]
        if token in ids:
            return ids[token]
        if OOV_TOKEN in ids:
            return ids[OOV_TOKEN]
        raise KeyError(f"{token!r} is not in vocabulary namespace {namespace!r} (which has no {OOV_TOKEN})")

    def token(self, index: int, namespace: str) -> str:
        """The string of id ``index``."""
        return self._namespace(namespace)[index]

    def __contains__(self, namespace: str) -> bool:
        return namespace in self.tokens

    def _namespace_name(self, namespace: str) -> str:
        if namespace not in self.tokens:
            raise KeyError(f"vocabulary has no namespace {namespace!r} (has {sorted(self.tokens)})")
        return namespace

    def _namespace(self, namespace: str) -> list[str]:
        return self.tokens[self._namespace_name(namespace)]
