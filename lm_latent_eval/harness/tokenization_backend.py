"""``--model latent_tokenization``: any Hugging Face causal LM (byte-level BPE) as a latent LM over its tokenizations
(lm_latent_eval/models/tokenization; default: the bundled tiny GPT-2).

It answers requests its own way: ``estimator=canonical`` reproduces lm-eval's ``hf`` backend (one tokenization, the
same windows, the same numbers), and its ``loglikelihood`` follows hf's whitespace convention.
"""

from __future__ import annotations

import warnings

from tqdm import tqdm

from ..models.tokenization import canonical
from .backends import LatentLMEval
from .conditionals import GreedyNotice
from .threads import torch_threads


def hf_whitespace(context: str, continuation: str) -> tuple[str, str]:
    """hf's convention: the context's trailing whitespace belongs to the continuation.

    Examples
    --------
    >>> hf_whitespace("The cat ", "sat")
    ('The cat', ' sat')
    """
    spaces = len(context) - len(context.rstrip())
    return context[: len(context) - spaces], context[len(context) - spaces :] + continuation


class LatentTokenizationEval(LatentLMEval):
    """``--model latent_tokenization``: a causal LM marginalized over the segmentations of each text.

    ``estimator=canonical`` reproduces lm-eval's ``hf`` backend; ``is``, ``beam`` and ``exact`` (enumeration, short
    texts only) marginalize over segmentations. ``loglikelihood`` = log p̂(context ⊕ continuation spelled, ending at
    a token boundary) − log p̂(the text starts with context), the context's trailing whitespace moved to the
    continuation as hf does. The model's own options (``canonical_mix``, ``particle_batch``, ``max_length``) are its
    ``MODEL_ARGS``.
    """

    MODEL = "tokenization"

    def __init__(self, **model_args) -> None:
        self.canonical = model_args.get("estimator") == "canonical"
        if self.canonical:  # lm-eval's hf backend (one forward pass per window), run as the exact estimator
            model_args["estimator"] = "exact"
            self.requested_estimator = "canonical"
        super().__init__(**model_args)
        self._context_model = self.model.with_cover_end()
        self.greedy = GreedyNotice(
            "latent_tokenization: is_greedy is only computed by estimator=canonical (False here)"
        )
        if self.canonical and self.results_store is not None:
            warnings.warn(
                "results_dir is not used by estimator=canonical (one forward pass per window, nothing to resume)",
                stacklevel=2,
            )

    def get_model_info(self) -> dict:
        """The base provenance, with estimator ``canonical`` and the model settings that can change a number."""
        info = super().get_model_info()
        if self.canonical:
            info["estimator_settings"] = {"estimator": "canonical"}
        info["max_length"] = self.model.max_length
        if not self.canonical and self.estimator.estimator.draws_from_proposal:
            info["estimator_settings"]["canonical_mix"] = self.model.canonical_mix
        return info

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        """log p̂(x) of each document; canonical: hf's rolling windows over the tokenizer's segmentation."""
        if not self.canonical:
            return super().loglikelihood_rolling(requests, disable_tqdm)
        return canonical.loglikelihood_rolling(self.model, [req.args[0] for req in requests])

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        """canonical: hf's (log p(continuation tokens | context tokens), greedy); else the marginal conditional."""
        pairs = [req.args for req in requests]
        if self.canonical:
            return canonical.loglikelihood(self.model, pairs)
        moved = [hf_whitespace(context, continuation) for context, continuation in pairs]
        desc = f"{self.settings.estimator} log p(context, continuation)"
        joint = self.batches.estimate(
            [c + k for c, k in moved], self.estimator, desc, not disable_tqdm, check=False
        )
        contexts = {}
        desc = f"{self.settings.estimator} log P(starts with context)"
        on_contexts = self.estimator.on(self._context_model)
        with torch_threads(self.batches.cores.threads):
            for context in tqdm(list(dict.fromkeys(c for c, _ in moved)), desc=desc, disable=disable_tqdm):
                contexts[context] = on_contexts.estimate(context, device=self._device)
        # one warning about every pair, held under several processes until lm-eval's gather (as the documents)
        checked = {
            **{("joint", t): e for t, e in joint.items()},
            **{("context", c): e for c, e in contexts.items()},
        }
        self.batches.check("log p(continuation | context)", self.settings, checked)
        self.greedy.warn()
        return [(joint[c + k].log_likelihood - contexts[c].log_likelihood, False) for c, k in moved]
