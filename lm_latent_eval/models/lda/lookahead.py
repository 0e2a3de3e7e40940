"""The lookahead of LDA's proposal and SMC targets: what the words ahead say about the topics (twisted SMC).

Left to right, the urn proposal q(z_t = k) ∝ (n_k + α_k) Φ[k, x_t] sees only x_≤t, so at 50-200 topics its early
draws ignore the rest of the document and SMC's weights degenerate. The lookahead fits topic responsibilities r_s
[topics] (rows summing to 1) to every token of the document by CVB0 (Asuncion et al. 2009: r_s ∝ (α + N − r_s) ⊙
Φ[:, x_s], N = Σ_s r_s), fixed before any particle is drawn, and draws the topics in the order π of decreasing
confidence max_k r_sk (stable): with θ integrated out the tokens are exchangeable, p(z) = Π_t p(z_π(t) | z_π(<t)) in
any order, so the particles may settle the unambiguous words first and meet the ambiguous ones with their topics
known. Below, t counts steps and "token t" is token π(t); m^{(t)} = Σ_{s>t} r_s, the expected topic counts of the
tokens after step t. Then

- the proposal is q_τ(z_t = k | z_<t) ∝ ((n_k + α_k + m_k^{(t)}) Φ[k, x_t])^{1/τ}: the urn, with the words ahead
  counted as soft pseudo-counts;
- SMC's intermediate targets are γ_t(z_≤t) = p(x_≤t, z_≤t) ψ_t(z_≤t) with the twist

      ψ_t(z_≤t) = Π_{s>t} Σ_k (α_k + n_k + Σ_{t<s'<s} r_s'k) Φ[k, x_s] / (Σα + s),    n = topic counts of z_≤t,

  the chain rule p(x_>t | z_≤t) = Π_{s>t} p(x_s | x_(t,s), z_≤t) with the topics of the tokens between t and s
  counted softly: each factor is the urn's predictive probability of token s, a mixture over topics, so a particle
  that explains the words ahead by other topics than the fit's is still credited. ψ_{T−1} = 1.

Any positive ψ fixed before the particles are drawn keeps SMC unbiased (twisted SMC; γ_T = p(x, z), so the estimate
is of p(x)), and the first token's increment does not divide by ψ_{−1}, so the increments

    log p(x_t, z_t | z_<t) + log ψ_t(z_≤t) − log ψ_{t−1}(z_<t) − log q_τ(z_t | z_<t)

telescope to log p(x, z) − log q(z | x) exactly (the contract). With S_s = Σ_k n_k Φ[k, x_s] kept per particle (one
gather per token), a step costs O(K T) for K particles.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

# CVB0 sweeps (at most) and the change in N below which the fit stops
SWEEPS, TOLERANCE = 50, 1e-4


@dataclass
class Lookahead:
    """The lookahead of one document x [T], in the order π of its steps (``order`` [T]: step t draws the topic of
    token π(t)): ``ahead`` [T, topics] = m^{(t)} (expected topic counts of the tokens after step t), ``phi`` and
    ``log_phi`` [T, topics] = Φ[k, x_π(s)] and its log, ``base`` [T, T] = Σ_k (α_k + Σ_{t<s'<s} r_s'k) Φ[k, x_s] (row t, column s > t)
    and ``log_norm`` [T] = log(Σα + s); ``phi_by_topic`` [topics, T] is ``phi`` transposed, contiguous: a step gathers
    the rows of its particles' topics from it (``index_select``), ten times faster on the CPU than indexing the
    columns of ``phi``."""

    order: torch.Tensor
    # π on the host (no device sync per step)
    steps: list[int]
    ahead: torch.Tensor
    phi: torch.Tensor
    log_phi: torch.Tensor
    base: torch.Tensor
    log_norm: float
    phi_by_topic: torch.Tensor = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.phi_by_topic = self.phi.t().contiguous()


def cvb0_responsibilities(log_phi: torch.Tensor, alpha: torch.Tensor, sweeps: int = SWEEPS) -> torch.Tensor:
    """r [T, topics] at the CVB0 fixed point r_s ∝ (α + N − r_s) ⊙ Φ[:, x_s], N = Σ_s r_s (Jacobi updates from
    r_s ∝ α ⊙ Φ[:, x_s]; deterministic given x, as a twist must be fixed before the particles are drawn): the fit of
    ``cvb0_fit`` for one document.

    Parameters
    ----------
    log_phi : torch.Tensor
        log Φ[k, x_s], float64 [T, topics].
    alpha : torch.Tensor
        α, float64 [topics].
    sweeps : int
        The most sweeps.

    Returns
    -------
    torch.Tensor
        r, float64 [T, topics].
    """
    return cvb0_fit(log_phi[None], [log_phi.shape[0]], alpha, sweeps)[0]


def cvb0_fit(
    log_phi: torch.Tensor, lengths: list[int], alpha: torch.Tensor, sweeps: int = SWEEPS
) -> torch.Tensor:
    """The CVB0 fits of several documents at once, each exactly as alone: document d's rows ``:lengths[d]`` of r.

    Each document stops by its own rule (the change in its N below ``TOLERANCE``, or ``sweeps`` sweeps) and is
    frozen from then on; N is a running sum over the tokens (``sum_ahead``), which the zero rows of a shorter
    document's padding leave unchanged, so a document's r does not depend on the documents beside it, to the bit.
    One host synchronisation per sweep (are all documents done?), for the whole batch.

    Parameters
    ----------
    log_phi : torch.Tensor
        log Φ[k, x_s] of each document, float64 [D, T, topics] (T ≥ every length; the rows past a length are
        ignored).
    lengths : list[int]
        T_d, the tokens of each document.
    alpha : torch.Tensor
        α, float64 [topics].
    sweeps : int
        The most sweeps.

    Returns
    -------
    torch.Tensor
        r, float64 [D, T, topics], zero past each document's length.
    """
    # rows in memory order (``log_phi_columns`` gives a transposed view): the sums over topics then add each row's
    # numbers in the same order wherever it sits
    log_phi = log_phi.contiguous()
    D, T = log_phi.shape[:2]
    if T == 0:
        return torch.zeros_like(log_phi)
    # [D, T, 1]: 1 on a document's tokens, 0 on its padding (multiplied in, where there is padding: exact)
    valid = _valid(lengths, T, log_phi)[:, :, None] if min(lengths) < T else None
    phi = torch.exp(log_phi - log_phi.max(2, keepdim=True).values)
    r = phi * alpha
    r = r / r.sum(2, keepdim=True)
    r = r if valid is None else r * valid
    # [D, 1, 1]: the documents still sweeping
    active = torch.ones(D, 1, 1, dtype=torch.bool, device=log_phi.device)
    for _ in range(sweeps):
        counts = sum_ahead(r.transpose(1, 2))[:, None]
        new = (alpha + counts - r).clamp_min(0.0) * phi
        new = new / new.sum(2, keepdim=True)
        new = new if valid is None else new * valid
        done = (sum_ahead(new.transpose(1, 2))[:, None] - counts).abs().amax(2, keepdim=True) < TOLERANCE
        if D == 1:  # alone: no document to freeze
            r = new
            if bool(done):
                break
            continue
        r = torch.where(active, new, r)
        active = active & ~done
        if not bool(active.any()):
            break
    return r


def _valid(lengths: list[int], T: int, like: torch.Tensor) -> torch.Tensor:
    """[D, T]: 1 (of like's dtype) on each document's first T_d positions, 0 after."""
    index = torch.arange(T, device=like.device)
    return (index < torch.tensor(lengths, device=like.device)[:, None]).to(like.dtype)


def build_lookahead(log_phi: torch.Tensor, alpha: torch.Tensor) -> Lookahead:
    """The lookahead of a document from log Φ[k, x_t] [T, topics] and α [topics] (module docstring): the batch of
    one of ``build_lookaheads``."""
    tables = build_lookaheads(log_phi[None], [log_phi.shape[0]], alpha)
    return Lookahead(
        tables.order[0], tables.order[0].tolist(), tables.ahead[0], tables.phi[0], tables.log_phi[0],
        tables.base[0], tables.log_norm[0],
    )  # fmt: skip


@dataclass
class LookaheadTables:
    """The lookaheads of D documents padded to the longest, T (``Lookahead``'s fields with a leading document
    dimension): order [D, T] (π, the padding last), ahead, phi and log_phi [D, T, topics] in that order, base [D, T,
    T] (1 outside a document's T_d × T_d) and log_norm [D, T] (0 past T_d); Φ and m are 0 on
    the padding."""

    order: torch.Tensor
    ahead: torch.Tensor
    phi: torch.Tensor
    log_phi: torch.Tensor
    base: torch.Tensor
    log_norm: torch.Tensor


def build_lookaheads(log_phi: torch.Tensor, lengths: list[int], alpha: torch.Tensor) -> LookaheadTables:
    """The lookaheads of several documents at once, each exactly as alone (to the bit: the sums over tokens are
    sequential, ``cvb0_fit``, and each document's T_d × T_d product is its own).

    Parameters
    ----------
    log_phi : torch.Tensor
        log Φ[k, x_s] of each document, float64 [D, T, topics] (rows past a length ignored).
    lengths : list[int]
        T_d, the tokens of each document.
    alpha : torch.Tensor
        α, float64 [topics].

    Returns
    -------
    LookaheadTables
        The documents' tables, padded.
    """
    log_phi = log_phi.contiguous()
    D, T = log_phi.shape[:2]
    r = cvb0_fit(log_phi, lengths, alpha)
    # the most confident tokens first (stable: ties keep the document's order; the padding, r = 0, last)
    order = torch.argsort(-r.amax(2), dim=1, stable=True)
    rows = order[:, :, None].expand_as(r)
    r, log_phi = r.gather(1, rows), log_phi.gather(1, rows)
    # m^{(t)} = Σ_{s>t} r_s: the reverse cumulative sum, shifted by one (m^{(T−1)} = 0 exactly)
    ahead = torch.cat([r[:, 1:].flip(1).cumsum(1).flip(1), torch.zeros_like(r[:, :1])], 1)
    phi = log_phi.exp()
    # where there is padding, Φ 0 there (S and the twist's sums then read nothing from it)
    valid = _valid(lengths, T, phi) if min(lengths, default=T) < T else None
    phi = phi if valid is None else phi * valid[:, :, None]
    # M_s = Σ_{s'<s} r_s' [D, T + 1, topics]
    before = torch.cat([torch.zeros_like(r[:, :1]), r.cumsum(1)], 1)
    # [D, T, T]: M_{t+1} · Φ[:, x_s], each document's own product
    if D == 1:
        inner = (before[0, 1:] @ phi[0].t())[None]
    else:
        inner = log_phi.new_zeros(D, T, T)
        for d, n in enumerate(lengths):
            inner[d, :n, :n] = before[d, 1 : n + 1] @ phi[d, :n].t()
    # Σ_k (α_k + M_s,k − M_{t+1},k) Φ[k, x_s], ≥ Σ_k α_k Φ[k, x_s] > 0 whatever the rounding of the difference
    base = torch.maximum(
        ((alpha + before[:, :T]) * phi).sum(2)[:, None] - inner, (alpha * phi).sum(2)[:, None]
    )
    log_norm = torch.log(float(alpha.sum()) + torch.arange(T, dtype=torch.float64, device=phi.device))
    log_norm = log_norm.expand(D, T)
    if valid is not None:
        base = torch.where((valid[:, :, None] * valid[:, None, :]) > 0, base, 1.0)
        log_norm = log_norm * valid
    return LookaheadTables(order, ahead, phi, log_phi, base, log_norm)


def proposal_logits(counts: torch.Tensor, alpha: torch.Tensor, lookahead: Lookahead, t: int) -> torch.Tensor:
    """log(α + n + m^{(t)}) + log Φ[:, x_π(t)] for the counts n [K, topics] of the steps before t: q's logits at step t,
    [K, topics]."""
    return torch.log(counts + alpha + lookahead.ahead[t]) + lookahead.log_phi[t]


def log_twist(explained: torch.Tensor, lookahead: Lookahead, t: int) -> torch.Tensor:
    """log ψ_t = Σ_{s>t} log((base[t, s] + S_s) / (Σα + s)) from S [K, T] (S_s = Σ_k n_k Φ[k, x_s] over z_≤t):
    float64 [K] (0 at the last token). The sums are running sums (``sum_ahead``): the same numbers whatever columns of
    zeros follow, which documents side by side pad their rows with."""
    if t + 1 >= explained.shape[1]:
        return explained.new_zeros(explained.shape[0])
    ahead = lookahead.base[t, t + 1 :] + explained[:, t + 1 :]
    return sum_ahead(torch.log(ahead)) - sum_ahead(lookahead.log_norm[t + 1 :])


def sum_ahead(values: torch.Tensor) -> torch.Tensor:
    """The sum of each row of values [..., n > 0] as its running sum's last entry: sequential, so trailing zeros leave
    it unchanged to the bit (a vectorised ``sum`` regroups its terms with the row's width)."""
    return values.cumsum(-1)[..., -1]
