"""lm-eval's ``--use_cache`` database, made safe for latent models and made to keep our estimates.

lm-eval keys its cache by request text only, not by model: a database filled by another model, checkpoint or
estimator would answer our requests with its numbers. ``EstimateCache.of`` therefore writes the backend's
``get_model_info`` into the database and refuses one that holds another. A cache hit never reaches the backend, so
the perplexity tasks of a rerun that the cache answers would find no estimate: the database also keeps each
document's whole estimate (``put``), which the estimate exchange reads back (``get``).
"""

from __future__ import annotations

import hashlib
import json

from ..errors import InputError
from ..estimators import DocumentEstimate
from ..estimators.registry import estimate_from_json

FINGERPRINT_KEY = "lm_latent_eval:model_fingerprint"


def estimate_key(text: str) -> str:
    """The database key of a document's estimate."""
    return "lm_latent_eval:estimate:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


class EstimateCache:
    """One ``--use_cache`` database (lm-eval's SqliteDict, or any dict-like with ``commit``) holding our estimates.

    Examples
    --------
    >>> from lm_latent_eval.estimators import ExactEstimate
    >>> class Database(dict):
    ...     def commit(self):
    ...         pass
    >>> cache = EstimateCache(Database())
    >>> cache.put({"a b": ExactEstimate("a b", 2, -4.0)})
    >>> cache.get("a b").log_likelihood, cache.get("c")
    (-4.0, None)
    """

    def __init__(self, database) -> None:
        self.database = database

    @classmethod
    def of(cls, cache_hook, model_info: dict) -> EstimateCache | None:
        """The database of lm-eval's ``cache_hook`` (None without ``--use_cache``), claimed for ``model_info``.

        Raises
        ------
        InputError
            The database was written by a different model, checkpoint or estimator setting.
        """
        database = getattr(cache_hook, "dbdict", None)
        if database is None:
            return None
        mine = json.dumps(model_info, sort_keys=True)
        theirs = database.get(FINGERPRINT_KEY)
        if theirs is not None and theirs != mine:
            where = getattr(database, "filename", None)
            raise InputError(
                f"--use_cache database{f' {where}' if where else ''} was written with "
                f"{differences(json.loads(theirs), model_info)} (lm-eval keys its cache by request text only, so "
                "its numbers would answer this run); use another cache file, or the settings it was written with"
            )
        database[FINGERPRINT_KEY] = mine
        database.commit()
        return cls(database)

    def put(self, estimates: dict[str, DocumentEstimate]) -> None:
        """Keep the estimates (by document text)."""
        for text, est in estimates.items():
            self.database[estimate_key(text)] = est.to_json()
        self.database.commit()

    def get(self, text: str) -> DocumentEstimate | None:
        """The kept estimate of ``text``, or None."""
        stored = self.database.get(estimate_key(text))
        return None if stored is None else estimate_from_json(stored)


def _flat(info, prefix: str = "") -> dict:
    if not isinstance(info, dict):
        return {prefix: info}
    out = {}
    for key, value in info.items():
        out |= _flat(value, f"{prefix}.{key}" if prefix else str(key))
    return out


def _short(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= 40 else text[:37] + "..."


def differences(cached: dict, now: dict, most: int = 4) -> str:
    """The settings that differ between the model info a cache was written with and this run's, as
    ``name=cached (now value)``, at most ``most`` of them named.

    Examples
    --------
    >>> differences({"estimator": {"num_samples": 100, "seed": 1}, "model": "hmm"},
    ...             {"estimator": {"num_samples": 200, "seed": 1}, "model": "hmm"})
    'estimator.num_samples=100 (now 200)'
    >>> differences({"a": 1}, {"b": 2})
    'a=1 (now unset), b=unset (now 2)'
    """
    cached, now = _flat(cached), _flat(now)
    names = [k for k in dict.fromkeys([*cached, *now]) if cached.get(k, _UNSET) != now.get(k, _UNSET)]
    parts = [
        f"{k}={_short(cached[k]) if k in cached else 'unset'} (now {_short(now[k]) if k in now else 'unset'})"
        for k in names[:most]
    ]
    more = f" and {len(names) - most} more settings" if len(names) > most else ""
    return ", ".join(parts) + more


_UNSET = object()
