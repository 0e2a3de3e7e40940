"""lm-eval backends: ``--model latent`` (any contract-conforming latent LM) and ``--model latent_<name>`` for every
row of ``lm_latent_eval.models.MODELS`` that names a backend class (generated below from that table, except
``LatentTokenizationEval``, which answers requests its own way).

Each request is answered from document-level estimates log p̂(x) (``estimators.estimate_document``): IS, SMC, beam
or exact, as chosen by ``estimator=``. The estimates of a ``loglikelihood_rolling`` batch, with their K log weights,
are handed to the perplexity tasks through ``rolling_estimates`` (see tasks/latent_ppl_tiny).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import warnings
from pathlib import Path

import lm_eval.models  # noqa: F401  (built-in models first: get_model imports them only while the registry is empty)
import torch
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model
from tqdm import tqdm

from .. import __version__
from ..errors import InputError, UserError, install_excepthook
from ..estimators import DocumentEstimate, estimate_document
from ..estimators.adaptive import estimate_corpus
from ..estimators.corpus import reliability_warning
from ..estimators.importance import ImportanceSampling
from ..estimators.registry import estimator_named, recorded_settings, resolve
from ..estimators.seeding import document_generator
from ..models import MODELS, checkpoint_hash, load_model, model_target, resolve_class
from ..models.cuda_graphs import graphs_in_effect
from ..protocol import has_text_sampler, is_prefix_probability, prefix_view
from . import rolling_estimates
from .model_args import (
    BACKEND_ARGS,
    ModelArgsError,
    accepted_args_doc,
    check_known,
    model_options,
    parse_dtype,
    parse_settings,
    parse_value,
    resolve_device,
    settings_args,
)
from .provenance import (
    NAMING_KEYS,
    NAMING_MODEL_ARGS,
    hub_revision,
    import_root,
    num_parameters,
    package_path,
    parameter_dtype,
)
from .results_store import ResultsStore

logger = logging.getLogger(__name__)

LM_EVAL_DEFAULT_DEVICE = "cuda:0"  # what lm-eval's CLI passes as --device when the user gave none
GENERATION_STREAM = -1  # block index of the random stream used by generate_until (IS uses blocks 0, 1, ...)
DEFAULT_MAX_GEN_TOKS = 256
_CACHE_FINGERPRINT_KEY = "lm_latent_eval:model_fingerprint"


install_excepthook()  # lm_eval prints our errors (UserError: the message is the whole story) as one line


def _log_like_lm_eval() -> None:
    """Our log lines (the estimator auto chose, documents loaded from results_dir, ...) through the handler and level
    of lm-eval's CLI, when it has set them up: its logger does not propagate, so ours would show warnings only."""
    ours, theirs = logging.getLogger(__name__.split(".")[0]), logging.getLogger("lm_eval")
    if theirs.handlers and not ours.handlers:
        for handler in theirs.handlers:
            ours.addHandler(handler)
        if ours.level == logging.NOTSET:
            ours.setLevel(theirs.level)


class NoTextSampler(UserError, NotImplementedError):
    """generate_until for a model without ``sample_text``."""


