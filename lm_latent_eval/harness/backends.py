"""lm-eval backends: ``--model latent`` (any contract-conforming latent LM) and ``--model latent_hmm``.

Each request is answered from document-level estimates log p̂(x) (``estimators.estimate_document``): IS, SMC, beam
or exact, as chosen by ``estimator=``. Every IS / SMC estimate of a ``loglikelihood_rolling`` document is also kept, with its
K log weights, in a process-local table (``document_estimate``) so that task code can aggregate the same samples
at instance and corpus level (see tasks/latent_ppl_tiny).
"""

from __future__ import annotations

import json
import logging
import os
import warnings

import lm_eval.models  # noqa: F401  (built-in models first: get_model imports them only while the registry is empty)
import torch
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model
from tqdm import tqdm

from .. import __version__
from ..estimators import DocumentEstimate, EstimatorSettings, estimate_document
from ..estimators.diagnostics import reliability_warning
from ..estimators.seeding import document_generator
from ..estimators.smc import require_stepwise
from ..models import MODELS, checkpoint_hash, load_model
from ..protocol import has_stepwise, has_text_sampler
from .results_store import ResultsStore

logger = logging.getLogger(__name__)

GENERATION_STREAM = -1  # block index of the random stream used by generate_until (IS uses blocks 0, 1, ...)
DEFAULT_MAX_GEN_TOKS = 256
_CACHE_FINGERPRINT_KEY = "lm_latent_eval:model_fingerprint"

# document text -> its latest DocumentEstimate from loglikelihood_rolling in this process (read by task code)
_ROLLING_ESTIMATES: dict[str, DocumentEstimate] = {}


def document_estimate(text: str) -> DocumentEstimate | None:
    """The estimate (with its K log weights under IS) that this process's latent backend returned for ``text``."""
    return _ROLLING_ESTIMATES.get(text)


def _parse_int(name: str, value) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not str(value).strip().lstrip("-").isdigit():
        raise ValueError(f"model_args {name} must be an integer, got {value!r}")
    return int(value)


def _parse_float(name: str, value) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        number = None
    if number is None or isinstance(value, bool):
        raise ValueError(f"model_args {name} must be a number, got {value!r}")
    return number


def _parse_bool(name: str, value) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ValueError(f"model_args {name} must be true or false, got {value!r}")


def _parse_batch_size(value) -> int | None:
    """lm-eval's ``--batch_size`` (a string from the CLI): particles per log_joint call; ``auto`` (None) = one IS block."""
    if value is None or str(value).startswith("auto"):
        return None
    return _parse_int("batch_size", value)


def _resolve_device(device) -> torch.device:
    """The requested device; CUDA falls back to CPU (with a warning) on a machine without it (lm-eval defaults to cuda:0)."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        warnings.warn(f"device={device} requested but CUDA is not available: running on cpu", stacklevel=3)
        return torch.device("cpu")
    return device


def _parse_dtype(dtype) -> torch.dtype | None:
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    value = getattr(torch, str(dtype).removeprefix("torch."), None)
    if not isinstance(value, torch.dtype):
        raise ValueError(  # noqa: TRY004  (a bad model_args value, not a bad Python type)
            f"model_args dtype must name a torch dtype (float32, float64, bfloat16, ...), got {dtype!r}"
        )
    return value


def _distributed_state(device: torch.device):
    """accelerate's process state under ``accelerate launch`` / torchrun (WORLD_SIZE > 1), else None."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    from accelerate import PartialState

    return PartialState(cpu=device.type == "cpu")  # gloo process group on CPU, one GPU per process otherwise


def _parameter_dtype(model) -> torch.dtype | None:
    """dtype of the model's first floating-point parameter (None for a model without parameters)."""
    params = getattr(model, "parameters", None)
    return next((p.dtype for p in params() if p.is_floating_point()), None) if callable(params) else None


# get_model_info keys that name the model but never change a number (kept out of the results_dir run key)
_NAMING_KEYS = ("checkpoint", "model_name", "model_revision")


def _num_parameters(model) -> int:
    """Number of distinct parameters of the model (its proposal included); 0 for a model without parameters."""
    params = getattr(model, "parameters", None)
    return sum(p.numel() for p in params()) if callable(params) else 0


