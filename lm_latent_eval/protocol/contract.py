"""The contract's types: text x, hidden structure z, joint p(x, z), proposal q(z | x), and the optional stepwise part.

Shapes: ``x`` is a ``LongTensor[T]`` of the model's own token ids; ``log_joint`` and ``log_q`` are ``[K]``; a latent
configuration ``z`` is a tensor, or a (nested) tuple/list/dict of tensors, whose leading dimension is the particle
dimension ``K`` (``Latents``; ``particles.py`` slices it).
A model declares whether ``log_joint(x, z)`` is the log probability of the *prefix* x_1..x_T together with z (no
end-of-text event; ``prefix_probability = True``): then Σ_z p(x, z) is the probability that a text starts with x and
log p(context ⊕ continuation) − log p(context) is the log probability of the continuation given the context. A model
that scores complete texts (an RNNG scores whole trees, often with an end-of-sentence event) declares False, and
``loglikelihood(context, continuation)`` is refused for it rather than silently wrong, unless it offers
``prefix_model()``: a view of itself whose ``log_joint`` is a prefix probability (the RNNG's stops at the last SHIFT),
from which ``loglikelihood`` is then answered.

The proposal's ``sample`` is required; its ``beam(x, k)`` is not (``BeamProposal``): a model whose latent is discrete
offers a beam over configurations, a model whose latent is continuous (a text VAE's Gaussian z) declares
``latent_support = "continuous"`` and has none. Temperature: ``sample(..., temperature=τ)`` draws from
q_τ(z | x) ∝ q(z | x)^{1/τ} and returns log q_τ; a proposal over a discrete latent tempers by dividing every logit by
τ, a Gaussian N(μ, σ²) by drawing from N(μ, τσ²), and a proposal that cannot temper declares ``tempers = False`` and
refuses τ ≠ 1 (``capabilities.check_tempering``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import torch

Latents = Any  # tensor or nested tuple/list/dict of tensors with leading dimension K


@runtime_checkable
class Proposal(Protocol):
    """q(z | x): samples latent configurations for a fixed text and scores them (the required part).

    Tempering: ``sample(..., temperature=τ)`` draws from q_τ(z | x) ∝ q(z | x)^{1/τ} and returns log q_τ, the log
    probability (a density for a continuous z) under the distribution actually sampled. A proposal over a discrete
    latent divides every logit by τ; a Gaussian N(μ, σ²) draws from N(μ, τσ²), its q^{1/τ} normalized. A proposal
    that cannot temper declares the class attribute ``tempers = False`` and refuses τ ≠ 1 (``check_tempering``);
    without the attribute it is taken to temper.
    """

    def sample(
        self,
        x: torch.Tensor,
        num_samples: int,
        temperature: float = 1.0,
        peek: bool = True,
        generator: torch.Generator | None = None,
    ) -> tuple[Latents, torch.Tensor]:
        """Draw K configurations z_k ~ q_τ(z | x) and score them under the tempered q.

        Parameters
        ----------
        x : torch.Tensor
            The text, LongTensor [T] of the model's ids (T = 0 allowed).
        num_samples : int
            K > 0.
        temperature : float
            τ > 0: draw from q_τ(z | x) ∝ q(z | x)^{1/τ}.
        peek : bool
            Whether q(z_t | ·) may read the tokens after t (False: a left-to-right proposal, where offered).
        generator : torch.Generator, optional
            The random stream (on the model's device).

        Returns
        -------
        tuple of Latents and torch.Tensor
            z, K configurations [K, ...] in ``log_joint``'s format, and log q_τ(z_k | x), float64 [K].

        Examples
        --------
        >>> from lm_latent_eval.models import load_model
        >>> hmm, _ = load_model("hmm")
        >>> x = hmm.tokenize("the cat sat")
        >>> z, log_q = hmm.proposal.sample(x, 4, generator=torch.Generator().manual_seed(0))
        >>> z.shape, log_q.shape, log_q.dtype
        (torch.Size([4, 3]), torch.Size([4]), torch.float64)
        """
        ...


@runtime_checkable
class BeamProposal(Proposal, Protocol):
    """A proposal over a discrete latent that also lists its best configurations (optional: the part ``"beam_proposal"``)."""

    def beam(self, x: torch.Tensor, beam_size: int) -> Latents:
        """The configurations of highest q(z | x) (peeking, τ = 1), best first.

        Parameters
        ----------
        x : torch.Tensor
            The text, LongTensor [T].
        beam_size : int
            k > 0.

        Returns
        -------
        Latents
            Up to k *distinct* configurations, [k', ...] with k' ≤ k (fewer where the support is smaller).

        Examples
        --------
        >>> from lm_latent_eval.models import load_model
        >>> hmm, _ = load_model("hmm")
        >>> hmm.proposal.beam(hmm.tokenize("the cat sat"), 3).shape
        torch.Size([3, 3])
        """
        ...


@runtime_checkable
class LatentLM(Protocol):
    """A language model with hidden structure: p(x) = Σ_z p(x, z) (∫ p(x, z) dz for a continuous z).

    Declared as class attributes: ``prefix_probability`` (below) and, optionally, ``latent_support``: "discrete"
    (the default when absent) or "continuous" (z real-valued, p(x, z) a density in z: no beam, ``missing_beam``).
    """

    proposal: Proposal

    def tokenize(self, text: str) -> torch.Tensor:
        """The model's token ids of any string.

        Parameters
        ----------
        text : str
            Any string, empty and unknown words included.

        Returns
        -------
        torch.Tensor
            LongTensor [T] of the model's ids; T = 0 for a text without tokens.

        Examples
        --------
        >>> from lm_latent_eval.models import load_model
        >>> hmm, _ = load_model("hmm")
        >>> hmm.tokenize("the cat sat"), hmm.tokenize("")
        (tensor([2, 7, 0]), tensor([], dtype=torch.int64))
        """
        ...

    def log_joint(self, x: torch.Tensor, z: Latents) -> torch.Tensor:
        """log p(x, z_k) for each of K configurations of one text.

        Parameters
        ----------
        x : torch.Tensor
            The text, LongTensor [T].
        z : Latents
            K configurations [K, ...] (as ``proposal.sample`` returns them).

        Returns
        -------
        torch.Tensor
            float64 [K]: log p(x, z_k) (a log density in z for a continuous latent); −inf where p(x, z_k) = 0.

        Examples
        --------
        >>> from lm_latent_eval.models import load_model
        >>> hmm, _ = load_model("hmm")
        >>> x = hmm.tokenize("the cat sat")
        >>> log_p = hmm.log_joint(x, hmm.proposal.beam(x, 3))
        >>> log_p.shape, log_p.dtype, bool((log_p < 0).all())
        (torch.Size([3]), torch.float64, True)
        """
        ...

    # declared (class attribute): whether Σ_z p(x, z) is the probability that a text starts with x
    prefix_probability: bool


SMC_METHODS = ("smc_init", "smc_step", "smc_reorder", "smc_latents")
# the optional side-by-side part beside them (DocumentBatchLM)
DOCUMENT_BATCH_METHODS = ("smc_init_documents", "smc_step_documents")


@runtime_checkable
class StepwiseLatentLM(Protocol):
    """Optional part for sequential Monte Carlo: advance K particles one token at a time, reorder after resampling.

    For t = 0..T-1, ``smc_step`` draws z_t ~ q_τ(z_t | x, z_<t) for every particle and returns the log incremental
    weight log p(x_t, z_t | x_<t, z_<t) − log q_τ(z_t | x, z_<t); the T increments of one particle sum to
    log p(x, z) − log q_τ(z | x) of the configuration z = ``smc_latents(state)`` it drew, in ``log_joint``'s format.
    A model may add a telescoping look-ahead term log ψ_t(z_≤t) − log ψ_{t−1}(z_<t) to each increment (ψ_{−1}
    constant, ψ_{T−1} = 1, as the HMM does when peeking): the sum, hence the estimate's expectation, is unchanged,
    and the weights after token t then target p(x_≤t, z_≤t) ψ_t (twisted SMC).
    ``smc_reorder(state, ancestors)`` makes particle k continue the history of particle ``ancestors[k]``
    (a CPU LongTensor [K]). The state is opaque to the estimator. z_t may be several latent decisions: the RNNG's
    step t draws the REDUCEs before word t and shifts it (word-synchronous), ``latent_tokenization``'s draws model
    tokens until every particle has spelled the bytes of canonical tokens 0..t (byte-synchronous); the estimator
    compares and may resample the particles after any step.

    A model may also state where its SMC's interval is not to be printed, ``smc_interval_doubt(x, settings) -> str |
    None``: why runs with these settings (``EstimatorSettings``: the proposal, the resampling threshold) over x have
    no interval whose coverage was measured, decided from x's length and the settings alone, before anything is drawn
    (``capabilities.smc_interval_doubt``). The document's statement is then its certified bound, whatever its runs
    show, and more samples do not lift the doubt (the masked LMs' resampled SMC beyond the lengths measured): a
    precision target is not pursued for a corpus holding such a document (``estimators.adaptive``)."""

    def smc_init(
        self, x: torch.Tensor, num_particles: int, temperature: float = 1.0, peek: bool = True
    ) -> Any:
        """K particles with empty histories for the text x.

        Parameters
        ----------
        x : torch.Tensor
            The text, LongTensor [T].
        num_particles : int
            K > 0.
        temperature : float
            τ > 0 of the stepwise proposal q_τ(z_t | x, z_<t).
        peek : bool
            Whether q(z_t | ·) may read the tokens after t.

        Returns
        -------
        Any
            The particles' state, opaque to the estimator (consumed by ``smc_step``).

        Examples
        --------
        >>> from lm_latent_eval.models import load_model
        >>> hmm, _ = load_model("hmm")
        >>> state = hmm.smc_init(hmm.tokenize("the cat sat"), 4)
        >>> hmm.smc_latents(state).shape  # nothing drawn yet
        torch.Size([4, 0])
        """
        ...

    def smc_step(self, state: Any, t: int, generator: torch.Generator | None) -> tuple[Any, torch.Tensor]:
        """Draw z_t ~ q_τ(z_t | x, z_<t) for every particle and weight it.

        Parameters
        ----------
        state : Any
            The particles after tokens 0..t−1 (a step may consume it).
        t : int
            The token to advance through, 0..T−1 in order.
        generator : torch.Generator or None
            The random stream.

        Returns
        -------
        tuple of Any and torch.Tensor
            The state after token t, and log p(x_t, z_t | x_<t, z_<t) − log q_τ(z_t | x, z_<t), float64 [K].

        Examples
        --------
        >>> from lm_latent_eval.models import load_model
        >>> hmm, _ = load_model("hmm")
        >>> state = hmm.smc_init(hmm.tokenize("the cat sat"), 4)
        >>> state, log_w = hmm.smc_step(state, 0, torch.Generator().manual_seed(0))
        >>> log_w.shape, log_w.dtype, hmm.smc_latents(state).shape
        (torch.Size([4]), torch.float64, torch.Size([4, 1]))
        """
        ...

    def smc_reorder(self, state: Any, ancestors: torch.Tensor) -> Any:
        """The particles after resampling: particle k continues the history of particle ``ancestors[k]``.

        Parameters
        ----------
        state : Any
            The particles.
        ancestors : torch.Tensor
            CPU LongTensor [K] of indices into the particles (repeats allowed).

        Returns
        -------
        Any
            The reordered state (a step may reuse or consume ``state``).

        Examples
        --------
        >>> from lm_latent_eval.models import load_model
        >>> hmm, _ = load_model("hmm")
        >>> x = hmm.tokenize("the cat sat")
        >>> state, _ = hmm.smc_step(hmm.smc_init(x, 4), 0, torch.Generator().manual_seed(0))
        >>> before, ancestors = hmm.smc_latents(state).clone(), torch.tensor([3, 3, 0, 1])
        >>> torch.equal(hmm.smc_latents(hmm.smc_reorder(state, ancestors)), before[ancestors])
        True
        """
        ...

    def smc_latents(self, state: Any) -> Latents:
        """The configurations drawn so far.

        Parameters
        ----------
        state : Any
            The particles after tokens 0..t−1.

        Returns
        -------
        Latents
            z_<t of every particle, [K, ...]; once t = T, in the format ``log_joint`` accepts.

        Examples
        --------
        >>> from lm_latent_eval.models import load_model
        >>> hmm, _ = load_model("hmm")
        >>> x = hmm.tokenize("the cat sat")
        >>> state, generator = hmm.smc_init(x, 4), torch.Generator().manual_seed(0)
        >>> for t in range(x.numel()):
        ...     state, _ = hmm.smc_step(state, t, generator)
        >>> hmm.log_joint(x, hmm.smc_latents(state)).shape
        torch.Size([4])
        """
        ...


@runtime_checkable
class DocumentBatchLM(Protocol):
    """Optional beside the stepwise part: the particles of several documents advanced side by side, one step for
    all of them (``"document_batches"``), so that a step's kernel launches and host synchronisations are shared
    by the documents instead of paid by each.

    The particles of document d are the d-th consecutive segment (``num_particles[d]`` of them) of the batch's
    state. At step t every document with t < T_d draws its z_t exactly as ``smc_step`` would for it alone, from
    its own random stream ``generators[d]`` (the same draws, in the same order), and nothing is drawn for a
    document that has ended (T_d ≤ t), whose particles' increments the estimator ignores. So a document's weights do
    not depend on which documents share its batch (bit for bit, or to the float32 rounding of a batched product).
    Resampling reorders the batch with the stepwise part's ``smc_reorder`` (global indices, each document's
    ancestors within its own segment).
    """

    def smc_init_documents(
        self,
        xs: Sequence[torch.Tensor],
        num_particles: Sequence[int],
        temperature: float = 1.0,
        peek: bool = True,
    ) -> Any | None:
        """The empty particles of several documents in one state, or None where the model advances these documents
        one at a time (their tables would not share a step within the model's limits).

        Parameters
        ----------
        xs : sequence of torch.Tensor
            The documents' texts, LongTensor [T_d] each, T_d > 0.
        num_particles : sequence of int
            K_d > 0 particles per document.
        temperature : float
            τ > 0 of the stepwise proposal.
        peek : bool
            Whether q(z_t | ·) may read the tokens after t.

        Returns
        -------
        Any or None
            The batch's state (consumed by ``smc_step_documents`` and ``smc_reorder``), or None.

        Examples
        --------
        >>> from lm_latent_eval.models import load_model
        >>> hmm, _ = load_model("hmm")
        >>> xs = [hmm.tokenize("the cat sat"), hmm.tokenize("a dog")]
        >>> state = hmm.smc_init_documents(xs, [4, 2])
        >>> state is not None
        True
        """
        ...

    def smc_step_documents(
        self, state: Any, t: int, generators: Sequence[torch.Generator | None]
    ) -> tuple[Any, torch.Tensor]:
        """Step t of every document of the batch with t < T_d.

        Parameters
        ----------
        state : Any
            The batch after tokens 0..t−1 (a step may consume it).
        t : int
            The token to advance through, 0..max T_d − 1 in order.
        generators : sequence of torch.Generator or None
            Each document's random stream.

        Returns
        -------
        tuple of Any and torch.Tensor
            The state after step t, and the increments float64 [Σ K_d]: ``smc_step``'s for the documents with
            t < T_d, anything finite for the others (ignored).

        Examples
        --------
        >>> from lm_latent_eval.models import load_model
        >>> hmm, _ = load_model("hmm")
        >>> xs = [hmm.tokenize("the cat sat"), hmm.tokenize("a dog")]
        >>> gens = [torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)]
        >>> together = hmm.smc_step_documents(hmm.smc_init_documents(xs, [4, 2]), 0, gens)[1]
        >>> alone = hmm.smc_step(hmm.smc_init(xs[1], 2), 0, torch.Generator().manual_seed(2))[1]
        >>> torch.equal(together[4:], alone)
        True
        """
        ...


@runtime_checkable
class DocumentSampler(Protocol):
    """Optional on a proposal: ``sample`` of several documents side by side (``"document_sampler"``), so that
    importance sampling's draws share their kernel launches; each document's draws are those ``sample`` gives it
    alone with its generator."""

    def sample_documents(
        self,
        xs: Sequence[torch.Tensor],
        num_samples: Sequence[int],
        temperature: float = 1.0,
        peek: bool = True,
        generators: Sequence[torch.Generator | None] | None = None,
    ) -> list[tuple[Latents, torch.Tensor]] | None:
        """Per document (z, log q_τ(z | x)) as ``Proposal.sample`` returns them, or None where the proposal draws
        these documents one at a time.

        Parameters
        ----------
        xs : sequence of torch.Tensor
            The documents' texts, LongTensor [T_d] each, T_d > 0.
        num_samples : sequence of int
            K_d > 0 draws per document.
        temperature, peek
            As ``sample``'s.
        generators : sequence of torch.Generator or None
            Each document's random stream.

        Returns
        -------
        list of (Latents, torch.Tensor) or None

        Examples
        --------
        >>> from lm_latent_eval.models import load_model
        >>> kglm, _ = load_model("kglm")
        >>> xs = [kglm.tokenize("Barack Obama was born in Hawaii ."), kglm.tokenize("He was president .")]
        >>> gens = [torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)]
        >>> (z, log_q), _ = kglm.proposal.sample_documents(xs, [4, 3], generators=gens)
        >>> alone = kglm.proposal.sample(xs[0], 4, generator=torch.Generator().manual_seed(1))
        >>> torch.equal(z["entity"], alone[0]["entity"]), torch.equal(log_q, alone[1])
        (True, True)
        """
        ...


class DocumentBeam(Protocol):
    """Optional on a beam proposal: ``beam`` of several documents side by side (``"document_beam"``), so that their
    hypotheses share the network's passes; each document's configurations are those ``beam`` gives it alone."""

    def beam_documents(self, xs: Sequence[torch.Tensor], beam_size: int) -> list[Latents]:
        """Per document, what ``BeamProposal.beam`` returns for it.

        Parameters
        ----------
        xs : sequence of torch.Tensor
            The documents' texts, LongTensor [T_d] each.
        beam_size : int
            k > 0.

        Returns
        -------
        list of Latents

        Examples
        --------
        >>> from lm_latent_eval.models import load_model
        >>> lm, _ = load_model("tokenization")
        >>> xs = [lm.tokenize("the cat sat."), lm.tokenize("a dog ran.")]
        >>> together = lm.proposal.beam_documents(xs, 3)
        >>> torch.equal(together[1], lm.proposal.beam(xs[1], 3))
        True
        """
        ...


@runtime_checkable
class ExactMarginalLM(Protocol):
    """Optional: exact marginalization (``"exact_marginal"``; ``"tractable_marginal"`` where it is declared
    cheap on any text with ``exact_marginal_tractable = True``). A model whose program is cheap on some texts only may
    also state ``exact_marginal_cost(x) -> float``, its cost in samples (``capabilities.exact_marginal_cost``): the
    sampling estimators under ``auto`` then compute exactly the documents whose cost is at most their K."""

    def log_marginal(self, x: torch.Tensor) -> float:
        """log p(x) = log Σ_z p(x, z) (an integral for a continuous z), exactly.

        Parameters
        ----------
        x : torch.Tensor
            The text, LongTensor [T].

        Returns
        -------
        float
            log p(x) in float64; 0.0 for T = 0.

        Examples
        --------
        >>> from lm_latent_eval.models import load_model
        >>> hmm, _ = load_model("hmm")
        >>> round(hmm.log_marginal(hmm.tokenize("the cat sat")), 2), hmm.log_marginal(hmm.tokenize(""))
        (-15.7, 0.0)
        """
        ...


@runtime_checkable
class TextSamplerLM(Protocol):
    """Optional: ancestral sampling of a continuation, for lm-eval's ``generate_until`` (``"text_sampler"``)."""

    def sample_text(
        self,
        prefix_text: str,
        max_tokens: int,
        generator: torch.Generator | None = None,
        stop: list[str] | None = None,
    ) -> str:
        """A continuation of ``prefix_text`` drawn from p(· | prefix) at temperature 1.

        Parameters
        ----------
        prefix_text : str
            The context.
        max_tokens : int
            At most this many tokens of the model.
        generator : torch.Generator, optional
            The random stream.
        stop : list of str, optional
            Cut the continuation before the first of these strings.

        Returns
        -------
        str
            The continuation only (not the prefix).

        Examples
        --------
        >>> from lm_latent_eval.models import load_model
        >>> hmm, _ = load_model("hmm")
        >>> text = hmm.sample_text("the cat", 5, torch.Generator().manual_seed(0))
        >>> isinstance(text, str) and len(text.split()) <= 5
        True
        """
        ...


@runtime_checkable
class PrefixModelLM(Protocol):
    """Optional, for a model that scores complete texts (``prefix_probability = False``): a view of itself whose
    Σ_z p(x, z) is the probability that a text starts with x (``prefix_view``)."""

    def prefix_model(self) -> LatentLM:
        """The same network, trees and proposal, scoring prefixes.

        Returns
        -------
        LatentLM
            A model that declares ``prefix_probability = True``; ``loglikelihood(context, continuation)`` is
            answered from it.

        Examples
        --------
        >>> from lm_latent_eval.models import load_model
        >>> rnng, _ = load_model("rnng")
        >>> rnng.prefix_probability, rnng.prefix_model().prefix_probability
        (False, True)
        """
        ...


@runtime_checkable
class UnknownWordPenaltyLM(Protocol):
    """Optional: a ``log_joint`` that subtracts a penalty for unknown words, reported per configuration, so that
    perplexity with (UPP) and without it (PPL) come from one run (``"unknown_word_penalty"``; KGLM's)."""

    def unknown_word_penalty(self, x: torch.Tensor, z: Latents) -> torch.Tensor:
        """The nats ``log_joint`` subtracts for unknown words, per configuration.

        Parameters
        ----------
        x, z
            As ``LatentLM.log_joint``'s: the text [T] and K configurations [K, ...].

        Returns
        -------
        torch.Tensor
            float64 [K], ≥ 0; ``log_joint(x, z)`` + this is log p(x, z) without the penalty.
        """
        ...


@runtime_checkable
class CanonicalScoringLM(Protocol):
    """Optional: the one configuration z* the model's own tooling scores, scored as that tooling scores it
    (``"canonical_scoring"``; ``latent_tokenization``'s tokenizer segmentation, lm-eval's ``hf`` number), for
    ``estimator=canonical``: log p(x, z*) ≤ log p(x)."""

    def canonical_log_likelihood(self, text: str) -> float:
        """log p(x, z*) of the text under its canonical configuration.

        Parameters
        ----------
        text : str
            The document (any string; 0.0 for one without tokens).

        Returns
        -------
        float
            log p(x, z*), ≤ log p(x).
        """
        ...

    def canonical_conditionals(self, pairs: list[tuple[str, str]]) -> list[tuple[float, bool]]:
        """(log p(continuation | context), whether greedy decoding writes the continuation) per pair, as the
        tooling scores a continuation (hf: the continuation's tokens after the context's).

        Parameters
        ----------
        pairs : list of (str, str)
            (context, continuation) pairs.

        Returns
        -------
        list of (float, bool)
            One per pair, in order.
        """
        ...
