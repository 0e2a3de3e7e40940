"""The contract table: one row per latent LM, a tiny instance of it whose support can be listed or integrated.

A row names how to build the model, which texts to try, how to list every z with p(x, z) > 0 (the support),
how to compute log q_τ(z | x) and the exact log p(x) on it, and which parts of the contract apply (peek=false,
the stepwise part, a beam that is an exact k-best). A row with a continuous latent has no support to list: it
carries a quadrature instead (``integrate``), and its exact log p(x) and every sum over z become integrals.
``test_contract.py`` checks every property on every row; adding a model is adding a row here.
"""

from __future__ import annotations

import functools
import itertools
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import gaussian_tiny
import torch
from entitynlm_tiny import tiny_entitynlm
from hmm_tiny import all_paths, make_tiny_hmm, tempered_log_q
from kglm_tiny import tiny_kglm
from lda_tiny import SHORT_TEXT as LDA_SHORT_TEXT
from lda_tiny import TEXT as LDA_TEXT
from lda_tiny import tiny_lda
from reasoning_tiny import tiny_reasoning
from rnng_tiny import tiny_rnng
from tiny_models import make_tiny_bpe_gpt2, make_tiny_gpt2

from lm_latent_eval.models.entitynlm import LATENT_KEYS
from lm_latent_eval.models.entitynlm import enumerate as entitynlm_enumerate
from lm_latent_eval.models.kglm import enumerate as kglm_enumerate
from lm_latent_eval.models.lda.exact import all_assignments
from lm_latent_eval.models.masked import MaskedDiffusionLM, tiny_masked_lm
from lm_latent_eval.models.masked.orders import all_orders
from lm_latent_eval.models.masked.value import ValueHead
from lm_latent_eval.models.rnng.enumerate import enumerate_trees
from lm_latent_eval.tensors import pad_rows

Latents = Any


@dataclass(frozen=True)
class Case:
    """One latent LM under the contract.

    ``support(model, x)``: every z with p(x, z) > 0, [M, ...] in ``log_joint``'s format (the models'
    enumerators). ``log_q(model, x, z, temperature, peek)``: log q_τ(z | x), float64 [M]
    (``proposal.log_prob`` where it exists; a log density for a continuous z). ``exact(model, x)``: log p(x),
    computed without the proposal. ``keys(z)``: one hashable key per configuration. ``expressible(model, x)``:
    configurations beyond the support that ``log_joint`` accepts (it must give them −inf); None, with
    ``why_nothing_outside``, when the model can express none.

    A continuous latent (``latent_support = "continuous"``): ``support`` None, with ``no_support`` saying why;
    ``integrate(log_f, lo, hi)``: log ∫_lo^hi exp(log_f(z)) dz (log_f: z [N, ...] -> [N]), a quadrature
    independent of the model's ``log_marginal``, for Σ q = 1, Σ p = p(x), the probability of a bin of draws and
    E_q[w²]; ``heavy_tails(model, x, temperature, peek)``: why E_q[w²] is infinite ("" when finite).
    """

    name: str
    build: Callable[[], Any]
    text: str  # Σ q = 1, IS, SMC and beam, on a support of a few to hundreds of configurations
    short_text: str  # sampling frequencies and the configurations outside the support
    log_q: Callable[..., torch.Tensor]
    exact: Callable[[Any, torch.Tensor], float]
    keys: Callable[[Latents], list[tuple]]
    support: Callable[[Any, torch.Tensor], Latents] | None = None
    no_support: str = ""  # why there is no support to list (a continuous latent); then ``integrate`` is set
    integrate: Callable[..., float] | None = None
    heavy_tails: Callable[..., str] | None = None
    no_beam: str = ""  # why the proposal has no beam(x, k) ("" when it has one)
    expressible: Callable[[Any, torch.Tensor], Latents] | None = None
    why_nothing_outside: str = ""
    no_peek: str = ""  # why the proposal has no peek=false ("" when it has one)
    stepwise: bool = False  # offers smc_init, smc_step, smc_reorder, smc_latents
    twisted_peek: str = ""  # why smc_step with peek=true draws from another proposal than proposal.sample
    peek_draw_order: str = ""  # why smc_step with peek=true draws q's configurations in another order than
    #                            proposal.sample: the same q, other draws for a seed (checked by frequencies)
    beam_is_k_best: bool = True  # beam(x, k): exactly the k of highest q (peek, τ = 1), best first
    num_draws: int = 20_000  # draws compared with q by chi-square
    q_atol: float = 1e-9  # Σ q = 1 and sampled log q = enumerated log q (float64 proposal arithmetic)
    p_atol: float = 1e-6  # beam and Σ p(x, z) against the exact log p(x) (float32 network, float64 sums)
    stepwise_atol: float = 1e-9  # Σ_t increments against log p(x, z) − log q(z | x) of the whole document
    side_by_side_atol: float = 0.0  # a document's increments side by side against alone (0: bit for bit)

    def __post_init__(self):
        if self.support is None and not (self.no_support and self.integrate and self.heavy_tails):
            raise ValueError(
                f"{self.name}: a row without a support says why and carries integrate, heavy_tails"
            )

    @property
    def peeks(self) -> tuple[bool, ...]:
        return (True,) if self.no_peek else (True, False)