def _package_path(checkpoint) -> str:
    """``lm_latent_eval/data/<name>`` for a bundled checkpoint (machine-independent), else the path itself."""
    from ..paths import DATA_DIR

    path = os.path.abspath(checkpoint)
    root = os.path.dirname(os.path.dirname(os.path.abspath(DATA_DIR)))
    return os.path.relpath(path, root) if path.startswith(os.path.abspath(DATA_DIR)) else str(checkpoint)


def _hub_revision(checkpoint) -> str | None:
    """The Hub commit of a checkpoint in the huggingface_hub cache (``.../snapshots/<commit>``), else None."""
    parent, name = os.path.split(os.path.normpath(str(checkpoint)))
    is_commit = len(name) == 40 and all(c in "0123456789abcdef" for c in name)
    return name if os.path.basename(parent) == "snapshots" and is_commit else None


@register_model("latent")
class LatentLMEval(LM):
    """lm-eval backend over a latent LM: log p̂ by importance sampling (``is``), SMC (``smc``), beam bound or exact.

    model_args: ``model`` (a name in lm_latent_eval.models.MODELS or ``pkg.mod:Cls``), ``pretrained`` (local
    folder or Hub id; default: the bundled checkpoint), ``estimator``, ``num_samples``, ``temperature``, ``peek``,
    ``beam_size``, ``seed``, ``resample_threshold`` and ``smc_runs`` (SMC), ``dtype``, ``device``, ``results_dir`` (off unless given: keep every document's
    estimate under this folder, keyed by model, checkpoint and settings, so a rerun skips finished documents; see
    results_store.py). lm-eval's ``--batch_size`` sets the particles per log_joint call (memory only; never
    changes a number).
    """

    MODEL: str | None = None  # fixed by the per-model subclasses below
    model_kwargs: dict = {}  # extra keyword arguments of the model's from_pretrained (set by per-model subclasses)

    @classmethod
    def create_from_arg_obj(cls, arg_dict: dict, additional_config: dict | None = None) -> LatentLMEval:
        """lm-eval's constructor: model_args win over the CLI's ``--device`` / ``--batch_size`` (always passed)."""
        cli = {k: v for k, v in (additional_config or {}).items() if v is not None}
        for key in sorted(set(cli) & set(arg_dict)):
            if str(cli[key]) != str(arg_dict[key]):
                logger.info("model_args %s=%s overrides --%s %s", key, arg_dict[key], key, cli[key])
        return cls(**{**cli, **arg_dict})

    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: dict | None = None) -> LatentLMEval:
        """``--model_args key=value,...`` parsed as lm-eval does, then ``create_from_arg_obj``."""
        from lm_eval.utils import simple_parse_args_string

        return cls.create_from_arg_obj(simple_parse_args_string(arg_string), additional_config)

    def __init__(
        self,
        model: str | None = None,
        pretrained: str | None = None,
        estimator: str | None = None,
        num_samples=None,
        temperature=None,
        peek=None,
        beam_size=None,
        seed=None,
        resample_threshold=None,
        smc_runs=None,
        batch_size=None,
        max_batch_size=None,  # passed by lm-eval; unused (batch_size is a particle count, not a request count)
        device=None,
        dtype=None,
        results_dir=None,
        **unknown,
    ) -> None:
        super().__init__()
        if unknown:
            raise ValueError(
                f"unknown model_args {sorted(unknown)} for {type(self).__name__}; accepted: model, pretrained, "
                "estimator, num_samples, temperature, peek, beam_size, seed, resample_threshold, smc_runs, batch_size, "
                "device, dtype, results_dir"
            )
        if self.MODEL is not None and model not in (None, self.MODEL):
            raise ValueError(
                f"{type(self).__name__} always loads model={self.MODEL!r}; use --model latent for {model!r}"
            )
        if (self.MODEL or model) is None:
            raise ValueError(
                f"--model latent needs model_args model=<one of {sorted(MODELS)} or package.module:Class>"
            )
        self.model_name = self.MODEL or model
        given = {
            "estimator": estimator,
            "num_samples": _parse_int("num_samples", num_samples),
            "temperature": _parse_float("temperature", temperature),
            "peek": _parse_bool("peek", peek),
            "beam_size": _parse_int("beam_size", beam_size),
            "seed": _parse_int("seed", seed),
            "resample_threshold": _parse_float("resample_threshold", resample_threshold),
            "smc_runs": _parse_int("smc_runs", smc_runs),
            "batch_size": _parse_batch_size(batch_size),
        }
        try:
            self.settings = EstimatorSettings(**{k: v for k, v in given.items() if v is not None})
        except ValueError as err:
            raise ValueError(f"bad model_args for {type(self).__name__}: {err}") from None
        if (
            self.settings.estimator == "is"
            and self.settings.batch_size == 1
            and self.settings.num_samples > 1
        ):
            logger.warning(
                "scoring 1 particle per log_joint call (lm-eval's default --batch_size 1); pass --batch_size auto "
                "or a number for speed (the results do not change)"
            )
        self._device = _resolve_device(device)
        self._state = _distributed_state(self._device)
        if self._state is not None:  # lm-eval shards documents by rank; seeds depend on documents only
            self._rank, self._world_size = self._state.process_index, self._state.num_processes
            if self._device.type == "cuda":
                self._device = self._state.device
        self._dtype = _parse_dtype(dtype)
        self.model, self.checkpoint = load_model(
            self.model_name, pretrained, device=self._device, dtype=self._dtype, **self.model_kwargs
        )
        self.checkpoint_sha256 = checkpoint_hash(self.checkpoint)
        self.pretrained = str(pretrained) if pretrained is not None else None
        if self.settings.estimator == "smc":
            require_stepwise(self.model)  # fail before any request: the model lacks the stepwise part
        self.results_store = None
        if results_dir is not None:  # per-document results on disk: a rerun skips documents already done
            identity = {k: v for k, v in self.get_model_info().items() if k not in _NAMING_KEYS}
            self.results_store = ResultsStore(str(results_dir), identity)  # str: lm-eval parses `2024` as int
            logger.info("per-document results in %s (%d stored)", self.results_store.folder, len(self.results_store))
        self._warned_greedy = False

    # ---- provenance -------------------------------------------------------------------------------------------

    def get_model_info(self) -> dict:
        """Model identity and estimator settings; lm-eval merges this into results["config"].

        Besides our keys, the ones lm-eval's ``hf`` backend fills for leaderboards: ``model_name`` (``pretrained`` as
        given, else the bundled checkpoint's package path), ``model_sha`` (sha256 of the checkpoint's files: we
        hash content, the Hub commit is ``model_revision`` when the checkpoint came from the Hub cache),
        ``model_dtype`` (as ``hf`` writes it, e.g. ``torch.float32``) and ``model_num_parameters`` (p and q).
        """
        cls = type(self.model)
        dtype = self._dtype or _parameter_dtype(self.model)
        info = {
            "model_name": self.pretrained or _package_path(self.checkpoint),
            "model_sha": self.checkpoint_sha256,
            "model_revision": _hub_revision(self.checkpoint),
            "model_dtype": str(dtype),
            "model_num_parameters": _num_parameters(self.model),
            "latent_model": MODELS.get(self.model_name, self.model_name),
            "latent_model_class": f"{cls.__module__}:{cls.__qualname__}",
            "checkpoint": str(self.checkpoint),
            "checkpoint_sha256": self.checkpoint_sha256,
            "estimator_settings": self.settings.as_dict(self._device),
            "device_type": self._device.type,  # random streams and float rounding differ between cpu and cuda
            "dtype": str(dtype).removeprefix("torch."),
            "lm_latent_eval_version": __version__,
        }
        if hasattr(self.model, "count_eos"):  # sentence-level models: is the end-of-sentence token scored and counted?
            info["count_eos"] = bool(self.model.count_eos)
        return info

    def set_cache_hook(self, cache_hook) -> None:
        """Refuse an lm-eval ``--use_cache`` database filled by a different model, checkpoint or estimator."""
        dbdict = getattr(cache_hook, "dbdict", None)
        if dbdict is not None:
            mine = json.dumps(self.get_model_info(), sort_keys=True)
            theirs = dbdict.get(_CACHE_FINGERPRINT_KEY)
            if theirs is not None and theirs != mine:
                raise ValueError(
                    "--use_cache database was written by a different latent model or estimator (lm-eval keys its "
                    f"cache by request text only): cached {theirs}, now {mine}. Use a separate cache file."
                )
            dbdict[_CACHE_FINGERPRINT_KEY] = mine
            dbdict.commit()
        super().set_cache_hook(cache_hook)

    # ---- multi-process runs (lm-eval calls these only when world_size > 1) ----------------------------------------

    def all_gather(self, tensor):
        from accelerate.utils import gather

        return gather(tensor) if self.world_size > 1 else tensor

    def gather_object(self, obj, dst=0):
        if self.world_size <= 1:
            return [obj]
        result = [None] * self.world_size if self.rank == dst else None
        torch.distributed.gather_object(obj=obj, object_gather_list=result, dst=dst)
        return result

    def barrier(self) -> None:
        if self._state is not None:
            self._state.wait_for_everyone()

    # ---- requests ---------------------------------------------------------------------------------------------

    def _estimate_all(self, texts: list[str], desc: str, disable_tqdm: bool) -> dict[str, DocumentEstimate]:
        """One estimate per distinct text (each seeded from (seed, text), so order and batching never matter)."""
        unique = list(dict.fromkeys(texts))
        estimates = {}
        if self.results_store is not None:
            stored = {text: self.results_store.get(text) for text in unique}
            estimates = {text: est for text, est in stored.items() if est is not None}
            if estimates:
                logger.info("%s: %d of %d documents read from %s", desc, len(estimates), len(unique),
                            self.results_store.folder)
        for text in tqdm([t for t in unique if t not in estimates], desc=desc, disable=disable_tqdm):
            estimates[text] = estimate_document(self.model, text, self.settings, device=self._device)
            if self.results_store is not None:  # saved as soon as it is done: an interrupted run loses one document
                self.results_store.put(estimates[text])
        return estimates

    def _warn_if_unreliable(self, estimates) -> None:
        """Log one plain-words warning for a batch of estimates when IS ones are unreliable (Pareto k̂ > 0.7)."""
        weights = [e.log_weights for e in estimates if e.log_weights is not None and e.num_tokens > 0
                   and e.diagnostics.get("estimator") != "smc"]  # k̂ of final SMC weights is no IS diagnostic
        s = self.settings
        tries = [f"more samples (num_samples={10 * s.num_samples})"]
        if s.temperature <= 1.0:
            tries.append("a proposal temperature slightly above 1 (temperature=1.1)")
        if not s.peek:
            tries.append("a peeking proposal (peek=true)")
        if has_stepwise(self.model):
            tries.append("sequential Monte Carlo (estimator=smc)")
        message = reliability_warning(weights, "Try " + ", ".join(tries) + ".")
        if message is not None:
            logger.warning("%s: %s", type(self).__name__, message)

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        """log p̂(x) of each document (0.0 for a document without tokens, with a warning naming it)."""
        texts = [req.args[0] for req in requests]
        estimates = self._estimate_all(texts, f"{self.settings.estimator} log p(x)", disable_tqdm)
        self._warn_if_unreliable(estimates.values())
        _ROLLING_ESTIMATES.clear()
        _ROLLING_ESTIMATES.update(estimates)
        for text, est in estimates.items():
            if est.num_tokens == 0:
                warnings.warn(
                    f"document {text[:60]!r} has no tokens: log p = 0.0 over 0 tokens", stacklevel=2
                )
        return [estimates[text].log_likelihood for text in texts]

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        """log p̂(context ⊕ continuation) − log p̂(context), one context estimate per distinct context."""
        pairs = [req.args for req in requests]
        self._check_prefix_tokenization(pairs)
        texts = [ctx for ctx, _ in pairs] + [ctx + cont for ctx, cont in pairs]
        estimates = self._estimate_all(
            texts, f"{self.settings.estimator} log p(context, continuation)", disable_tqdm
        )
        self._warn_if_unreliable(estimates.values())
        if not self._warned_greedy:
            warnings.warn(
                f"{type(self).__name__}: is_greedy is not computed for latent LMs (always False), so metrics built "
                "on it (e.g. 'acc' of loglikelihood tasks such as lambada) are meaningless; multiple-choice accuracy "
                "is unaffected",
                stacklevel=2,
            )
            self._warned_greedy = True
        return [
            (estimates[ctx + cont].log_likelihood - estimates[ctx].log_likelihood, False)
            for ctx, cont in pairs
        ]

    def _check_prefix_tokenization(self, pairs) -> None:
        """Warn when tokens(context) is not a prefix of tokens(context ⊕ continuation): no longer a conditional."""
        for ctx, cont in dict.fromkeys(pairs):
            x_ctx, x_full = self.model.tokenize(ctx), self.model.tokenize(ctx + cont)
            if x_full.numel() < x_ctx.numel() or not torch.equal(x_full[: x_ctx.numel()], x_ctx):
                warnings.warn(
                    f"tokens of context {ctx[-40:]!r} are not a prefix of those of context+continuation "
                    f"{(ctx + cont)[-60:]!r}: the loglikelihood is log p(context+continuation) - log p(context), "
                    "not a conditional of the continuation's tokens",
                    stacklevel=3,
                )
                return

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        """Ancestral samples from p(· | context), seeded from (seed, context), cut at the first ``until`` string."""
        if not has_text_sampler(self.model):
            raise NotImplementedError(
                f"{type(self.model).__name__} has no sample_text(): generate_until is unavailable"
            )
        outputs = []
        for req in tqdm(requests, desc="sampling continuations", disable=disable_tqdm):
            context, gen_kwargs = req.args
            until = gen_kwargs.get("until") or []
            until = [until] if isinstance(until, str) else list(until)
            max_tokens = int(gen_kwargs.get("max_gen_toks", DEFAULT_MAX_GEN_TOKS))
            gen = document_generator(self.settings.seed, context, GENERATION_STREAM, device=self._device)
            text = self.model.sample_text(context, max_tokens, generator=gen, stop=until)
            cut = min((text.find(s) for s in until if s and s in text), default=len(text))
            outputs.append(text[:cut])
        return outputs


