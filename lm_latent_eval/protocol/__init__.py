"""The one contract every latent LM implements: text x, hidden structure z, joint p(x, z), proposal q(z | x).

One module per job, every public name importable from here (``from lm_latent_eval.protocol import LatentLM``):

- ``contract.py``: the types a model implements (``LatentLM``: ``tokenize``, ``log_joint``, ``proposal``; the
  proposal's ``Proposal.sample`` and optional ``BeamProposal.beam``; the optional stepwise part for SMC,
  ``StepwiseLatentLM``, and beside it ``DocumentBatchLM``: several documents' particles side by side) and the other optional methods (``ExactMarginalLM.log_marginal`` and its cost per text, ``exact_marginal_cost``,
  ``TextSamplerLM.sample_text``, ``PrefixModelLM.prefix_model``, ``UnknownWordPenaltyLM.unknown_word_penalty``,
  ``CanonicalScoringLM.canonical_log_likelihood``), the
  shapes and the declarations (``prefix_probability``, ``latent_support``, ``tempers``).
- ``checked.py``: the bases of the bundled models (``CheckedSampler``, ``CheckedProposal``, ``CheckedStepwise``),
  whose public methods check their arguments once and hand over to the model's ``_sample``, ``_beam``, ``_smc_init``.
- ``capabilities.py``: the parts of the contract as one table (``PARTS``): whether a model has one
  (``has(model, "stepwise")``) and what it lacks (``missing``); what it declares (``is_prefix_probability``,
  ``prefix_view``, ``latent_support``, ``check_tempering``, ``smc_interval_doubt``).
- ``particles.py``: the particle dimension of z, the one thing the estimators know about it (``num_particles``,
  ``select_particles``, ``enumerated_log_marginal``).
- the argument rules (``check_num_samples``, ``check_temperature``, ``check_text``, ``check_proposal_args``,
  ``check_beam_args``) live in the leaf ``lm_latent_eval.checks`` and are re-exported here.

Helpers that moved out (``distinct_rows``, ``row_keys``, ``pad_rows``: now ``lm_latent_eval.tensors``) stay
importable from here for a release, with a DeprecationWarning naming their new module (``MOVED``).
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from ..checks import check_beam_args, check_num_samples, check_proposal_args, check_temperature, check_text
from .capabilities import (
    LATENT_SUPPORTS,
    PARTS,
    check_tempering,
    exact_marginal_cost,
    has,
    is_prefix_probability,
    latent_support,
    missing,
    missing_beam,
    prefix_view,
    require_beam,
    smc_interval_doubt,
)
from .checked import CheckedProposal, CheckedSampler, CheckedStepwise
from .contract import (
    DOCUMENT_BATCH_METHODS,
    SMC_METHODS,
    BeamProposal,
    CanonicalScoringLM,
    DocumentBatchLM,
    DocumentBeam,
    DocumentSampler,
    ExactMarginalLM,
    LatentLM,
    Latents,
    PrefixModelLM,
    Proposal,
    StepwiseLatentLM,
    TextSamplerLM,
    UnknownWordPenaltyLM,
)
from .particles import enumerated_log_marginal, num_particles, select_particles

__all__ = [
    "DOCUMENT_BATCH_METHODS",
    "LATENT_SUPPORTS",
    "PARTS",
    "SMC_METHODS",
    "BeamProposal",
    "CanonicalScoringLM",
    "CheckedProposal",
    "CheckedSampler",
    "CheckedStepwise",
    "DocumentBatchLM",
    "DocumentBeam",
    "DocumentSampler",
    "ExactMarginalLM",
    "LatentLM",
    "Latents",
    "PrefixModelLM",
    "Proposal",
    "StepwiseLatentLM",
    "TextSamplerLM",
    "UnknownWordPenaltyLM",
    "check_beam_args",
    "check_num_samples",
    "check_proposal_args",
    "check_temperature",
    "check_tempering",
    "check_text",
    "enumerated_log_marginal",
    "exact_marginal_cost",
    "has",
    "is_prefix_probability",
    "latent_support",
    "missing",
    "missing_beam",
    "num_particles",
    "prefix_view",
    "require_beam",
    "select_particles",
    "smc_interval_doubt",
]

# helpers an adapter may use, kept importable from here for a release after they moved: name -> their module
MOVED = {
    "distinct_rows": "lm_latent_eval.tensors",
    "row_keys": "lm_latent_eval.tensors",
    "pad_rows": "lm_latent_eval.tensors",
}


def __getattr__(name: str) -> Any:
    """``from lm_latent_eval.protocol import distinct_rows`` keeps working, with a DeprecationWarning naming the new
    module (``lm_latent_eval.tensors``), for one release after the helper moved."""
    if name not in MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"lm_latent_eval.protocol.{name} moved to {MOVED[name]}.{name}; import it from there (the old path goes "
        "away in the next release)",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module(MOVED[name]), name)