def distributed_state(device: torch.device):
    """accelerate's process state under ``accelerate launch`` / torchrun (WORLD_SIZE > 1), else None.

    The process group is destroyed when the process exits: neither lm-eval nor accelerate does it, and a gloo group
    left to the interpreter's teardown aborts now and then ("terminate called without an active exception",
    SIGABRT) in a rank that finishes before the others, which fails the whole launch."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    from accelerate import PartialState

    state = PartialState(cpu=device.type == "cpu")  # gloo process group on CPU, one GPU per process otherwise
    atexit.register(state.destroy_process_group)
    return state


@register_model("latent")
class LatentLMEval(LM):
    """lm-eval backend over a latent LM: log p̂ by importance sampling (``is``), SMC (``smc``), beam bound or exact.

    lm-eval's ``--batch_size`` sets the particles per log_joint call (memory only; never changes a number);
    ``results_dir`` keeps every document's estimate on disk, keyed by model, checkpoint and settings, so a rerun
    skips finished documents (results_store.py). model_args (harness/model_args.py), plus the model's own options
    (its ``MODEL_ARGS``):
    """

    MODEL: str | None = None  # fixed by the per-model subclasses below

    @classmethod
    def create_from_arg_obj(cls, arg_dict: dict, additional_config: dict | None = None) -> LatentLMEval:
        """lm-eval's constructor: model_args win over the CLI's ``--device`` / ``--batch_size`` (always passed; lm-eval's
        own default ``--device cuda:0`` is dropped on a machine without CUDA: nobody asked for it)."""
        cli = {k: v for k, v in (additional_config or {}).items() if v is not None}
        if cli.get("device") == LM_EVAL_DEFAULT_DEVICE and not torch.cuda.is_available():
            del cli["device"]
        for key in sorted(set(cli) & set(arg_dict)):
            if str(cli[key]) != str(arg_dict[key]):
                logger.info("model_args %s=%s overrides --%s %s", key, arg_dict[key], key, cli[key])
        lm = cls(**{**cli, **arg_dict})
        if cls.MODEL is not None and not {"pretrained", "model"} & set(arg_dict):
            # lm-eval names the output folder after model_args pretrained= or model= (else a random id, the same
            # one for every model since lm-eval seeds Python's random): name it after the model instead
            arg_dict["model"] = cls.MODEL
        return lm

    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: dict | None = None) -> LatentLMEval:
        """``--model_args key=value,...`` parsed as lm-eval does, then ``create_from_arg_obj``."""
        from lm_eval.utils import simple_parse_args_string

        return cls.create_from_arg_obj(simple_parse_args_string(arg_string), additional_config)

    def __init__(self, **model_args) -> None:
        super().__init__()
        _log_like_lm_eval()
        self.model_name = self._model_name(model_args.get("model"))
        self.model_options = model_options(resolve_class(self.model_name))
        check_known(type(self).__name__, model_args, (*BACKEND_ARGS, *settings_args(), *self.model_options))
        try:
            self.settings = parse_settings(model_args)
        except ModelArgsError as err:
            raise ModelArgsError(f"bad model_args for {type(self).__name__}: {err}") from None
        self.model_kwargs = {
            a.name: parse_value(a, model_args[a.name])
            for a in self.model_options
            if model_args.get(a.name) is not None
        }
        self._setup_device(model_args.get("device"), model_args.get("dtype"))
        pretrained = model_args.get("pretrained")
        self.model, self.checkpoint = load_model(
            self.model_name, pretrained, device=self._device, dtype=self._dtype, **self.model_kwargs
        )
        self.checkpoint_sha256 = checkpoint_hash(self.checkpoint)
        self.pretrained = str(pretrained) if pretrained is not None else None
        self.settings, self.estimator_choice = resolve(self.settings, self.model)
        self.estimator = estimator_named(self.settings.estimator)
        logger.info("%s: %s", type(self).__name__, self.estimator_choice)
        if (
            isinstance(self.estimator, ImportanceSampling)
            and self.settings.batch_size == 1
            and self.settings.num_samples > 1
        ):
            logger.warning(
                "scoring 1 particle per log_joint call (lm-eval's default --batch_size 1); pass --batch_size auto "
                "or a number for speed (the results do not change)"
            )
        self.results_store = None
        if (
            model_args.get("results_dir") is not None
        ):  # per-document results on disk: a rerun skips finished ones
            identity = {k: v for k, v in self.get_model_info().items() if k not in NAMING_KEYS}
            self.results_store = ResultsStore(
                str(model_args["results_dir"]), identity
            )  # lm-eval parses 2024 as int
            logger.info(
                "per-document results in %s (%d stored)", self.results_store.folder, len(self.results_store)
            )
        self._warned_greedy = False
        # lm-eval's --use_cache database (set_cache_hook), which also keeps our estimates
        self._cache_db = None

    def _model_name(self, model) -> str:
        """The model this backend loads: its fixed MODEL, or model_args ``model`` for ``--model latent``."""
        if self.MODEL is not None and model not in (None, self.MODEL):
            raise ModelArgsError(
                f"{type(self).__name__} always loads model={self.MODEL!r}; use --model latent for {model!r}"
            )
        if (self.MODEL or model) is None:
            raise ModelArgsError(
                f"--model latent needs model_args model=<one of {sorted(MODELS)} or package.module:Class>"
            )
        return self.MODEL or str(model)

    def _setup_device(self, device, dtype) -> None:
        """Device and dtype; under ``accelerate launch`` / torchrun also the rank, world size and the rank's GPU."""
        self._device = resolve_device(device)
        self._state = distributed_state(self._device)
        if self._state is not None:  # lm-eval shards documents by rank; seeds depend on documents only
            self._rank, self._world_size = self._state.process_index, self._state.num_processes
            if self._device.type == "cuda":
                self._device = self._state.device
        self._dtype = parse_dtype(dtype)

    # ---- provenance -------------------------------------------------------------------------------------------

    def get_model_info(self) -> dict:
        """Model identity and estimator settings; lm-eval merges this into results["config"].

        Besides our keys, the ones lm-eval's ``hf`` backend fills for leaderboards: ``model_name`` (``pretrained`` as
        given, else the bundled checkpoint's package path), ``model_sha`` (sha256 of the checkpoint's files: we
        hash content, the Hub commit is ``model_revision`` when the checkpoint came from the Hub cache),
        ``model_dtype`` (as ``hf`` writes it, e.g. ``torch.float32``) and ``model_num_parameters`` (p and q).
        """
        cls = type(self.model)
        dtype = self._dtype or parameter_dtype(self.model)
        info = {
            "model_name": self.pretrained or package_path(self.checkpoint),
            "model_sha": self.checkpoint_sha256,
            "model_revision": hub_revision(self.checkpoint),
            "model_dtype": str(dtype),
            "model_num_parameters": num_parameters(self.model),
            "latent_model": model_target(self.model_name),
            "latent_model_class": f"{cls.__module__}:{cls.__qualname__}",
            "checkpoint": str(self.checkpoint),
            "checkpoint_sha256": self.checkpoint_sha256,
            "estimator_settings": recorded_settings(self.settings, self._device),
            "estimator_choice": self.estimator_choice,  # why this estimator (auto picks one per model)
            "device_type": self._device.type,  # random streams and float rounding differ between cpu and cuda
            "dtype": str(dtype).removeprefix("torch."),
            "lm_latent_eval_version": __version__,
        }
        if (
            root := import_root(cls)
        ) is not None:  # the model's code is importable only with it on PYTHONPATH
            info["model_pythonpath"] = root
        if hasattr(
            self.model, "count_eos"
        ):  # sentence-level models: is the end-of-sentence token scored and counted?
            info["count_eos"] = bool(self.model.count_eos)
        options = {
            a.name: self.model_kwargs[a.name]
            for a in self.model_options
            if a.name in self.model_kwargs and a.name not in NAMING_MODEL_ARGS
        }
        if options:  # the model's own options given in model_args (an LDA's alpha, unknown_words, ...) can change a number
            info["model_options"] = {k: (str(v) if isinstance(v, Path) else v) for k, v in options.items()}
        graphs = getattr(
            self.model, "cuda_graphs", None
        )  # KGLM, EntityNLM: the sampler's step in a CUDA graph
        if graphs is not None:
            info["cuda_graphs_requested"] = graphs
            if graphs_in_effect(graphs, self._device):  # may round differently: joins the results store's key
                info["cuda_graphs"] = True
        if any(a.kind is Path for a in self.model_options):  # the model's own files join its identity
            info["model_files_sha256"] = {
                a.name: checkpoint_hash(self.model_kwargs[a.name])
                for a in self.model_options
                if a.kind is Path and a.name in self.model_kwargs
            }
        return info

    def set_cache_hook(self, cache_hook) -> None:
        """Refuse an lm-eval ``--use_cache`` database filled by a different model, checkpoint or estimator; keep every
        document's estimate in it too, for the perplexity tasks of a rerun that the cache answers."""
        dbdict = getattr(cache_hook, "dbdict", None)
        if dbdict is not None:
            mine = json.dumps(self.get_model_info(), sort_keys=True)
            theirs = dbdict.get(_CACHE_FINGERPRINT_KEY)
            if theirs is not None and theirs != mine:
                raise InputError(
                    "--use_cache database was written by a different latent model or estimator (lm-eval keys its "
                    f"cache by request text only): cached {theirs}, now {mine}. Use a separate cache file."
                )
            dbdict[_CACHE_FINGERPRINT_KEY] = mine
            dbdict.commit()
            # a rerun answered from the cache still finds each document's samples there
            self._cache_db = dbdict
            rolling_estimates.keep_in(dbdict)
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

    def _estimate_all(
        self, texts: list[str], desc: str, disable_tqdm: bool, model=None
    ) -> dict[str, DocumentEstimate]:
        """One estimate per distinct text (seeded from (seed, text), so order and batching never matter), with the
        precision target's later stages where set; the results store, if any, is read before and written after every
        document's estimate. ``model``: another view of the model (a prefix view), whose estimates are not stored."""
        model = self.model if model is None else model
        store = self.results_store if model is self.model else None
        if store is not None:
            logger.info(
                "%s: %d of %d documents loaded from %s (results_dir), the rest estimated",
                desc,
                store.count_stored(texts),
                len(set(texts)),
                store.folder,
            )

        def estimate(text: str, settings, stage: int) -> DocumentEstimate:
            stored = None if store is None else store.get(text, stage)
            if stored is not None:
                return stored
            est = estimate_document(model, text, settings, device=self._device, stage=stage)
            if store is not None:  # saved as soon as it is done: an interrupted run loses one document
                store.put(est, stage)
            return est

        return estimate_corpus(
            model,
            texts,
            self.settings,
            self._device,
            estimate,
            self._all_reduce,
            progress=not disable_tqdm,
        )

    def _all_reduce(self, values: list[float]) -> list[float]:
        """Sums of ``values`` over the processes of a multi-process run (the precision target's corpus totals)."""
        if self.world_size <= 1:
            return values
        summed = torch.tensor(values, dtype=torch.float64, device=self._device)
        torch.distributed.all_reduce(summed)
        return summed.tolist()

    def _warn_if_unreliable(self, estimates) -> None:
        """Log one plain-words warning for a batch of estimates when no two-sided interval of them is honest."""
        tries = self.estimator.advice(self.settings, self.model)
        message = reliability_warning(list(estimates), tries)
        if message is not None:
            logger.warning("%s: %s", type(self).__name__, message)

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        """log p̂(x) of each document (0.0 for a document without tokens, with a warning naming it)."""
        texts = [req.args[0] for req in requests]
        estimates = self._estimate_all(texts, "log p(x)", disable_tqdm)
        self._warn_if_unreliable(estimates.values())
        rolling_estimates.record(estimates, self._cache_db)
        for text, est in estimates.items():
            if est.num_tokens == 0:
                what = f"document {text[:60]!r}" if text.strip() else f"an empty document ({text!r})"
                warnings.warn(f"{what} has no tokens: log p = 0.0 over 0 tokens", stacklevel=2)
        return [estimates[text].log_likelihood for text in texts]

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        """log p̂(context ⊕ continuation) − log p̂(context), one context estimate per distinct context; only from a
        prefix probability: the model's own log_joint, or its ``prefix_model()`` (the RNNG's), refused otherwise
        (``protocol.prefix_view``)."""
        model = self._require_prefix_probability()
        pairs = [req.args for req in requests]
        self._check_prefix_tokenization(pairs, model)
        texts = [ctx for ctx, _ in pairs] + [ctx + cont for ctx, cont in pairs]
        estimates = self._estimate_all(
            texts, f"{self.settings.estimator} log p(context, continuation)", disable_tqdm, model
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
        values = {
            (ctx, cont): (
                estimates[ctx + cont].log_likelihood - estimates[ctx].log_likelihood,
                estimates[ctx + cont].num_tokens - estimates[ctx].num_tokens,
            )
            for ctx, cont in pairs
        }
        rolling_estimates.record_conditionals(values)  # completion tasks count the continuation's tokens
        return [(values[pair][0], False) for pair in pairs]

    def _require_prefix_probability(self):
        """The model (or its prefix view) that loglikelihood estimates from; a clear error before any work when
        log p(context ⊕ continuation) − log p(context) would not be the probability of the continuation given the
        context."""
        view = prefix_view(self.model)
        if view is not None:
            return view
        declared, name = is_prefix_probability(self.model), type(self.model).__name__
        what = (
            "it scores complete texts (for example whole trees or an end-of-sentence event), so log p(context ⊕ "
            "continuation) − log p(context) is not the probability of the continuation given the context"
            if declared is False
            else "it does not declare whether log_joint is a prefix probability; set the "
            "class attribute prefix_probability = True if Σ_z p(x, z) is the probability that a text starts with x"
        )
        raise InputError(
            f"{name}: loglikelihood requests (multiple-choice and completion tasks) are refused: {what}. "
            "Perplexity tasks (loglikelihood_rolling) are unaffected."
        )

    def _check_prefix_tokenization(self, pairs, model) -> None:
        """Warn when tokens(context) is not a prefix of tokens(context ⊕ continuation): no longer a conditional."""
        for ctx, cont in dict.fromkeys(pairs):
            x_ctx, x_full = model.tokenize(ctx), model.tokenize(ctx + cont)
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
            raise NoTextSampler(
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


@register_model("latent_tokenization")
class LatentTokenizationEval(LatentLMEval):
    """``--model latent_tokenization``: any Hugging Face causal LM (byte-level BPE) as a latent LM over its
    tokenizations (lm_latent_eval/models/tokenization; default: the bundled tiny GPT-2).

    ``estimator=canonical`` reproduces lm-eval's ``hf`` backend (one tokenization, same windows, same numbers);
    ``is``, ``beam`` and ``exact`` (enumeration, short texts only) marginalize over segmentations. ``loglikelihood``
    = log p̂(context ⊕ continuation spelled, ending at a token boundary) − log p̂(the text starts with context), the
    context's trailing whitespace moved to the continuation as hf does. The model's own options (``canonical_mix``,
    ``particle_batch``, ``max_length``) are its ``MODEL_ARGS``.
    """

    MODEL = "tokenization"

    def __init__(self, **model_args) -> None:
        self.canonical = model_args.get("estimator") == "canonical"
        if self.canonical:
            model_args["estimator"] = "exact"
        super().__init__(**model_args)
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
        if not self.canonical and isinstance(self.estimator, ImportanceSampling):
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
        for (
            context,
            continuation,
        ) in pairs:  # hf's convention: trailing whitespace belongs to the continuation
            spaces = len(context) - len(context.rstrip())
            moved.append((context[: len(context) - spaces], context[len(context) - spaces :] + continuation))
        desc = f"{self.settings.estimator} log p(context, continuation)"
        joint = self._estimate_all([c + k for c, k in moved], desc, disable_tqdm)
        contexts = {}
        for context in tqdm(list(dict.fromkeys(c for c, _ in moved)), desc=f"{self.settings.estimator} log P(starts "
                            "with context)", disable=disable_tqdm):  # fmt: skip
            contexts[context] = estimate_document(
                self._context_model, context, self.settings, device=self._device
            )
        self._warn_if_unreliable([*joint.values(), *contexts.values()])
        if not self._warned_greedy:
            warnings.warn(
                "latent_tokenization: is_greedy is only computed by estimator=canonical (False here)",
                stacklevel=2,
            )
            self._warned_greedy = True
        return [(joint[c + k].log_likelihood - contexts[c].log_likelihood, False) for c, k in moved]


def _model_backend(name: str, class_name: str) -> type[LatentLMEval]:
    """The ``--model latent_<name>`` backend: LatentLMEval with the model fixed (registered with lm-eval)."""
    doc = f"``--model latent_{name}``: {model_target(name)} (bundled checkpoint unless ``pretrained=``)."
    cls = type(class_name, (LatentLMEval,), {"MODEL": name, "__doc__": doc, "__module__": __name__})
    return register_model(f"latent_{name}")(cls)


for _name, _entry in MODELS.items():  # one backend class per row of the model table that names one
    if _entry.backend is not None and _entry.backend not in globals():
        globals()[_entry.backend] = _model_backend(_name, _entry.backend)
LatentLMEval.__doc__ = LatentLMEval.__doc__.rstrip() + "\n" + accepted_args_doc() + "\n"
