"""The masked LM's proposal over reveal orders: the stepwise draws of ``stepwise.py`` run to the end, and a beam."""

from __future__ import annotations

import torch

from ...protocol import CheckedProposal
from .beam import beam_orders
from .orders import check_orders, order_scores, picked, prefix_revealed
from .stepwise import draw_step, init_particles, proposal_logits
from .value import pseudo_log_likelihoods, uses_value_head


class MaskedOrderProposal(CheckedProposal):
    """q_τ(σ | x) = Π_t q_τ(σ_t | S_{t−1}, x), q_τ(i | S, x) ∝ exp(ℓ_i / τ) over the masked positions.

    peek=True: the posterior's step guessed from the row at S (``stepwise.proposal_logits``): ℓ_i = log π(i | S) −
    g_φ(ℓ_i(S), λ_i, |M| − 1) under the model's value head, else ℓ_i = log π(i | S) + log p_θ(x_i | S), which favours
    the positions whose true token the model predicts well from what is revealed; peek=False: ℓ_i = log π(i | S), the
    order prior (uniform orders for the uniform policy, q = 1/T!). Every order has q > 0 wherever p(x, σ) > 0.
    ``beam(x, k)``: a beam search over partial orders ranked by log p(x_{σ_≤t}, σ_≤t) (``beam.py``). Holds the model,
    not a copy.
    """

    def __init__(self, model) -> None:
        # the model itself (a proposal is no nn.Module: nothing is registered, copied or saved twice)
        self.model = model

    def _sample(self, x, num_samples, temperature, peek, generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Orders z [K, T] ~ q_τ(σ | x) with log q_τ(σ | x) float64 [K]."""
        state = init_particles(self.model, x, num_samples, temperature, peek)
        log_q = torch.zeros(num_samples, dtype=torch.float64, device=state.x.device)
        for _ in range(state.x.numel()):
            state, _, step_log_q = draw_step(self.model, state, generator, need_tokens=False)
            log_q += step_log_q
        return state.order, log_q

    @torch.no_grad()
    def log_prob(
        self, x: torch.Tensor, z: torch.Tensor, temperature: float = 1.0, peek: bool = True
    ) -> torch.Tensor:
        """log q_τ(σ_k | x) for K orders z [K, T]: float64 [K], −inf for a row that is not a permutation."""
        x = self.model.check_text(x)
        z = check_orders(z, x.numel()).to(x.device)
        if x.numel() == 0:
            return torch.zeros(z.shape[0], dtype=torch.float64, device=x.device)
        valid, order, scores = order_scores(self.model, x, z, need_tokens=peek)
        K, T = order.shape
        pseudo = pseudo_log_likelihoods(self.model, x) if peek and uses_value_head(self.model) else None
        flat = type(scores)(scores.log_token.reshape(K * T, T), scores.log_order.reshape(K * T, T))
        logits = proposal_logits(self.model, flat, prefix_revealed(order).reshape(K * T, T), pseudo, peek)
        log_q = picked(torch.log_softmax(logits.view(K, T, T) / temperature, -1), order)
        return log_q.masked_fill(~valid, -float("inf"))

    def _beam(self, x: torch.Tensor, beam_size: int) -> torch.Tensor:
        """Up to ``beam_size`` distinct orders [k', T], best first (``beam_orders``)."""
        return beam_orders(self.model, self.model.check_text(x), beam_size)