def proposal_log_prob(model, x, z, temperature, peek):
    return model.proposal.log_prob(x, z, temperature, peek)


def rows_as_keys(z: torch.Tensor) -> list[tuple]:
    """A configuration [K, T] as a tuple of its ids; −1 padding (segmentations) dropped."""
    return [tuple(t for t in row if t >= 0) for row in z.tolist()]


def stacked_keys(z: dict, names) -> list[tuple]:
    """A configuration given as a dict of [K, T] tensors as one tuple of its ``names`` at every token."""
    k = z[names[0]].shape[0]
    return [tuple(row) for row in torch.stack([z[name] for name in names], -1).reshape(k, -1).tolist()]


# ---------------------------------------------------------------- HMM: the exact reference


def hmm_log_q(model, x, z, temperature, peek):
    """The tempered proposal recomputed in probability space (the HMM's proposal has no log_prob)."""
    rows = z.tolist()
    return torch.tensor([tempered_log_q(model.proposal, x.tolist(), row, temperature, peek) for row in rows],
                        dtype=torch.float64)  # fmt: skip


HMM = Case(
    name="hmm", build=make_tiny_hmm, text="a c b b a", short_text="c a b",
    support=lambda model, x: all_paths(model.num_states, x.numel()), log_q=hmm_log_q,
    exact=lambda model, x: model.log_marginal(x), keys=rows_as_keys,
    why_nothing_outside="every state path has p(x, z) > 0: the HMM can express nothing outside its support",
    stepwise=True,
    twisted_peek="with peeking the HMM's SMC proposal is a look-ahead filter (twisted SMC), not the backward "
                 "sampler of proposal.sample; tests/estimators/test_smc.py checks its increments",
)  # fmt: skip


# ---------------------------------------------------------------- KGLM


def kglm_keys(z: dict) -> list[tuple]:
    return stacked_keys(z, ("mention_type", "entity", "parent"))


def kglm_expressible(model, x) -> dict:
    """Every (mention type, entity, parent) at every token, relation −1, valid or not."""
    n = model.graph.num_entities
    per_token = list(itertools.product(range(4), range(-1, n), range(-1, n)))
    combos = torch.tensor(list(itertools.product(per_token, repeat=x.numel())))  # [M, T, 3]
    z = {"mention_type": combos[..., 0], "entity": combos[..., 1], "parent": combos[..., 2]}
    z["relation"] = torch.full_like(z["entity"], -1)
    return z


def kglm_case(name: str, proposal_features: bool) -> Case:
    return Case(
        name=name, build=functools.partial(tiny_kglm, proposal_features=proposal_features),
        text="Ada Lovelace born London", short_text="Ada Lovelace born",
        support=lambda model, x: kglm_enumerate.enumerate_latents(model, x.numel()), log_q=proposal_log_prob,
        exact=kglm_enumerate.exact_log_marginal, keys=kglm_keys, expressible=kglm_expressible, stepwise=True,
        beam_is_k_best=False,  # a left-to-right beam search over q's factors
    )  # fmt: skip


# ---------------------------------------------------------------- EntityNLM


def entitynlm_keys(z: dict) -> list[tuple]:
    return stacked_keys(z, LATENT_KEYS)


