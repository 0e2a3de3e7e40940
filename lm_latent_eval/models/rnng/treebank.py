"""Penn-Treebank-style bracketed trees -> unlabeled binary trees over words; plain-text sentences for evaluation.

A tree file holds one or more trees ``(S (NP (DT the) (NN dog)) (VP (VBD barked)) (. .))``, one per line or spread
over lines (a tree ends when its brackets balance), optionally wrapped in an unlabeled root ``( (S ...) )`` as in
the PTB .mrg files. Preprocessing, as in URNNG's: the leaves are (tag word) pairs; empty elements (tag ``-NONE-``,
e.g. traces ``*T*-1``) and constituents left empty by their removal are deleted; with ``remove_punctuation`` the
punctuation tags (``PUNCTUATION_TAGS``) are deleted too; labels are dropped; unary chains collapse into their single
child; constituents with n > 2 children are binarized right-branching (c_1 (c_2 (… c_n))) by default, as URNNG's
REDUCE of an n-ary constituent does, or left-branching. Optional lower-casing and number replacement (digits -> N).
Malformed input is an error naming the file and tree.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ...documents import corpus_loader, read_text
from ...errors import InputError, MissingFileError
from ...paths import DATA_DIR
from .latents import actions_from_tree, bracketed

PUNCTUATION_TAGS = frozenset({"''", "``", ".", ":", ",", "-LRB-", "-RRB-", "#", "$"})
EMPTY_TAG = "-NONE-"
_TOKEN = re.compile(r"\(|\)|[^\s()]+")


@dataclass(frozen=True)
class Sentence:
    """Words and their unlabeled binary tree (nested 2-tuples of words) with its SHIFT/REDUCE actions."""

    words: tuple[str, ...]
    tree: object
    name: str = ""

    @property
    def actions(self) -> list[int]:
        return actions_from_tree(self.tree)

    def text(self) -> str:
        return " ".join(self.words)

    def bracketed(self) -> str:
        return bracketed(self.tree)


def parse_bracketed(text: str, where: str = "tree") -> list:
    """One s-expression -> nested lists [label, child, ...] with leaves [tag, word]; errors name ``where``."""
    tokens = _TOKEN.findall(text)
    stack: list[list] = []
    result = None
    for tok in tokens:
        if result is not None:
            raise InputError(f"{where}: text after the end of the tree: {tok!r}")
        if tok == "(":
            stack.append([])
        elif tok == ")":
            if not stack:
                raise InputError(f"{where}: unbalanced ')'")
            node = stack.pop()
            if stack:
                stack[-1].append(node)
            else:
                result = node
        else:
            if not stack:
                raise InputError(f"{where}: word {tok!r} outside brackets")
            stack[-1].append(tok)
    if stack or result is None:
        raise InputError(f"{where}: unbalanced '(' or empty tree")
    return result


def _clean(node, remove_punctuation: bool, where: str):
    """Drop labels, empty elements (and punctuation); return a word, a list of cleaned children, or None if empty."""
    if not isinstance(node, list) or not node:
        raise InputError(f"{where}: empty brackets ()")
    # (tag word)
    if len(node) == 2 and all(isinstance(p, str) for p in node):
        tag, word = node
        if tag == EMPTY_TAG or (remove_punctuation and tag in PUNCTUATION_TAGS):
            return None
        return word
    if len(node) == 1 and isinstance(node[0], str):
        raise InputError(f"{where}: leaf ({node[0]}) without a tag or word")
    # unlabeled root ( (S ...) )
    children = node[1:] if isinstance(node[0], str) else node
    if any(isinstance(c, str) for c in children):
        raise InputError(f"{where}: a constituent mixes words and brackets: {node!r:.80}")
    kept = [c for c in (_clean(c, remove_punctuation, where) for c in children) if c is not None]
    if not kept:
        return None
    # a unary chain collapses into its child
    return kept[0] if len(kept) == 1 else kept


def _binarize(node, right: bool):
    if isinstance(node, str):
        return node
    kids = [_binarize(c, right) for c in node]
    if right:
        tree = kids[-1]
        for k in reversed(kids[:-1]):
            tree = (k, tree)
        return tree
    tree = kids[0]
    for k in kids[1:]:
        tree = (tree, k)
    return tree


def _normalize(word: str, lowercase: bool, replace_numbers: bool) -> str:
    if lowercase:
        word = word.lower()
    if replace_numbers:
        word = re.sub(r"[0-9]+([,.]?[0-9]*)*", "N", word)
    return word


def _map_leaves(tree, fn):
    return fn(tree) if isinstance(tree, str) else (_map_leaves(tree[0], fn), _map_leaves(tree[1], fn))


def _leaves(tree) -> list[str]:
    return [tree] if isinstance(tree, str) else _leaves(tree[0]) + _leaves(tree[1])


def sentence_from_bracketed(
    text: str,
    where: str = "tree",
    remove_punctuation: bool = False,
    lowercase: bool = False,
    replace_numbers: bool = False,
    binarize: str = "right",
) -> Sentence | None:
    """One bracketed tree -> Sentence (None, with no error, when nothing is left after removals)."""
    if binarize not in ("right", "left"):
        raise InputError(f"binarize must be 'right' or 'left', got {binarize!r}")
    cleaned = _clean(parse_bracketed(text, where), remove_punctuation, where)
    if cleaned is None:
        return None
    tree = _map_leaves(
        _binarize(cleaned, binarize == "right"), lambda w: _normalize(w, lowercase, replace_numbers)
    )
    return Sentence(tuple(_leaves(tree)), tree, where)


def split_trees(text: str, where: str = "file") -> Iterator[tuple[int, str]]:
    """(line number, text) of each top-level bracketed tree in ``text`` (trees may span lines)."""
    depth, start, buf = 0, 0, []
    for n, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped and depth == 0:
            continue
        if depth == 0:
            if not stripped.startswith("("):
                raise InputError(
                    f"{where}:{n}: expected a bracketed tree starting with '(', got {stripped[:40]!r}"
                )
            start, buf = n, []
        buf.append(line)
        depth += line.count("(") - line.count(")")
        if depth < 0:
            raise InputError(f"{where}:{n}: unbalanced ')'")
        if depth == 0:
            yield start, "\n".join(buf)
    if depth:
        raise InputError(f"{where}:{start}: tree not closed at the end of the file")


def read_treebank(
    path: str | Path,
    remove_punctuation: bool = False,
    lowercase: bool = False,
    replace_numbers: bool = False,
    binarize: str = "right",
    warn=None,
) -> list[Sentence]:
    """Every tree of a PTB-style file as a Sentence; trees left without words are skipped with a warning naming them."""
    path = Path(path)
    out = []
    for line, text in split_trees(read_text(path), str(path)):
        where = f"{path}:{line}"
        sent = sentence_from_bracketed(text, where, remove_punctuation, lowercase, replace_numbers, binarize)
        if sent is None:
            (warn or warnings.warn)(
                f"{where}: tree has no words after removing empty elements/punctuation; skipped"
            )
            continue
        out.append(sent)
    return out


def write_treebank(sentences: list, path: str | Path) -> None:
    """One unlabeled bracketed tree per line, leaves as (X word) so that ``read_treebank`` reads it back."""

    def fmt(tree) -> str:
        return f"(X {tree})" if isinstance(tree, str) else f"(X {fmt(tree[0])} {fmt(tree[1])})"

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(fmt(s.tree) + "\n" for s in sentences), encoding="utf-8")


def read_sentences(path: str | Path, **options) -> list[str]:
    """Sentences (words joined by spaces) of a tree file (first non-blank character '(') or of a plain-text file
    with one sentence per line (blank lines skipped)."""
    path = Path(path)
    text = read_text(path)
    if text.lstrip().startswith("("):
        return [s.text() for s in read_treebank(path, **options)]
    return [line.strip() for line in text.splitlines() if line.strip()]


# --- datasets for the lm-eval tasks ------------------------------------------------------------------------------
def sentence_dataset(path: str | Path, split: str = "test", **options):
    """datasets.DatasetDict {split: rows {text}} of a tree or plain-text file."""
    # kept local (~0.4 s): trainers import this module; `train --help` imports them all (models/training.py)
    import datasets

    return datasets.DatasetDict(
        {split: datasets.Dataset.from_list([{"text": t} for t in read_sentences(path, **options)])}
    )


@corpus_loader
def load_ptb(
    data_file: str | None = None,
    remove_punctuation: bool = False,
    lowercase: bool = False,
    replace_numbers: bool = False,
    **_metadata,
):
    """lm-eval ``custom_dataset`` of task ``ptb_rnng``: the user's file, ``--metadata '{"data_file": ...}'``."""
    if not data_file:
        raise InputError(
            'ptb_rnng: say which file to evaluate: --metadata \'{"data_file": "/path/test.txt"}\' '
            "(PTB-style trees or one sentence per line)"
        )
    if not Path(data_file).is_file():
        raise MissingFileError(f"ptb_rnng: data_file {data_file}: no such file")
    options = {
        "remove_punctuation": remove_punctuation,
        "lowercase": lowercase,
        "replace_numbers": replace_numbers,
    }
    if not read_text(data_file).lstrip().startswith("("):
        options = {}
    return sentence_dataset(data_file, **options)


@corpus_loader
def load_ptb_tiny(**_metadata):
    """lm-eval ``custom_dataset`` of task ``ptb_rnng_tiny``: the bundled synthetic test treebank of the bundled RNNG."""
    return sentence_dataset(DATA_DIR / "ptb_tiny" / "test.txt")
