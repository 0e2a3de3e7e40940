"""LDA models users already have, as our ``LDA``: scikit-learn, gensim, tomotopy and MALLET (optional libraries).

What each gives (Φ [K, V], α [K], the vocabulary, and the pseudo-counts λ with their prior η where they exist):

- scikit-learn ``LatentDirichletAllocation`` (a joblib file of a ``Pipeline(CountVectorizer, LDA)``, a
  ``(vectorizer, lda)`` pair, or a bare LDA with ``vocabulary=words.txt``): λ = ``components_`` (the variational
  Dirichlet parameters of the topics), α = ``doc_topic_prior_`` (a number: symmetric), η = ``topic_word_prior_``. Our
  choice: Φ = λ / Σ_w λ, the posterior mean of the topics. The alternative, exp(E[log β]) = exp(ψ(λ) − ψ(Σ_w λ)),
  which scikit-learn's own E-step uses, does not sum to one; ``topic_estimate=exp_expected_log`` takes it
  renormalized. The vectorizer's ``token_pattern`` and ``lowercase`` become the model's tokenizer.
- gensim ``LdaModel`` (``LdaModel.save`` file): λ = ``state.get_lambda()``, Φ its normalization (what
  ``get_topics()`` returns, in float64), α = ``alpha`` (a vector), η = ``eta`` (when one number), the vocabulary
  ``id2word``.
- tomotopy ``LDAModel`` (``.bin`` file): Φ = ``get_topic_word_dist(k)`` = (n_kw + η) / (n_k + Vη) (recomputed in
  float64 from the unnormalized values), α = ``alpha``, η = ``eta``, the vocabulary ``used_vocabs``.
- MALLET's ``--topic-word-weights-file`` (lines ``topic<TAB>word<TAB>weight``, weight = n_kw + β): Φ = the weights
  normalized per topic; α from ``alpha=`` or from the header ``#alpha : …`` of the ``--output-state`` file
  (``mallet_state=``), which gives β too.

Only open files you trust: joblib, gensim and pickle files can run code when loaded.
"""

from __future__ import annotations

import gzip
import importlib
from pathlib import Path

import numpy as np
from scipy.special import digamma

from ...documents import read_text
from ...errors import InputError

FORMATS = ("checkpoint", "sklearn", "gensim", "tomotopy", "mallet")
LOADER_ARGS = ("vocabulary", "alpha", "mallet_state", "topic_estimate")
TOPIC_ESTIMATES = ("mean", "exp_expected_log")
# the first bytes of LDAModel.save
TOMOTOPY_LDA_MAGIC = b"LDA\0"
MODEL_FILE_SUFFIXES = (".joblib", ".pkl", ".pickle", ".bin", ".txt", ".gz", ".model", ".lda")


def detect_format(path: str | Path) -> str:
    """Which kind of model ``path`` holds, from its layout: our checkpoint folder, a joblib / pickle file
    (scikit-learn), a gensim save (with its ``.state`` file beside it), a tomotopy ``.bin`` or MALLET weights."""
    path = Path(path)
    if path.is_dir():
        if (path / "config.json").is_file():
            return "checkpoint"
        raise ValueError(f"{path}: a folder without config.json is not an lm-latent-eval LDA checkpoint")
    if not path.exists():
        if path.is_absolute() or str(path).startswith(".") or path.suffix in MODEL_FILE_SUFFIXES:
            raise FileNotFoundError(f"{path}: no such LDA model file or folder")
        # a Hugging Face Hub id: the Hub mixin downloads it (or says why not)
        return "checkpoint"
    if path.suffix in (".joblib", ".pkl", ".pickle"):
        return "sklearn"
    if Path(f"{path}.state").is_file() or Path(f"{path}.expElogbeta.npy").is_file():
        return "gensim"
    if path.suffix == ".bin":
        return "tomotopy"
    with open(path, "rb") as fh:
        first = fh.readline(1000).decode("utf-8", "replace").rstrip("\n").split("\t")
    if len(first) == 3 and _is_number(first[0]) and _is_number(first[2]):
        return "mallet"
    raise ValueError(
        f"{path}: cannot tell which LDA library wrote it; pass lda_format= one of {FORMATS} (.joblib: scikit-learn, "
        "a gensim save has a .state file beside it, .bin: tomotopy, MALLET: topic<TAB>word<TAB>weight lines)"
    )


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _require(module: str, extra: str = "lda"):
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(
            f"reading this LDA model needs {module.split('.')[0]}: pip install 'lm-latent-eval[{extra}]'"
        ) from None