def entitynlm_support(model, x) -> dict:
    return entitynlm_enumerate.enumerate_latents(x.numel(), model.max_entities, model.max_mention_length)


def entitynlm_expressible(model, x) -> dict:
    """Every (R, E, L) at every token with R ∈ {0, 1}, E ∈ −1..M, L ∈ 0..ℓ_max + 1, valid or not."""
    per_token = list(itertools.product(range(2), range(-1, model.max_entities + 1),
                                       range(model.max_mention_length + 2)))  # fmt: skip
    combos = torch.tensor(list(itertools.product(per_token, repeat=x.numel())))  # [N, T, 3]
    return {key: combos[..., i] for i, key in enumerate(LATENT_KEYS)}


ENTITYNLM = Case(
    name="entitynlm", build=tiny_entitynlm, text="anna saw her there", short_text="anna saw her",
    support=entitynlm_support, log_q=proposal_log_prob, exact=entitynlm_enumerate.exact_log_marginal,
    keys=entitynlm_keys, expressible=entitynlm_expressible, stepwise=True,
    beam_is_k_best=False,  # a left-to-right beam search over q's factors
    q_atol=1e-6, stepwise_atol=1e-6,  # log_joint scores each distinct z once, at another row (float32)
    side_by_side_atol=1e-6,  # one row per particle: the heads' products run on other rows beside it (float32)
)  # fmt: skip


# ---------------------------------------------------------------- RNNG


def rnng_support(model, x) -> torch.Tensor:
    return enumerate_trees(model.proposal.words(x).numel())


def rnng_expressible(model, x) -> torch.Tensor:
    """Every sequence of 2T − 1 SHIFT / REDUCE actions, trees or not."""
    return torch.tensor(list(itertools.product([0, 1], repeat=2 * model.proposal.words(x).numel() - 1)))


def tiny_rnng_prefix():
    """P(a sentence starts with x) of the tiny RNNG (the view loglikelihood answers from)."""
    return tiny_rnng(count_eos=True).prefix_model()


def rnng_case(name: str, count_eos: bool, build=None) -> Case:
    return Case(
        name=name, build=build or functools.partial(tiny_rnng, count_eos=count_eos),
        text="the dog saw a cat with a cat", short_text="the dog saw a cat", support=rnng_support,
        log_q=proposal_log_prob, exact=lambda model, x: model.log_marginal(x), keys=rows_as_keys,
        expressible=rnng_expressible, p_atol=1e-9,
        stepwise=True,
        peek_draw_order="the tree CRF samples top down (proposal.sample), SMC with its left-to-right conditionals",
        q_atol=1e-6,  # peek=false: log q teacher-forced in batches of other trees (float32 network)
        stepwise_atol=1e-6,  # log_joint scores each distinct tree once, in another batch (float32 rounding)
        side_by_side_atol=1e-6,  # the tiny network's products over other rows beside it (float32 rounding)
    )  # fmt: skip


# ---------------------------------------------------------------- LDA: z = the topic of every token, θ integrated out


LDA = Case(
    name="lda", build=tiny_lda, text=LDA_TEXT, short_text=LDA_SHORT_TEXT,
    support=lambda model, x: all_assignments(x.numel(), model.num_topics), log_q=proposal_log_prob,
    exact=lambda model, x: model.log_marginal(x),  # the dynamic program over topic counts, against the listed support
    keys=rows_as_keys,
    why_nothing_outside="Φ > 0 in this row: every topic assignment has p(x, z) > 0 (zeros in Φ: tests/models/lda)",
    stepwise=True, beam_is_k_best=False,  # a left-to-right beam search over q's factors
)  # fmt: skip
# the default above draws with the lookahead (twisted SMC, topics most-confident token first); this row, the urn
# proposal of Wallach et al. in the document's order
LDA_URN = replace(LDA, name="lda-urn", build=functools.partial(tiny_lda, lookahead="none"))


# ---------------------------------------------------------------- tokenization: z = the tokens spelling x


