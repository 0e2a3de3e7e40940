"""The reasoning model's proposals over chains: the model's own sampler (tempered, or a nucleus mixed with the
tempered distribution), and, with ``peek``, the same sampler after a hint that states the answer (rationalization);
a beam search over chains."""

from __future__ import annotations

import itertools

import torch

from ...checks import check_proposal_args
from ...protocol import CheckedProposal
from .chains import PAD, draw_chains, teacher_forced
from .template import MARKER, OPEN, STOP


class ChainProposal(CheckedProposal):
    """q_τ(z | x) = Π_t q_τ(z_t | prompt, z_<t) over the chains of the template's stopping rule.

    peek=False: the model's own next-token distribution after prompt(question), tempered (τ divides the logits) and,
    where the model's ``top_p`` < 1, mixed: (1 − top_p_mix) · nucleus + top_p_mix · tempered (``chains.
    proposal_log_probs``), so q > 0 wherever p > 0. At τ = 1 and top_p = 1 this is p(z | x) itself and the weights
    are p(y | x, z) ∈ [0, 1]. peek=True: the same sampler after prompt(question ⊕ hint(y)), a proposal that has read
    the answer; its weights p(z | x) p(y | x, z) / q(z | x, y) are unbounded. Holds the model, not a copy.
    """

    def __init__(self, model) -> None:
        self.model = model

    def _sample(self, x, num_samples, temperature, peek, generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Chains z [K, n] (padded with −1) ~ q_τ, with log q_τ(z_k | ·) float64 [K]; an empty answer's latent is
        empty (z [K, 1] of −1, log q = 0: nothing depends on a chain)."""
        model = self.model
        if x.numel() == 0:
            return torch.full((num_samples, 1), PAD, dtype=torch.long), torch.zeros(
                num_samples, dtype=torch.float64
            )
        return model.draw(x, num_samples, temperature, peek, generator)

    def sample_documents(self, xs, num_samples, temperature: float = 1.0, peek: bool = True, generators=None):
        """``sample`` of several answers to the question side by side (``protocol.DocumentSampler``): their chains in
        one lockstep batch, each answer's what ``sample`` draws for it alone with its generator (to the rounding of a
        batched product); ``sample_views``."""
        return sample_views([self.model] * len(xs), xs, num_samples, temperature, peek, generators)

    @torch.no_grad()
    def log_prob(
        self, x: torch.Tensor, z: torch.Tensor, temperature: float = 1.0, peek: bool = True
    ) -> torch.Tensor:
        """log q_τ(z_k | ·) float64 [K] of chains z [K, n]; −inf for a row that is no chain of the template."""
        model = self.model
        chains, valid = model.chain_rows(z)
        if x.numel() == 0:
            return torch.where(torch.tensor(valid), 0.0, -torch.inf).double()
        out = torch.full((len(chains),), -torch.inf, dtype=torch.float64)
        listed = [c for c, ok in zip(chains, valid) if ok]
        if listed:
            chain_prompt = model.hint_prompt(x) if peek else model.prompt
            _, log_q, _ = teacher_forced(model.network, model.rule, model.prompt, listed, None, chain_prompt,
                                         temperature, model.top_p, model.top_p_mix)  # fmt: skip
            out[torch.tensor(valid)] = log_q.cpu()
        return out

    def _beam(self, x, beam_size) -> torch.Tensor:
        """Up to ``beam_size`` distinct chains [k', n], by a beam search over partial chains ranked by log p(z_≤t |
        x) (a finished chain keeps its place; best first). Not an exact k-best: a partial chain may lose its place to
        one whose continuations all turn out less probable. An empty answer's latent is the empty one."""
        if x.numel() == 0:
            return torch.full((1, 1), PAD, dtype=torch.long)
        return self.model.beam_chains(beam_size)


@torch.no_grad()
def sample_views(views, xs, num_samples, temperature: float, peek: bool, generators):
    """``sample_documents`` of answers x_d, each to the question of its view (a ``conditional_model``), side by side:
    the K_d chains of every answer from its own stream after its question's prompt, all in one lockstep batch
    (``chains.draw_chains``); per answer (chains [K_d, n], log q [K_d]), rows of the batch, which every view's memo
    holds for ``log_joint`` to score on the batch's cache. None where the answers do not draw from the model's own
    sampler after their question (peek: each after its own hint), share one stream (``share_chains``: drawn once
    anyway) or one is empty."""
    for x, k in zip(xs, num_samples, strict=True):
        check_proposal_args(x, k, temperature)
    first = views[0]
    if peek or first.share_chains or any(x.numel() == 0 for x in xs) or generators is None:
        return None
    longest: dict = {}  # each view's longest answer
    for view, x in zip(views, xs):
        longest[view] = max(longest.get(view, 0), int(x.numel()))
    for view, tokens in longest.items():
        view.check_fits(view.prompt, tokens)
    draws = draw_chains(first.network, first.rule, [view.prompt for view in views], list(num_samples),
                        list(generators), temperature, first.top_p, first.top_p_mix)  # fmt: skip
    for view in views:
        view._memo = (None, draws, None)
    starts = [0, *itertools.accumulate(num_samples)]
    return [(draws.tokens[a:b], draws.log_q[a:b]) for a, b in itertools.pairwise(starts)]


def beam_search(model, beam_size: int) -> list[list[int]]:
    """The beam (``ChainProposal._beam``): at each step every open chain extended by its ``beam_size`` most
    probable tokens, and the ``beam_size`` best of open and finished chains kept."""
    rule, network, prompt = model.rule, model.network, model.prompt
    beams: list[tuple[float, list[int], int]] = [(0.0, [], OPEN)]
    for _ in range(rule.template.max_chain_tokens):
        open_ = [b for b in beams if b[2] == OPEN]
        if not open_:
            break
        rows = [prompt.tolist() + chain for _, chain, _ in open_]
        ids = torch.tensor(rows, device=prompt.device)  # open chains of one step have one length
        logp = torch.log_softmax(network(input_ids=ids).logits[:, -1].double(), -1)
        top = logp.topk(min(beam_size, logp.shape[-1]), -1)
        grown = [b for b in beams if b[2] != OPEN]
        for (score, chain, _), values, tokens in zip(open_, top.values.tolist(), top.indices.tolist()):
            for value, token in zip(values, tokens):
                extended = [*chain, token]
                grown.append((score + value, extended, rule.closing(extended)))
        beams = sorted(grown, key=lambda b: -b[0])[:beam_size]
    return [chain for _, chain, _ in beams]


__all__ = ["MARKER", "STOP", "ChainProposal", "beam_search", "sample_views"]