def load_library_model(cls, fmt: str, path, **kwargs):
    """``cls`` (our LDA) from the file ``path`` written by the library ``fmt``; ``kwargs``: the loader arguments
    (``LOADER_ARGS``) and the model's own configuration (unknown_words, token_pattern, max_exact_work)."""
    if fmt not in FORMATS:
        raise InputError(f"lda_format must be auto or one of {FORMATS}, got {fmt!r}")
    loader = {
        "sklearn": _sklearn_file,
        "gensim": _gensim_file,
        "tomotopy": _tomotopy_file,
        "mallet": _mallet_file,
    }
    options = {k: kwargs.pop(k) for k in LOADER_ARGS if kwargs.get(k) is not None}
    wrong = set(options) - set(_ACCEPTS[fmt])
    if wrong:
        raise ValueError(f"{sorted(wrong)} do not apply to a {fmt} model (they apply to: {_ACCEPTS_DOC})")
    if not Path(path).is_file():
        raise FileNotFoundError(f"{path}: no such {fmt} LDA model file")
    return loader[fmt](cls, Path(path), options, kwargs)


def _read(library: str, load, path: Path):
    """``load(path)``; a file that needs a missing library says which, and whatever a corrupt or foreign file raises
    (EOFError, UnpicklingError, ...) becomes one ValueError line naming the file."""
    try:
        return load(str(path))
    except ModuleNotFoundError as err:
        raise ImportError(f"{path} needs {err.name}: pip install 'lm-latent-eval[lda]'") from None
    except Exception as err:  # noqa: BLE001 -- unpicklers raise anything on a foreign file
        raise ValueError(
            f"{path}: not a readable {library} model file ({type(err).__name__}: {err})"
        ) from None


_ACCEPTS = {
    "sklearn": ("vocabulary", "topic_estimate"),
    "gensim": ("topic_estimate",),
    "tomotopy": (),
    "mallet": ("alpha", "mallet_state"),
}
_ACCEPTS_DOC = (
    "vocabulary: bare scikit-learn; topic_estimate: scikit-learn, gensim; alpha, mallet_state: MALLET"
)


def _topics(pseudocounts: np.ndarray, estimate: str) -> np.ndarray:
    """Φ from variational Dirichlet parameters λ [K, V]: the mean λ / Σλ, or exp(ψ(λ) − ψ(Σλ)) renormalized."""
    if estimate not in TOPIC_ESTIMATES:
        raise ValueError(f"topic_estimate must be one of {TOPIC_ESTIMATES}, got {estimate!r}")
    lam = np.asarray(pseudocounts, dtype=np.float64)
    if estimate == "mean":
        return lam / lam.sum(1, keepdims=True)
    expected = np.exp(digamma(lam) - digamma(lam.sum(1, keepdims=True)))
    return expected / expected.sum(1, keepdims=True)


# ---- scikit-learn --------------------------------------------------------------------------------------------------


def _sklearn_file(cls, path: Path, options: dict, config: dict):
    joblib = _require("joblib")
    obj = _read("scikit-learn (joblib)", joblib.load, path)
    vocabulary = options.get("vocabulary")
    words = read_text(vocabulary).split("\n") if vocabulary else None
    words = [w for w in words if w] if words else None
    return from_sklearn(cls, obj, vocabulary=words, topic_estimate=options.get("topic_estimate", "mean"),
                        source=f"scikit-learn LatentDirichletAllocation ({path.name})", **config)  # fmt: skip


def _split_sklearn(obj):
    """(vectorizer or None, lda) from a Pipeline, a (vectorizer, lda) pair / dict, or a bare LDA."""
    steps = obj
    if hasattr(obj, "steps"):
        steps = [step for _, step in obj.steps]
    elif isinstance(obj, dict):
        steps = list(obj.values())
    elif not isinstance(obj, (list, tuple)):
        steps = [obj]
    lda = next((s for s in steps if hasattr(s, "components_") and hasattr(s, "doc_topic_prior_")), None)
    if lda is None:
        raise ValueError(
            "no fitted scikit-learn LatentDirichletAllocation found (components_, doc_topic_prior_)"
        )
    vectorizer = next((s for s in steps if hasattr(s, "vocabulary_") and hasattr(s, "build_analyzer")), None)
    return vectorizer, lda