@register_model("latent_hmm")
class LatentHMMEval(LatentLMEval):
    """``--model latent_hmm``: the word-level HMM reference model (bundled checkpoint, exact marginal available)."""

    MODEL = "hmm"


@register_model("latent_kglm")
class LatentKGLMEval(LatentLMEval):
    """``--model latent_kglm``: KGLM (bundled checkpoint, our checkpoint, or an original AllenNLP ``model.tar.gz``
    with model_args ``knowledge_graph``, ``alias_database`` and ``proposal_archive``; their sha256 join the model's
    identity)."""

    MODEL = "kglm"

    def __init__(self, knowledge_graph=None, alias_database=None, proposal_archive=None, **kwargs) -> None:
        files = {"knowledge_graph": knowledge_graph, "alias_database": alias_database,
                 "proposal_archive": proposal_archive}
        self.model_kwargs = {k: str(v) for k, v in files.items() if v is not None}
        for name, path in self.model_kwargs.items():
            if not os.path.exists(path):
                raise FileNotFoundError(f"model_args {name}={path}: no such file")
        self.model_files_sha256 = {k: checkpoint_hash(v) for k, v in self.model_kwargs.items()}
        super().__init__(**kwargs)

    def get_model_info(self) -> dict:
        """The base provenance plus the sha256 of every extra model file."""
        info = super().get_model_info()
        info["model_files_sha256"] = self.model_files_sha256
        return info


