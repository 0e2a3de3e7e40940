"""LDA's proposal q(z | x): the Pólya urn, token by token, with (peek) or without the token's likelihood, and with
peeking optionally the expected topic counts of the words ahead (``lookahead.py``)."""

from __future__ import annotations

import torch

from ...protocol import CheckedProposal
from .lookahead import build_lookahead
from .stepwise import init_particles, propose
from .urn import counts_before


class LDAProposal(CheckedProposal):
    """q_τ(z | x) = Π_t q_τ(z_t | x, z_<t), the conditionals of ``stepwise.py``: peek=True, q(z_t = k) ∝
    (n_k + α_k) Φ[k, x_t] (sees x_≤t; at τ = 1 the locally optimal proposal); peek=False, the urn prior
    (n_k + α_k) / (t + Σα). With the model's ``lookahead="cvb0"`` and peeking, q(z_t = k) ∝ (n_k + α_k + m_k^{(t)})
    Φ[k, x_t], m^{(t)} the expected topic counts of x_>t (``lookahead.py``). Uses the model's own Φ, α and lookahead
    (it holds the model, not a copy)."""

    def __init__(self, model) -> None:
        # the model itself (a proposal is no nn.Module: nothing is registered, copied or saved twice)
        self.model = model

    def _sample(self, x, num_samples, temperature, peek, generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Draw z [K, T] ~ q_τ(z | x) and return it with log q_τ(z | x) float64 [K] (the SMC particles' draws)."""
        state = init_particles(self.model, x, num_samples, temperature, peek)
        log_q = torch.zeros(num_samples, dtype=torch.float64, device=state.z.device)
        for t in range(x.shape[0]):
            log_q += propose(state, t, generator)
        return state.z, log_q

    @torch.no_grad()
    def log_prob(
        self, x: torch.Tensor, z: torch.Tensor, temperature: float = 1.0, peek: bool = True
    ) -> torch.Tensor:
        """log q_τ(z | x) of given z [K, T]: float64 [K] (memory K × T × topics)."""
        x, z = self.model.check_x(x), self.model.check_z(x, z)
        order, ahead, log_phi = self._steps(x, peek)
        # the topics in the order they are drawn
        z = z[:, order]
        # [K, T, topics]
        log_urn = torch.log(counts_before(z, self.model.num_topics) + self.model.alpha.double() + ahead)
        logits = log_urn + log_phi if peek else log_urn
        log_q = torch.log_softmax(logits / temperature, -1).gather(-1, z[..., None]).squeeze(-1)
        return log_q.sum(1)

    def _steps(self, x: torch.Tensor, peek: bool) -> tuple[torch.Tensor, torch.Tensor | float, torch.Tensor]:
        """The order π [T] in which q draws the topics, m^{(t)} [T, topics] (the expected topic counts of the tokens
        after step t) and log Φ[k, x_π(t)] [T, topics]: the lookahead's with peeking, else the document's order and
        m = 0."""
        log_phi = self.model.log_phi_columns(x)
        if not peek or self.model.lookahead == "none":
            return torch.arange(x.shape[0], device=x.device), 0.0, log_phi
        view = build_lookahead(log_phi, self.model.alpha.double())
        return view.order, view.ahead, view.log_phi

    def _beam(self, x: torch.Tensor, beam_size: int) -> torch.Tensor:
        """Up to ``beam_size`` distinct z [k', T], best first: a left-to-right beam search over q's peeking factors
        (τ = 1, with the lookahead and its order where the model has one), keeping the ``beam_size`` prefixes of highest q(z_≤t | x) after every token (all of them once
        ``beam_size`` ≥ topics^T). Configurations with q = 0 (Φ[k, x_t] = 0) are never kept."""
        x = self.model.check_x(x)
        alpha = self.model.alpha.double()
        order, ahead, log_phi = self._steps(x, True)
        ahead = ahead + torch.zeros_like(log_phi)
        topics = alpha.shape[0]
        z = torch.zeros(1, 0, dtype=torch.long, device=x.device)
        counts = torch.zeros(1, topics, dtype=torch.float64, device=x.device)
        score = torch.zeros(1, dtype=torch.float64, device=x.device)
        for t in range(x.shape[0]):
            # [B, topics]
            log_q = torch.log_softmax(torch.log(counts + alpha + ahead[t]) + log_phi[t], -1)
            cand = (score[:, None] + log_q).reshape(-1)
            top, flat = cand.topk(min(beam_size, cand.numel()))
            keep = torch.isfinite(top)
            top, flat = top[keep], flat[keep]
            parent, topic = flat // topics, flat % topics
            z = torch.cat([z[parent], topic[:, None]], 1)
            counts = counts[parent].clone()
            counts[torch.arange(topic.shape[0], device=x.device), topic] += 1.0
            score = top
        # columns back in the document's order
        return torch.empty_like(z).index_copy_(1, order, z)