@functools.cache
def tiny_bpe_lm():
    """A random GPT-2 with a byte-level BPE vocabulary trained on a few sentences, built once per process."""
    from lm_latent_eval.models.tokenization import TokenizationLM

    with tempfile.TemporaryDirectory() as tmp:
        path = make_tiny_bpe_gpt2(Path(tmp) / "gpt2", n_positions=64)
        return TokenizationLM.from_pretrained(str(path), canonical_mix=0.0).eval()


def tokenization_view(cover_end: bool, canonical_mix: float):
    """The shared network with its own settings, proposal and caches."""
    view = tiny_bpe_lm().with_cover_end()
    view.cover_end, view.canonical_mix = cover_end, canonical_mix
    return view


def tokenization_expressible(model, x) -> torch.Tensor:
    """Token sequences that do not spell x (each segmentation without its last token, or with one token
    changed) and the segmentations themselves."""
    rows = rows_as_keys(model.segmentations(x))
    vocab = len(model.vocab)
    changed = [[*row[:i], (row[i] + 1 + i) % vocab, *row[i + 1 :]] for row in rows for i in range(len(row))]
    return pad_rows([list(row[:-1]) for row in rows if len(row) > 1] + changed + [list(row) for row in rows])


def tokenization_case(name: str, text: str, cover_end: bool, canonical_mix: float) -> Case:
    return Case(
        name=name, build=functools.partial(tokenization_view, cover_end, canonical_mix), text=text,
        short_text="the cat", support=lambda model, x: model.segmentations(x), log_q=proposal_log_prob,
        exact=lambda model, x: model.log_marginal(x), keys=rows_as_keys, expressible=tokenization_expressible,
        no_peek="a segmentation proposal must read the text it spells",
        beam_is_k_best=False,  # ranked by p(z), the canonical segmentation always kept
        num_draws=4_000, q_atol=1e-6, stepwise=True,
        stepwise_atol=1e-5,  # the steps' logits come from per-history caches, log_prob's from whole rows (float32)
        side_by_side_atol=1e-5,  # the new nodes of several texts in one forward pass (float32 rounding)
    )  # fmt: skip


# ---------------------------------------------------------------- a plain causal LM: one trivial z


@functools.cache
def tiny_causal_lm():
    from lm_latent_eval.models import load_model

    with tempfile.TemporaryDirectory() as tmp:
        return load_model("causal", str(make_tiny_gpt2(Path(tmp) / "gpt2")))[0]


@torch.no_grad()
def chain_rule_log_p(model, x) -> float:
    """Σ_t log softmax(logits)[x_t] with one forward pass over bos + x (text shorter than the context)."""
    ids = torch.cat([torch.tensor([model.prefix_token]), x])[None]
    logp = torch.log_softmax(model.model(ids).logits[0, :-1].double(), -1)
    return float(logp.gather(-1, ids[0, 1:, None]).sum())


CAUSAL = Case(
    name="causal", build=tiny_causal_lm, text="the cat sat on the mat", short_text="the dog ran",
    support=lambda model, x: torch.zeros(1, 1, dtype=torch.long),
    log_q=lambda model, x, z, temperature, peek: torch.zeros(z.shape[0], dtype=torch.float64),
    exact=chain_rule_log_p, keys=rows_as_keys,
    why_nothing_outside="z is one trivial configuration that log_joint does not read", num_draws=1_000, stepwise=True,
)  # fmt: skip


# ---------------------------------------------------------------- a continuous latent: z ~ N(0, 1), no beam


GAUSSIAN = Case(
    name="gaussian", build=gaussian_tiny.GaussianLatentLM, text="a b zebra e a d", short_text="a e b",
    no_support="z ∈ ℝ (a continuous latent): integrals by quadrature instead of sums over a listed support",
    integrate=gaussian_tiny.integrate, heavy_tails=gaussian_tiny.heavy_tails,
    log_q=gaussian_tiny.reference_log_q,  # scipy's normal density around a mode found by Brent's method
    exact=lambda model, x: model.log_marginal(x),  # Gauss–Hermite, 256 nodes
    keys=lambda z: [tuple(row) for row in z.tolist()],
    why_nothing_outside="every real z has p(x, z) > 0: there is nothing outside the support",
    no_beam="a continuous latent has no configurations to rank", stepwise=True, p_atol=1e-9,
)  # fmt: skip


# ---------------------------------------------------------------- masked LMs: z = the order positions are revealed in