def _vectorizer_config(vectorizer) -> dict:
    """token_pattern and lowercase of a CountVectorizer whose analyzer we reproduce exactly; else a ValueError."""
    if type(vectorizer).__name__ != "CountVectorizer":
        raise ValueError(f"LDA needs word counts: a CountVectorizer, not a {type(vectorizer).__name__}")
    unsupported = {
        "analyzer": vectorizer.analyzer != "word",
        "ngram_range": tuple(vectorizer.ngram_range) != (1, 1),
        "tokenizer": vectorizer.tokenizer is not None,
        "preprocessor": vectorizer.preprocessor is not None,
        "strip_accents": vectorizer.strip_accents is not None,
        "binary": bool(vectorizer.binary),
    }
    bad = [name for name, is_bad in unsupported.items() if is_bad]
    if bad:
        raise ValueError(
            f"the CountVectorizer's {', '.join(bad)} cannot be reproduced as one token pattern; "
            "load the LDA with vocabulary=words.txt and token_pattern= instead"
        )
    return {"token_pattern": vectorizer.token_pattern, "lowercase": bool(vectorizer.lowercase)}


def from_sklearn(
    cls, obj, vocabulary=None, topic_estimate: str = "mean", source: str = "scikit-learn", **config
):
    """Our LDA from a fitted scikit-learn LDA (with its CountVectorizer, or ``vocabulary``: the words of its
    columns): Φ = ``topic_estimate`` of λ = components_, α = doc_topic_prior_, η = topic_word_prior_."""
    vectorizer, lda = _split_sklearn(obj)
    if vectorizer is not None:
        wanted = _vectorizer_config(vectorizer)
        given = config.get("token_pattern")
        if given is not None and given != wanted["token_pattern"]:
            raise ValueError(
                f"token_pattern={given!r} differs from the vectorizer's {wanted['token_pattern']!r}"
            )
        config = {**config, **wanted}
        vocabulary = list(vectorizer.get_feature_names_out()) if vocabulary is None else vocabulary
    if vocabulary is None:
        raise ValueError(
            "a bare LatentDirichletAllocation has no vocabulary: pass vocabulary=words.txt (one per line)"
        )
    lam = np.asarray(lda.components_, dtype=np.float64)
    if len(vocabulary) != lam.shape[1]:
        raise ValueError(f"the vocabulary has {len(vocabulary)} words, the LDA {lam.shape[1]} columns")
    alpha = np.full(lam.shape[0], float(lda.doc_topic_prior_))
    return cls.from_parameters(_topics(lam, topic_estimate), alpha, vocabulary, pseudocounts=lam,
                               eta=float(lda.topic_word_prior_), source=source, **config)  # fmt: skip


# ---- gensim -------------------------------------------------------------------------------------------------------


def _gensim_file(cls, path: Path, options: dict, config: dict):
    models = _require("gensim.models")
    lda = _read("gensim LdaModel", models.LdaModel.load, path)
    return from_gensim(cls, lda, options.get("topic_estimate", "mean"), source=f"gensim LdaModel ({path.name})",
                       **config)  # fmt: skip


def from_gensim(cls, lda, topic_estimate: str = "mean", source: str = "gensim", **config):
    """Our LDA from a gensim ``LdaModel``: λ = state.get_lambda(), α = alpha, η = eta (when one number)."""
    lam = np.asarray(lda.state.get_lambda(), dtype=np.float64)
    vocab = [lda.id2word[i] for i in range(lam.shape[1])]
    eta = np.asarray(lda.eta, dtype=np.float64).reshape(-1)
    eta_value = float(eta[0]) if np.allclose(eta, eta[0]) else None
    return cls.from_parameters(_topics(lam, topic_estimate), np.asarray(lda.alpha, dtype=np.float64), vocab,
                               pseudocounts=lam, eta=eta_value, source=source, **config)  # fmt: skip


# ---- tomotopy ------------------------------------------------------------------------------------------------------


