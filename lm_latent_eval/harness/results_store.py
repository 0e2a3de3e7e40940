"""Per-document estimates on disk, so an interrupted evaluation resumes without redoing finished documents.

Layout: ``<results_dir>/<run key>/identity.json`` plus one ``<sha256(text)>.npz`` per document, where the run key is
sha256 of the run identity (model class, checkpoint sha256, every estimator setting, device type, dtype, package
version: everything that can change a number). A changed model or setting therefore lands in a different folder and
never sees stale results. Each file holds the estimate's whole record (``DocumentEstimate.to_json``): the K log
weights (and, for a model with an unknown-word penalty, each sample's penalty) as float64 arrays, every other field
(text, token count, log p̂, diagnostics, the distinct draws the certified bound reads, ...) as JSON, so a resumed run
states what the first one stated; it is written to a temporary file and
renamed into place, so a killed process never leaves a half-written result and concurrent ranks (one file per
document) never corrupt each other.
"""

from __future__ import annotations

import collections
import hashlib
import json
import logging
import os
import tempfile
import warnings
from pathlib import Path

import numpy as np

from ..errors import InputError
from ..estimators import DocumentEstimate
from ..estimators.adaptive import stage_label
from ..estimators.registry import estimate_from_json

logger = logging.getLogger(__name__)

# bump when the file layout changes (2: per-sample unknown-word penalty; 3: the estimator; 4: log_likelihood_stderr;
# 5: the whole record, distinct draws included: without them a resumed run's certified bound moved)
FORMAT_VERSION = 5
# float64 [K], with has_<name> telling None from an empty array; every other field of the record is in record_json
ARRAYS = ("log_weights", "unk_penalty")


def run_key(identity: dict) -> str:
    """sha256 of the identity as canonical JSON (sorted keys): the folder name of one run configuration."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def text_key(text: str) -> str:
    """sha256 of the document text (UTF-8): the file name of one document."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _file_mode() -> int:
    """The mode ``open`` gives a new file under the process's umask (0o644 under the usual 022); mkstemp's is 0o600."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def _atomic_write(path: Path, write) -> None:
    """Call ``write(file_object)`` on a temporary file beside ``path``, fsync it, then rename it onto ``path`` (with
    the mode an ordinary new file would have, so that a shared results folder stays readable by the group)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, _file_mode())
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class ResultsStore:
    """Document estimates of one run configuration: ``get(text)`` → DocumentEstimate or None, ``put(estimate)``;
    ``tally`` counts, by (stage, loaded?), the estimates it gave (loaded) and took (estimated)."""

    def __init__(self, root: str | Path, identity: dict):
        self.tally: collections.Counter = collections.Counter()
        self.identity = {**identity, "results_format": FORMAT_VERSION}
        self.folder = Path(root).expanduser() / run_key(self.identity)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as err:  # a file where the folder should be, no permission, a read-only disk
            raise InputError(
                f"results_dir={root}: cannot keep results there ({err.strerror or err}); name a folder you can write "
                "(it is created if missing)"
            ) from None
        identity_file = self.folder / "identity.json"
        # every rank writes the same bytes; the rename makes that safe
        if not identity_file.is_file():
            text = json.dumps(self.identity, sort_keys=True, indent=1).encode()
            _atomic_write(identity_file, lambda fh: fh.write(text))

    def path(self, text: str, stage: int = 0) -> Path:
        """The file that holds (or will hold) the estimate of ``text`` (at stage ``stage`` of a precision target)."""
        return self.folder / (f"{text_key(text)}.npz" if stage == 0 else f"{text_key(text)}.stage{stage}.npz")

    def get(self, text: str, stage: int = 0) -> DocumentEstimate | None:
        """The stored estimate of ``text`` (at ``stage``); None when absent or unreadable (unreadable: warning,
        recomputed)."""
        path = self.path(text, stage)
        if not path.is_file():
            return None
        try:
            with np.load(path, allow_pickle=False) as f:
                record = json.loads(str(f["record_json"]))
                for name in ARRAYS:
                    record[name] = f[name].copy() if bool(f[f"has_{name}"]) else None
            if record["document"] != text:
                raise ValueError("the stored document text differs (hash collision or a foreign file)")
            estimate = estimate_from_json(record)
            self.tally[stage, True] += 1
            return estimate
        except Exception as err:  # noqa: BLE001  (any damage: say so and compute the document again)
            warnings.warn(
                f"ignoring unreadable stored result {path} for document {text[:60]!r}: {err}", stacklevel=2
            )
            return None

    def put(self, estimate: DocumentEstimate, stage: int = 0) -> None:
        """Persist one estimate atomically: the arrays (log weights [K] under IS / SMC, unknown-word penalties [K]) as
        float64 arrays, the rest of its record as JSON."""
        record = estimate.to_json()
        arrays = {"record_json": np.array(json.dumps({k: v for k, v in record.items() if k not in ARRAYS}))}
        for name in ARRAYS:
            arrays[f"has_{name}"] = np.array(record[name] is not None)
            arrays[name] = np.asarray(record[name] if record[name] is not None else [], dtype=np.float64)
        _atomic_write(self.path(estimate.document, stage), lambda fh: np.savez(fh, **arrays))
        self.tally[stage, False] += 1

    def count_stored(self, texts) -> int:
        """How many of the distinct ``texts`` have a stored estimate (first stage)."""
        return sum(self.path(text).is_file() for text in set(texts))

    def __len__(self) -> int:
        # every stage's file counts
        return sum(1 for _ in self.folder.glob("*.npz"))


def stage_tally(tally: collections.Counter) -> str:
    """What a run with a results store did at each stage, in words: "stage 1: 20 loaded; stage 2: 7 loaded, 4
    estimated" (a resumed run loads what the interrupted one finished, and estimates the rest)."""
    stages = sorted({stage for stage, _ in tally})
    return "; ".join(
        f"{stage_label(stage)}: "
        + ", ".join(
            f"{n} {word}"
            for word, n in (("loaded", tally[stage, True]), ("estimated", tally[stage, False]))
            if n
        )
        for stage in stages
    )
