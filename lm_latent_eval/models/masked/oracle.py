"""An oracle masked LM: a mask predictor whose exact order-marginal p(x) is computable at any length.

``ClassCountPredictor`` gives every position of a row the same logits, which depend on the input only through the
counts n ∈ ℕ^C of revealed tokens per word class: logit_v = e_v + h_θ(n)_{c(v)}. Leaving the mask out,

    p_θ(v | n) = exp(e_v) / E_{c(v)} · π_{c(v)}(n),    E_c = Σ_{v ∈ c} exp(e_v),    π(n) = softmax_c(h_θ(n)_c + log E_c),

so under the uniform order policy, with m_c the tokens of class c in x [T] and n0 the counts of a conditional
view's context, the orders that share a class path c_1..c_T (Π_c m_c! of them) share their probability:

    p(x) = Π_i exp(e_{x_i}) / E_{c(x_i)} · Π_c m_c! / T! · f(m),    f(0) = 1,   f(n) = Σ_c f(n − 1_c) π_c(n0 + n − 1_c),

a dynamic program over the Π_c (m_c + 1) count vectors below m (``oracle_log_marginal``), where the one over revealed
sets (``exact.dp_log_marginal``) costs 2^T rows. ``make_oracle_model``'s ``strength`` scales how much the counts
move π, hence how much p(x | σ) varies with σ, so that importance sampling over uniform orders degrades with T as on
the bundled network.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..hmm.tokenizer import UNK
from .diffusion import MASK
from .model import MaskedOrderLM
from .sampling import sample_continuation
from .windows import window_size

# the spread of make_oracle_model's random weights around their structure
NOISE = 0.3


class ClassCountPredictor(nn.Module):
    """Logits [B, L, V] that depend on the row only through its class counts n [B, C] (mask id: −inf).

    logit_v = e_v + h_θ(n)_{c(v)},    h_θ(n) = W₂ tanh(W₁ n / scale + b₁) + b₂,

    n counted over every non-mask position of the row (a conditional view's context included).

    Parameters
    ----------
    word_class : sequence of int
        c(v) ∈ [0, C) of each id v (the mask's is ignored); every class needs a non-mask id.
    mask_id : int
        The id of a masked position.
    hidden : int
        Width of h_θ's hidden layer.
    scale : float
        The count that h_θ reads as 1.

    Examples
    --------
    >>> net = ClassCountPredictor([0, 0, 1, 1], mask_id=1, hidden=4).double()
    >>> logits = net(torch.tensor([[2, 1, 3], [3, 2, 1]]))  # both rows: one revealed token of class 1
    >>> logits.shape, bool((logits[0] == logits[1]).all()), bool(torch.isinf(logits[..., 1]).all())
    (torch.Size([2, 3, 4]), True, True)
    """

    def __init__(self, word_class, mask_id: int, hidden: int = 16, scale: float = 32.0):
        super().__init__()
        self.register_buffer("word_class", torch.as_tensor(word_class, dtype=torch.long))
        self.mask_id, self.scale = int(mask_id), float(scale)
        self.num_classes = int(self.word_class.max()) + 1
        self.emission = nn.Parameter(torch.zeros(self.word_class.numel()))
        self.inner = nn.Linear(self.num_classes, hidden)
        self.outer = nn.Linear(hidden, self.num_classes)

    def class_scores(self, counts: torch.Tensor) -> torch.Tensor:
        """h_θ(n) [..., C] for counts [..., C]."""
        return self.outer(torch.tanh(self.inner(counts.to(self.emission.dtype) / self.scale)))

    def log_class_probs(self, counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(log π(n) [..., C], log E [C]): the class distribution at counts [..., C], each class's mass (no mask)."""
        ids = torch.arange(self.word_class.numel(), device=counts.device)
        member = (self.word_class == ids[: self.num_classes, None]) & (ids != self.mask_id)  # [C, V]
        log_mass = torch.logsumexp(self.emission.masked_fill(~member, -math.inf), 1)
        return torch.log_softmax(self.class_scores(counts) + log_mass, -1), log_mass

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        revealed = (ids != self.mask_id).to(self.emission.dtype)
        counts = (nn.functional.one_hot(self.word_class[ids], self.num_classes) * revealed[..., None]).sum(1)
        logits = self.emission + self.class_scores(counts)[:, self.word_class]
        logits[:, self.mask_id] = -math.inf
        return logits[:, None, :].expand(-1, ids.shape[1], -1)


def oracle_log_marginal(model: MaskedOrderLM, x: torch.Tensor) -> float:
    """Exact log p(x) of a uniform-order ``MaskedOrderLM`` on a ``ClassCountPredictor``, at any length: the dynamic
    program over class-count vectors of the module docstring, float64 log-sum-exp, π at every count vector 0 ≤ n ≤ m
    from one batched call of h_θ.

    Raises
    ------
    ValueError
        For another policy or predictor, or a text read in windows (longer than ``model.max_length`` allows).

    Examples
    --------
    >>> model = make_oracle_model(seed=0)
    >>> x = sample_oracle_text(model, 8, seed=0)
    >>> abs(oracle_log_marginal(model, x) - model.log_marginal(x)) < 1e-9
    True
    """
    return uniform_order_log_moment(model, x, 1)


def importance_relative_variance(model: MaskedOrderLM, x: torch.Tensor) -> float:
    """K · Var(p̂ / p) of importance sampling over K uniform orders, exactly: E_σ[p(x | σ)²] / p(x)² − 1 with
    p(x | σ) = T! p(x, σ) (the program with π² in place of π).

    Examples
    --------
    >>> model = make_oracle_model(seed=0)
    >>> x = sample_oracle_text(model, 5, seed=1)
    >>> import itertools
    >>> z = torch.stack([torch.tensor(o) for o in itertools.permutations(range(5))])
    >>> w = (model.log_joint(x, z) + math.lgamma(6)).exp()
    >>> abs(float(w.var(unbiased=False) / w.mean() ** 2) - importance_relative_variance(model, x)) < 1e-9
    True
    """
    return math.expm1(uniform_order_log_moment(model, x, 2) - 2 * uniform_order_log_moment(model, x, 1))


@torch.no_grad()
def uniform_order_log_moment(model: MaskedOrderLM, x: torch.Tensor, power: int) -> float:
    """log E_σ[p(x | σ)^k] over uniform orders σ (k = ``power``; k = 1: log p(x)): every factor of a class path
    raised to the k-th power in the program of the module docstring."""
    net = model.predictor
    if model.policy != "uniform" or not isinstance(net, ClassCountPredictor):
        raise ValueError(f"oracle_log_marginal needs the uniform policy and a ClassCountPredictor, got {model.policy!r} "
                         f"and {type(net).__name__}")  # fmt: skip
    T, C = x.numel(), net.num_classes
    if window_size(model, T) is not None:
        raise ValueError(f"oracle_log_marginal: {T} tokens, read in windows (max_length {model.max_length})")
    x = model.check_text(x)
    context = x.new_zeros(0) if model.context_ids is None else model.context_ids
    n0 = torch.bincount(net.word_class[context[context != net.mask_id]], minlength=C)
    classes = net.word_class[x]
    m = torch.bincount(classes, minlength=C)
    shape = (m + 1).tolist()
    # every count vector 0 ≤ n ≤ m, row-major: the row of n − 1_c is the row of n less stride_c
    grid = torch.stack(torch.meshgrid(*(torch.arange(k, device=x.device) for k in shape), indexing="ij"), -1)
    grid = grid.reshape(-1, C)
    strides = torch.tensor([math.prod(shape[c + 1 :]) for c in range(C)], device=x.device)
    log_pi, log_mass = net.log_class_probs(n0 + grid)
    log_pi, level = power * log_pi.double(), grid.sum(1)
    f = torch.full((grid.shape[0],), -math.inf, dtype=torch.float64, device=x.device)
    f[0] = 0.0
    for s in range(1, T + 1):
        rows = (level == s).nonzero().squeeze(1)
        has = grid[rows] > 0
        before = torch.where(has, rows[:, None] - strides, 0)
        terms = f[before] + log_pi[before, torch.arange(C, device=x.device)]
        f[rows] = torch.logsumexp(terms.masked_fill(~has, -math.inf), 1)
    emission = (net.emission[x] - log_mass[classes]).double().sum()
    # E_σ[p(x | σ)^k] = Σ_paths (Π_c m_c! / T!) (emission · Π π)^k: the orders of a path counted once, not k times
    return float(power * emission + torch.lgamma(m.double() + 1).sum() - math.lgamma(T + 1) + f[-1])


def make_oracle_model(vocab_size: int = 64, num_classes: int = 3, strength: float = 2.0, seed: int = 0,
                      max_length: int = 128, hidden: int = 16) -> MaskedOrderLM:  # fmt: skip
    """A seeded float64 ``MaskedOrderLM`` (uniform policy, eval mode) on a ``ClassCountPredictor`` over the words
    ``<unk>``, ``<mask>``, w0, w1, ... (``vocab_size`` ids in all; id v in class v mod C, the mask's ignored).

    e ~ N(0, 1); scale = 32; the hidden units of class c read ``strength`` · (n_{c−1} − n_{c+1}) / scale (each weight
    plus ``strength`` · N(0, 0.3²)), and W₂ sends them to class c (weight 1 + N(0, 0.3²)); biases N(0, 0.3²). This
    cycle (C ≥ 3) makes p(x | σ) depend on which class precedes which: ``importance_relative_variance`` grows
    exponentially with T (its figures: bench/masked_length/levers.md).
    """
    if num_classes < 3 or vocab_size < 2 * num_classes:
        raise ValueError(f"need 3 ≤ num_classes ≤ vocab_size / 2, got {num_classes} and {vocab_size}")
    vocab = [UNK, MASK, *(f"w{i}" for i in range(vocab_size - 2))]
    generator = torch.Generator().manual_seed(seed)
    word_class = torch.arange(vocab_size) % num_classes  # the mask's class is ignored
    net = ClassCountPredictor(word_class, 1, hidden, scale=32.0).double()
    owner = torch.arange(hidden) % num_classes
    own = nn.functional.one_hot(owner, num_classes).T.double()
    # the units of class c read strength · (n_{c−1} − n_{c+1}) / scale: c−1 before c and c before c+1 are likely
    cycle = torch.zeros(hidden, num_classes, dtype=torch.float64)
    cycle[torch.arange(hidden), (owner - 1) % num_classes] += 1.0
    cycle[torch.arange(hidden), (owner + 1) % num_classes] -= 1.0

    def normal(*shape):
        return torch.randn(*shape, generator=generator, dtype=torch.float64)

    with torch.no_grad():
        net.emission.copy_(normal(vocab_size))
        net.inner.weight.copy_(strength * (cycle + NOISE * normal(hidden, num_classes)))
        net.inner.bias.copy_(NOISE * normal(hidden))
        net.outer.weight.copy_(own * (1 + NOISE * normal(num_classes, hidden)))
        net.outer.bias.copy_(NOISE * normal(num_classes))
    return MaskedOrderLM(net, 1, vocab, max_length=max_length).eval()


def sample_oracle_text(model: MaskedOrderLM, length: int, seed: int = 0) -> torch.Tensor:
    """Ids [T] of a text drawn by the model's own sampler (``sampling.sample_continuation``: uniform orders, each
    token from p_θ(· | revealed); a view's context read before them), seeded by ``seed`` (text: ``model.detokenize``)."""
    generator = torch.Generator(model.device).manual_seed(seed)
    return model.text_ids(sample_continuation(model, model.context_text or "", length, generator)).to(
        model.device
    )