def _tomotopy_file(cls, path: Path, options: dict, config: dict):
    with open(path, "rb") as fh:
        head = fh.read(4)
    # tomotopy aborts the process on a file it cannot parse: refuse it first
    if head != TOMOTOPY_LDA_MAGIC:
        raise ValueError(
            f"{path}: not a tomotopy LDAModel file (it starts with {head!r}, not {TOMOTOPY_LDA_MAGIC!r})"
        )
    mdl = _read("tomotopy LDAModel", _require("tomotopy").LDAModel.load, path)
    return from_tomotopy(cls, mdl, source=f"tomotopy LDAModel ({path.name})", **config)


def from_tomotopy(cls, mdl, source: str = "tomotopy", **config):
    """Our LDA from a trained tomotopy ``LDAModel``: Φ from the unnormalized n_kw + η, α = alpha, η = eta."""
    raw = np.stack(
        [np.asarray(mdl.get_topic_word_dist(k, normalize=False), dtype=np.float64) for k in range(mdl.k)]
    )
    return cls.from_parameters(raw / raw.sum(1, keepdims=True), np.asarray(mdl.alpha, dtype=np.float64),
                               list(mdl.used_vocabs), pseudocounts=raw, eta=float(mdl.eta), source=source,
                               **config)  # fmt: skip


# ---- MALLET --------------------------------------------------------------------------------------------------------


def _mallet_file(cls, path: Path, options: dict, config: dict):
    rows, words = [], {}
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 3 or not parts[0].isdigit() or not _is_number(parts[2]):
                raise ValueError(f"{path}:{n}: expected topic<TAB>word<TAB>weight, got {line.strip()[:60]!r}")
            rows.append((int(parts[0]), words.setdefault(parts[1], len(words)), float(parts[2])))
    if not rows:
        raise ValueError(f"{path}: no topic<TAB>word<TAB>weight lines")
    K, V = max(k for k, _, _ in rows) + 1, len(words)
    lam = np.full((K, V), np.nan)
    for k, w, value in rows:
        lam[k, w] = value
    if np.isnan(lam).any():
        raise ValueError(f"{path}: {int(np.isnan(lam).sum())} (topic, word) weights are missing")
    alpha, beta = _mallet_priors(options, K)
    return cls.from_parameters(lam / lam.sum(1, keepdims=True), alpha, list(words), pseudocounts=lam, eta=beta,
                               source=f"MALLET topic-word weights ({path.name})", **config)  # fmt: skip


def _mallet_priors(options: dict, num_topics: int) -> tuple[np.ndarray, float | None]:
    """α [K] from ``alpha=`` (one value, or one per topic separated by ':') or the state file's header; β if known."""
    alpha, beta = None, None
    if options.get("mallet_state"):
        alpha, beta = read_mallet_state_header(options["mallet_state"])
    if options.get("alpha") is not None:
        values = str(options["alpha"]).split(":")
        if not all(_is_number(a) for a in values):
            raise ValueError(f"alpha must be a number or numbers separated by ':', got {options['alpha']!r}")
        alpha = np.array([float(a) for a in values], dtype=np.float64)
    if alpha is None:
        raise ValueError(
            "a MALLET weights file has no α: pass alpha=… or mallet_state=<the --output-state file>"
        )
    alpha = np.full(num_topics, alpha[0]) if alpha.size == 1 else alpha
    if alpha.size != num_topics:
        raise ValueError(f"α has {alpha.size} values for {num_topics} topics")
    return alpha, beta


def read_mallet_state_header(path) -> tuple[np.ndarray, float | None]:
    """α [K] and β from the header lines ``#alpha : a_1 a_2 …`` and ``#beta : b`` of a MALLET state file (gzip
    or plain)."""
    opener = gzip.open if Path(path).suffix == ".gz" else open
    alpha, beta = None, None
    with opener(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            if not line.startswith("#"):
                break
            key, _, value = line[1:].partition(":")
            if key.strip() == "alpha":
                alpha = np.array([float(a) for a in value.split()], dtype=np.float64)
            elif key.strip() == "beta":
                beta = float(value)
    if alpha is None:
        raise ValueError(f"{path}: no '#alpha : …' line in the header of the MALLET state file")
    return alpha, beta
