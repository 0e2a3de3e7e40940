"""Documents from a user's file: ``.jsonl`` (one JSON object with a ``text`` field per line) or text (one document
per line), with one clean error naming the file and the line for anything unusable, and a warning naming them for an
empty document (it scores log p = 0 over 0 tokens, which no perplexity counts)."""

from __future__ import annotations

import difflib
import functools
import hashlib
import inspect
import json
import warnings
from pathlib import Path

from .errors import InputError, MissingFileError

TEXT_FIELD = "text"
# the --metadata keys that name a corpus in any of our tasks' loaders
CORPUS_KEYS = ("data_file", "data_files", "data_dir")


def document_key(text: str) -> str:
    """The short name of a document in a samples file: the first 16 hex digits of sha256(UTF-8 text).

    Examples
    --------
    >>> document_key("the cat sat")
    '77255f02a3435d1f'
    """
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _jsonl_text(line: str, where: str, tokens_field: bool) -> str:
    """The document of one JSONL line: its ``text`` (or, when ``tokens_field``, Linked WikiText-2 ``tokens``)."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        raise InputError(f"{where}: not valid JSON ({err.msg} at column {err.colno})") from None
    if not isinstance(record, dict):
        raise InputError(
            f"{where}: expected a JSON object with a {TEXT_FIELD!r} field, got {type(record).__name__}"
        )
    if TEXT_FIELD not in record and tokens_field and isinstance(record.get("tokens"), list):
        # a Linked WikiText-2 article
        return " ".join(str(t) for t in record["tokens"] if t != "@@START@@")
    if TEXT_FIELD not in record:
        also = " (nor Linked WikiText-2 'tokens')" if tokens_field else ""
        raise InputError(
            f"{where}: JSON record has no {TEXT_FIELD!r} field{also}; its fields: {sorted(record)}"
        )
    if not isinstance(record[TEXT_FIELD], str):
        raise InputError(f"{where}: {TEXT_FIELD!r} must be a string, got {type(record[TEXT_FIELD]).__name__}")
    return record[TEXT_FIELD]


def text_lines(path: str | Path):
    """(line number from 1, line) of the UTF-8 text file ``path``; a ``MissingFileError`` when it is not a file (a
    folder is said to be one), an ``InputError`` naming the file and line that is not UTF-8."""
    path = Path(path)
    if path.is_dir():
        raise MissingFileError(f"{path}: a folder, not a file; name a file in it")
    if not path.is_file():
        raise MissingFileError(f"{path}: no such file")
    with open(path, "rb") as fh:
        for n, raw in enumerate(fh, 1):
            try:
                yield n, raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise InputError(
                    f"{path}:{n}: not UTF-8 text (byte {raw[err.start]:#04x} at column {err.start + 1}); save the "
                    "file as UTF-8"
                ) from None


def read_text(path: str | Path) -> str:
    """The whole of the UTF-8 text file ``path``, read through ``text_lines`` (a missing file, a folder or a line that
    is not UTF-8 is one error naming the file and line), for readers that parse a file as a whole (trees spanning
    lines)."""
    return "".join(line for _, line in text_lines(path))


def read_texts(path: str | Path, tokens_field: bool = False) -> list[str]:
    """The documents of ``path``: ``.jsonl`` → the ``text`` of every non-blank line (``tokens_field``: a Linked
    WikiText-2 ``tokens`` list also counts), any other file → every non-blank line. InputError naming the file and
    line for a line without a usable text; a warning naming them for each empty document."""
    path = Path(path)
    docs = []
    for n, line in text_lines(path):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        text = _jsonl_text(line, where, tokens_field) if path.suffix == ".jsonl" else line.rstrip("\n")
        if not text.strip():
            warnings.warn(f"{where}: empty document (it scores log p = 0 over 0 tokens)", stacklevel=2)
        docs.append(text)
    if not docs:
        raise InputError(f"{path}: no documents")
    return docs


def corpus_loader(load):
    """An lm-eval ``custom_dataset`` loader that speaks up about a ``--metadata`` key meant for a corpus it does not
    read (lm-eval hands the loader every metadata key and model_arg, and ``**_metadata`` used to swallow ``data_fle``,
    or a ``data_file`` given to a task over a bundled corpus, while the bundled corpus was scored).

    A key that is not a parameter of ``load`` but a near-miss of one of them or of ``CORPUS_KEYS`` is refused in one
    line (a misspelling); one of ``CORPUS_KEYS`` that ``load`` does not read gets a warning (one ``--metadata`` serves
    every task of a run); every other key (a model_arg, lm-eval's ``version``) passes as before.

    Examples
    --------
    >>> @corpus_loader
    ... def load(data_file=None, **_metadata):
    ...     return data_file
    >>> load(data_file="a.jsonl", estimator="is")
    'a.jsonl'
    >>> load(data_fle="a.jsonl")
    Traceback (most recent call last):
    lm_latent_eval.errors.InputError: --metadata key 'data_fle' is not one this task reads (it reads data_file): did you mean data_file?
    """
    own = [name for name, p in inspect.signature(load).parameters.items() if p.kind is not p.VAR_KEYWORD]
    reads = ", ".join(own) or "no --metadata key: it scores its bundled corpus"

    @functools.wraps(load)
    def checked(*args, **metadata):
        for key in set(metadata) - set(own):
            if key in CORPUS_KEYS:
                warnings.warn(
                    f"--metadata key {key!r} ignored by {load.__name__} (it reads {reads})", stacklevel=2
                )
            elif close := difflib.get_close_matches(key, [*own, *CORPUS_KEYS], n=1, cutoff=0.75):
                raise InputError(
                    f"--metadata key {key!r} is not one this task reads (it reads {reads}): did you mean {close[0]}?"
                )
        return load(*args, **metadata)

    return checked