def masked_expressible(model, x) -> torch.Tensor:
    """Every sequence of T positions in [0, T): the T! orders and the rows that repeat a position."""
    return torch.tensor(list(itertools.product(range(x.numel()), repeat=x.numel())))


def tiny_masked_lm_with_head() -> MaskedDiffusionLM:
    """The tiny masked LM with a random value head (float64): its look-ahead under SMC and its peeking proposal."""
    model = tiny_masked_lm(0)
    model.value_head = ValueHead.seeded(1, 8).double()
    return model


def masked_case(
    name: str, policy: str, policy_temperature: float = 1.0, dtype=torch.float64, build=None
) -> Case:
    return Case(
        name=name, build=build or functools.partial(tiny_masked_lm, 0, policy, policy_temperature, dtype),
        text="a c b d a", short_text="c a b", support=lambda model, x: all_orders(x.numel()),
        log_q=proposal_log_prob, exact=lambda model, x: model.log_marginal(x), keys=rows_as_keys,
        expressible=masked_expressible, stepwise=True,
        beam_is_k_best=False,  # a beam search over partial orders ranked by p(x, σ_≤t)
        p_atol=1e-9 if dtype == torch.float64 else 1e-6,
        q_atol=1e-9 if dtype == torch.float64 else 1e-6,
        stepwise_atol=1e-9 if dtype == torch.float64 else 1e-6,  # float32: states scored in other batches
    )  # fmt: skip


# ---------------------------------------------------------------- chain of thought: z = the chain before the answer


def reasoning_support(model, x) -> torch.Tensor:
    """Every chain of the template (the model's ``enumerate_chains``; ``tests/models/reasoning`` checks it against
    chains listed without the model's rule)."""
    return pad_rows(model.enumerate_chains())


def reasoning_expressible(model, x) -> torch.Tensor:
    """Every sequence of 1 to 4 ids, chains of the template or not (a chain that goes on past its end marker or a
    stop token, one that stops before either)."""
    vocab = int(model.network.config.vocab_size)
    rows = [list(r) for n in range(1, 5) for r in itertools.product(range(vocab), repeat=n)]
    return pad_rows(rows)


REASONING = Case(
    name="reasoning", build=tiny_reasoning, text="a b", short_text="b", support=reasoning_support,
    log_q=proposal_log_prob, exact=lambda model, x: model.log_marginal(x), keys=rows_as_keys,
    expressible=reasoning_expressible,
    beam_is_k_best=False,  # a beam search over partial chains ranked by p(z_≤t | x)
    num_draws=4_000, q_atol=1e-6,  # the sampler's cache against teacher forcing (float32 network)
)  # fmt: skip


CASES = [
    HMM,
    kglm_case("kglm", proposal_features=False),
    kglm_case("kglm-q-features", proposal_features=True),  # q with its own no-peeking heads, alias features
    ENTITYNLM,
    LDA,
    LDA_URN,
    rnng_case("rnng", count_eos=True),
    rnng_case("rnng-without-eos", count_eos=False),
    rnng_case("rnng-prefix", count_eos=False, build=tiny_rnng_prefix),  # trees scored up to the last SHIFT
    tokenization_case("tokenization", "théo sat.", cover_end=False, canonical_mix=0.0),  # é is two bytes
    tokenization_case("tokenization-canonical-mix", "théo sat.", cover_end=False, canonical_mix=0.9),
    tokenization_case("tokenization-cover-end", "a dog,", cover_end=True, canonical_mix=0.0),
    tokenization_case("tokenization-cover-end-mix", "a dog,", cover_end=True, canonical_mix=0.5),
    CAUSAL,
    GAUSSIAN,
    masked_case("masked", "uniform"),  # p(σ) = 1/T!: the mixture over all orders
    masked_case("masked-confidence", "confidence", 0.5),  # the max-probability order at a temperature
    masked_case("masked-float32", "uniform", dtype=torch.float32),  # the network in float32 (sums in float64)
    masked_case("masked-value-head", "uniform", build=tiny_masked_lm_with_head),  # peeking through the head
    REASONING,  # a random GPT-2 over 3 symbols, chains of up to 4 tokens: the question empty (its views: tests/models)
]
