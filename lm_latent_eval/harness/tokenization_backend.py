"""``--model latent_tokenization``: any Hugging Face causal LM (byte-level BPE) as a latent LM over its tokenizations
(lm_latent_eval/models/tokenization; default: the bundled tiny GPT-2).

It answers requests its own way: its ``loglikelihood`` follows hf's whitespace convention, and under
``estimator=canonical`` (the tokenizer's one segmentation, ``estimators.canonical``) reproduces lm-eval's ``hf``
backend (the same windows, the same numbers, ``is_greedy``).
"""

from __future__ import annotations

from tqdm import tqdm

from ..estimators import ESTIMATORS
from .backends import LatentLMEval
from .conditionals import GreedyNotice


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
        super().__init__(**model_args)
        self._context_model = self.model.with_cover_end()
        own = " or ".join(e.name for e in ESTIMATORS.values() if e.conditionals(self.model, []) is not None)
        notice = f"latent_tokenization: is_greedy is only computed by estimator={own} (False here)"
        self.greedy = GreedyNotice(notice)

    def model_identity(self) -> dict:
        """The base provenance, with the model settings that can change a number."""
        info = super().model_identity()
        info["max_length"] = self.model.max_length
        if self.run.estimator.draws_from_proposal:
            info["estimator_settings"]["canonical_mix"] = self.model.canonical_mix
        return info

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        """hf's (log p(continuation tokens | context tokens), greedy) where the estimator scores continuations its own
        way (``canonical``); else the marginal conditional."""
        pairs = [req.args for req in requests]
        own = self.run.estimator.conditionals(self.model, pairs)
        if own is not None:
            return own
        moved = [hf_whitespace(context, continuation) for context, continuation in pairs]
        desc = f"{self.settings.estimator} log p(context, continuation)"
        joint = self.batches.estimate(
            [c + k for c, k in moved], self.run, desc, not disable_tqdm, check=False
        )
        contexts = {}
        desc = f"{self.settings.estimator} log P(starts with context)"
        on_contexts = self.run.on(self._context_model)
        with self.batches.computing():
            for context in tqdm(list(dict.fromkeys(c for c, _ in moved)), desc=desc, disable=disable_tqdm):
                contexts[context] = on_contexts.estimate(context, device=self._device)
        # one warning about every pair, held under several processes until lm-eval's gather (as the documents)
        checked = {
            **{("joint", t): e for t, e in joint.items()},
            **{("context", c): e for c, e in contexts.items()},
        }
        self.batches.check("log p(continuation | context)", self.run, checked)
        self.greedy.warn()
        return [(joint[c + k].log_likelihood - contexts[c].log_likelihood, False) for c, k in moved]