@register_model("latent_entitynlm")
class LatentEntityNLMEval(LatentLMEval):
    """``--model latent_entitynlm``: EntityNLM (Ji et al. 2017) with its discriminative proposal (bundled checkpoint)."""

    MODEL = "entitynlm"


@register_model("latent_rnng")
class LatentRNNGEval(LatentLMEval):
    """``--model latent_rnng``: unlabeled binarized RNNG (Dyer et al. 2016; Kim et al. 2019) with its tree-CRF proposal
    (bundled checkpoint); model_arg ``count_eos`` (default: the checkpoint's) scores and counts ``</s>`` or not."""

    MODEL = "rnng"

    def __init__(self, count_eos=None, **kwargs) -> None:
        count_eos = _parse_bool("count_eos", count_eos)
        self.model_kwargs = {} if count_eos is None else {"count_eos": count_eos}
        super().__init__(**kwargs)


@register_model("latent_tokenization")
class LatentTokenizationEval(LatentLMEval):
    """``--model latent_tokenization``: any Hugging Face causal LM (byte-level BPE) as a latent LM over its
    tokenizations (lm_latent_eval/models/tokenization; default: the bundled tiny GPT-2).

    ``estimator=canonical`` reproduces lm-eval's ``hf`` backend (one tokenization, same windows, same numbers);
    ``is``, ``beam`` and ``exact`` (enumeration, short texts only) marginalize over segmentations. ``loglikelihood``
    = log p̂(context ⊕ continuation spelled, ending at a token boundary) − log p̂(the text starts with context), the
    context's trailing whitespace moved to the continuation as hf does. Extra model_args: ``canonical_mix`` (ε of
    the proposal's defensive mixture with the canonical token, default 0.9), ``particle_batch`` (particles decoded
    together: memory only) and ``max_length`` (context length L of the rolling windows).
    """

    MODEL = "tokenization"

    def __init__(self, estimator=None, particle_batch=None, max_length=None, canonical_mix=None, **kwargs) -> None:
        self.canonical = estimator == "canonical"
        self.model_kwargs = {k: v for k, v in {"particle_batch": _parse_int("particle_batch", particle_batch),
                                              "max_length": _parse_int("max_length", max_length),
                                              "canonical_mix": _parse_float("canonical_mix", canonical_mix)}.items()
                            if v is not None}  # fmt: skip
        super().__init__(estimator="exact" if self.canonical else estimator, **kwargs)
        self._context_model = self.model.with_cover_end()
        if self.canonical and self.results_store is not None:
            warnings.warn("results_dir is not used by estimator=canonical (one forward pass per window, nothing to "
                          "resume)", stacklevel=2)  # fmt: skip

    def get_model_info(self) -> dict:
        """The base provenance, with estimator ``canonical`` and the model settings that can change a number."""
        info = super().get_model_info()
        if self.canonical:
            info["estimator_settings"] = {"estimator": "canonical"}
        info["max_length"] = self.model.max_length
        if not self.canonical and self.settings.estimator == "is":
            info["estimator_settings"]["canonical_mix"] = self.model.canonical_mix
        return info

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        """log p̂(x) of each document; canonical: hf's rolling windows over the tokenizer's segmentation."""
        if not self.canonical:
            return super().loglikelihood_rolling(requests, disable_tqdm)
        from ..models.tokenization import canonical

        return canonical.loglikelihood_rolling(self.model, [req.args[0] for req in requests])

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        """canonical: hf's (log p(continuation tokens | context tokens), greedy); else the marginal conditional."""
        pairs = [req.args for req in requests]
        if self.canonical:
            from ..models.tokenization import canonical

            return canonical.loglikelihood(self.model, pairs)
        moved = []
        for context, continuation in pairs:  # hf's convention: trailing whitespace belongs to the continuation
            spaces = len(context) - len(context.rstrip())
            moved.append((context[: len(context) - spaces], context[len(context) - spaces :] + continuation))
        desc = f"{self.settings.estimator} log p(context, continuation)"
        joint = self._estimate_all([c + k for c, k in moved], desc, disable_tqdm)
        contexts = {}
        for context in tqdm(list(dict.fromkeys(c for c, _ in moved)), desc=f"{self.settings.estimator} log P(starts "
                            "with context)", disable=disable_tqdm):  # fmt: skip
            contexts[context] = estimate_document(self._context_model, context, self.settings, device=self._device)
        self._warn_if_unreliable([*joint.values(), *contexts.values()])
        if not self._warned_greedy:
            warnings.warn("latent_tokenization: is_greedy is only computed by estimator=canonical (False here)",
                          stacklevel=2)
            self._warned_greedy = True
        return [(joint[c + k].log_likelihood - contexts[c].log_likelihood, False) for c, k in moved]
