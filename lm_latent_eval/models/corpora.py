"""The documents of any corpus file a model reads, and of the bundled corpora (the model table's ``corpus``)."""

from __future__ import annotations

from pathlib import Path

from ..documents import read_text, read_texts
from ..errors import InputError, MissingFileError
from . import bundled_corpus
from .rnng.treebank import read_sentences


def read_documents(path: str | Path) -> list[str]:
    """The documents of a file, errors naming the file and line.

    Parameters
    ----------
    path : str or Path
        A ``.jsonl`` file (field ``text``, or Linked WikiText-2 ``tokens``), a ``.txt`` file (one document per line),
        or a file of PTB-style bracketed trees (one sentence per tree).

    Returns
    -------
    list of str

    Examples
    --------
    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "docs.txt"
    >>> _ = path.write_text("the cat sat\\na dog ran\\n")
    >>> read_documents(path)
    ['the cat sat', 'a dog ran']
    """
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"{path}: no such file")
    # PTB-style trees
    if path.suffix != ".jsonl" and read_text(path).lstrip().startswith("("):
        docs = read_sentences(path)
        if not docs:
            raise InputError(f"{path}: no documents")
        return docs
    return read_texts(path, tokens_field=True)


def bundled_documents(model: str) -> list[str]:
    """The documents of a model's bundled held-out corpus (``bundled_corpus``).

    Examples
    --------
    >>> len(bundled_documents("hmm"))
    30
    """
    return read_documents(bundled_corpus(model))
