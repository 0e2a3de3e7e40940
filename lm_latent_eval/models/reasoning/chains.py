"""The network's side of the reasoning model: K chains drawn in lockstep through one key/value cache, answers scored
on that cache, and the same numbers by teacher forcing for chains given from elsewhere.

Lockstep: the K chains advance one token per forward pass. A chain that has ended is fed a padding token whose key is
masked (attention mask 0) and whose position is not counted, as is a stop token (left out of the answer's context,
``template.STOP``); every later query of that row attends to the unmasked keys only, at the positions of its own
tokens, so each row computes what a forward pass over its own tokens alone computes (to the rounding of a batched
product). Chains after different prompts (the questions of a batch) share the loop the same way: the distinct prompts
go through one forward pass padded on the right (the pads masked keys, each row's chain starting at its own prompt's
length). The answer is then scored on a fork of the cache (``fork``: its layers copied, the tensors shared), so the
choices of one question read the same chains (common random numbers) without copying them.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch

from ...tensors import pad_rows
from ..causal_lm import cache_step
from .template import CUT, MARKER, OPEN, STOP, ChainRule

# chains: LongTensor [K, n] padded on the right with this
PAD = -1


def proposal_log_probs(logits: torch.Tensor, temperature: float, top_p: float, mix: float) -> torch.Tensor:
    """log q(v) [K, V] float64 of the next token under the proposal: softmax(logits / τ), or, for top_p < 1, the
    mixture (1 − mix) · nucleus + mix · softmax(logits / τ), the nucleus being the most probable tokens of the tempered
    distribution whose mass before them is below top_p, renormalized (the mixture keeps q > 0 wherever p > 0).

    Examples
    --------
    >>> lq = proposal_log_probs(torch.tensor([[2.0, 1.0, -3.0]]), 1.0, 0.7, 0.1)
    >>> [round(v, 4) for v in lq.exp()[0].tolist()]  # the nucleus is the first token alone
    [0.9705, 0.0244, 0.0004]
    """
    log_tau = torch.log_softmax(logits.double() / temperature, -1)
    if top_p >= 1.0:
        return log_tau
    ordered, index = log_tau.sort(dim=-1, descending=True, stable=True)
    before = torch.cumsum(ordered.exp(), -1) - ordered.exp()
    outside = torch.zeros_like(log_tau, dtype=torch.bool).scatter(-1, index, before >= top_p)
    nucleus = torch.log_softmax(log_tau.masked_fill(outside, -math.inf), -1)
    return torch.logaddexp(math.log1p(-mix) + nucleus, math.log(mix) + log_tau)


def fork(cache):
    """A cache whose layers are copies of ``cache``'s holding the same tensors: growing or selecting rows of the fork
    (``update``'s concatenation, ``batch_select_indices``) leaves ``cache`` as it was."""
    out = copy.copy(cache)
    out.layers = [copy.copy(layer) for layer in cache.layers]
    return out


@dataclass
class ChainState:
    """K chains after the prompt, in the cache: ``mask`` [K, S] the keys each row attends to, ``positions`` [K] the
    position of each row's next token, ``last_logits`` [K, V] the prediction after each row's last key."""

    cache: object
    mask: torch.Tensor
    positions: torch.Tensor
    last_logits: torch.Tensor


@dataclass
class ChainDraws:
    """K chains drawn from the proposal: ``tokens`` [K, n] (padded with ``PAD``), ``closing`` [K] (``template``'s
    MARKER, STOP or CUT), log q [K] and log p(z | prompt) [K] under the prompt they were drawn after (float64), the
    cache after them (``state``), and which prompt each row was drawn after (``prompts[prompt_of[k]]``)."""

    tokens: torch.Tensor
    closing: torch.Tensor
    log_q: torch.Tensor
    log_p: torch.Tensor
    state: ChainState
    prompts: tuple[torch.Tensor, ...]
    prompt_of: torch.Tensor

    def drawn_after(self, rows: torch.Tensor, prompt: torch.Tensor) -> bool:
        """Whether every row of ``rows`` was drawn after ``prompt`` [P]."""
        return all(
            torch.equal(self.prompts[i], prompt)
            for i in self.prompt_of[rows.to(self.prompt_of.device)].unique().tolist()
        )


def _step(network, ids, cache, mask, positions):
    out, cache = cache_step(network, ids, cache, attention_mask=mask, position_ids=positions)
    return out.logits, cache


def _prompt_pass(network, prompts: tuple[torch.Tensor, ...], source: torch.Tensor):
    """One forward pass over the distinct ``prompts``, padded on the right, its cache rows picked by ``source`` [K]
    (each row's prompt): (cache, ``mask`` [K, P_max] of the real keys, each row's next ``positions`` [K], the
    prediction after each row's prompt [K, V])."""
    device = prompts[0].device
    lengths = torch.tensor([p.numel() for p in prompts], device=device)
    inputs = pad_rows([p.tolist() for p in prompts], 0).to(device)
    # right padding: each prompt's queries see its own keys only (causal), none of them a row of pads alone
    real = (torch.arange(inputs.shape[1], device=device)[None] < lengths[:, None]).long()
    positions = torch.arange(inputs.shape[1], device=device)[None].expand(len(prompts), -1)
    logits, cache = _step(network, inputs, None, real, positions)
    cache.batch_select_indices(source)
    last = logits[torch.arange(len(prompts), device=device), lengths - 1]
    return cache, real[source], lengths[source], last[source]


@torch.no_grad()
def draw_chains(
    network,
    rule: ChainRule,
    prompt: torch.Tensor | list[torch.Tensor],
    num_chains: int | list[int],
    generator: torch.Generator | None | list,
    temperature: float = 1.0,
    top_p: float = 1.0,
    mix: float = 0.0,
) -> ChainDraws:
    """K chains z_k ~ q after ``prompt`` (one forward pass per token, lockstep), with their log q and log p.

    Parameters
    ----------
    network
        A transformers causal LM.
    rule : ChainRule
        When a chain ends.
    prompt : torch.Tensor or list of torch.Tensor
        LongTensor [P] on the network's device; or one per group (the questions of a batch), of any lengths: a
        prompt that several groups share goes through the network once.
    num_chains : int or list of int
        K; or the K_d of several groups of rows side by side (the answers of one or several questions, each on
        chains of its own), their rows consecutive.
    generator : torch.Generator or None, or a list of them
        The random stream (of each group); a group's draws depend on it alone (one multinomial draw per open chain
        of the group per step, in row order): each group draws what it draws alone.
    temperature, top_p, mix
        The proposal (``proposal_log_probs``).

    Returns
    -------
    ChainDraws
    """
    counts = [num_chains] if isinstance(num_chains, int) else list(num_chains)
    generators = generator if isinstance(generator, list) else [generator]
    prompts, source, group = _rows(prompt if isinstance(prompt, list) else [prompt] * len(counts), counts)
    device, k = source.device, sum(counts)
    cache, mask, positions, logits = _prompt_pass(network, prompts, source)
    last = logits.clone()  # the prediction after each row's last unmasked key
    rows: list[list[int]] = [[] for _ in range(k)]
    closing, open_rows = torch.full((k,), OPEN, dtype=torch.long), torch.arange(k, device=device)
    log_q, log_p = torch.zeros(2, k, dtype=torch.float64, device=device)
    while open_rows.numel():
        lq = proposal_log_probs(logits[open_rows], temperature, top_p, mix)
        drawn = _draw(lq, group[open_rows], generators)
        log_q[open_rows] += lq.gather(-1, drawn[:, None])[:, 0]
        lp = torch.log_softmax(logits[open_rows].double(), -1)
        log_p[open_rows] += lp.gather(-1, drawn[:, None])[:, 0]
        feed = torch.zeros(k, dtype=torch.long, device=device).index_put_((open_rows,), drawn)
        keep = _extend(rule, rows, closing, open_rows, drawn)
        # the tokens just drawn enter the cache (a stop token and the rows already closed as masked keys)
        mask = torch.cat([mask, keep[:, None]], 1)
        logits, cache = _step(network, feed[:, None], cache, mask, positions[:, None])
        logits = logits[:, -1]
        last = torch.where(keep[:, None].bool(), logits, last)
        positions = positions + keep
        open_rows = open_rows[(closing[open_rows.cpu()] == OPEN).to(device)]
    state = ChainState(cache, mask, positions, last)
    return ChainDraws(pad_rows(rows, PAD).to(device), closing, log_q, log_p, state, prompts, source)


def _rows(given: list[torch.Tensor], counts: list[int]):
    """(the distinct prompts of ``given`` (one per group), each row's prompt among them [K], each row's group [K])."""
    distinct = {tuple(p.tolist()): p for p in given}
    index = {key: i for i, key in enumerate(distinct)}
    device = given[0].device
    per_group = torch.tensor(counts, device=device)
    of_group = torch.tensor([index[tuple(p.tolist())] for p in given], device=device)
    group = torch.repeat_interleave(torch.arange(len(counts), device=device), per_group)
    return tuple(distinct.values()), torch.repeat_interleave(of_group, per_group), group


def _extend(rule: ChainRule, rows: list[list[int]], closing: torch.Tensor, open_rows, drawn) -> torch.Tensor:
    """The tokens ``drawn`` [M] appended to the chains ``rows`` of ``open_rows`` [M], their ``closing`` updated; which
    rows' new token enters the cache as a key, LongTensor [K] (not a stop token, nor a row already closed)."""
    ends = []
    for row, token in zip(open_rows.tolist(), drawn.tolist()):
        rows[row].append(token)
        ends.append(rule.closing(rows[row]))
    ends = torch.tensor(ends, dtype=torch.long)
    closing[open_rows.cpu()] = ends
    keep = torch.zeros(len(rows), dtype=torch.long, device=drawn.device)
    return keep.index_put_((open_rows,), (ends != STOP).long().to(drawn.device))


def _draw(log_q: torch.Tensor, group: torch.Tensor, generators: list) -> torch.Tensor:
    """One token per open row ~ exp(log_q) [M, V], each group's rows (``group`` [M]) from its own generator, in row
    order: [M]."""
    drawn = torch.empty(group.numel(), dtype=torch.long, device=log_q.device)
    for g, gen in enumerate(generators):
        mine = group == g
        if bool(mine.any()):
            drawn[mine] = torch.multinomial(log_q[mine].exp(), 1, generator=gen)[:, 0]
    return drawn


@torch.no_grad()
def score_answers(network, rule: ChainRule, draws: ChainDraws, rows: torch.Tensor, answer: torch.Tensor):
    """log p(y | answer context of chain k) for the chains ``rows`` [M] of ``draws``: float64 [M].

    Each row reads ``rule``'s suffix (the end marker where the chain did not write it, the answer prefix) then y
    [T], on a fork of the chains' cache."""
    state, device = draws.state, draws.tokens.device
    rows = rows.to(device)
    suffixes = [
        ([] if int(draws.closing[r]) == MARKER else rule.marker_ids) + rule.answer_prefix_ids
        for r in rows.tolist()
    ]
    inputs = pad_rows([s + answer.tolist() for s in suffixes], 0).to(device)
    width, t = inputs.shape[1], answer.numel()
    real = pad_rows([[1] * (len(s) + t) for s in suffixes], 0).to(device)
    cache = fork(state.cache)
    cache.batch_select_indices(rows)
    mask = torch.cat([state.mask[rows], real], 1)
    positions = state.positions[rows, None] + torch.arange(width, device=device)[None]
    logits, _ = _step(network, inputs, cache, mask, positions)
    # the prediction of input j: the chain's last output for j = 0, else the output at j − 1
    logits = torch.cat([state.last_logits[rows, None], logits[:, :-1]], 1)
    logp = torch.log_softmax(logits.double(), -1).gather(-1, inputs[..., None])[..., 0]
    starts = torch.tensor([len(s) for s in suffixes], device=device)
    at = starts[:, None] + torch.arange(t, device=device)[None]
    return logp.gather(1, at).sum(1)


@torch.no_grad()
def teacher_forced(
    network,
    rule: ChainRule,
    prompt: torch.Tensor,
    chains: list[list[int]],
    answer: torch.Tensor | None,
    chain_prompt: torch.Tensor | None = None,
    temperature: float = 1.0,
    top_p: float = 1.0,
    mix: float = 0.0,
    batch: int = 64,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(log p(z_k | prompt), log q(z_k | chain_prompt), log p(y | answer context of z_k)), float64 [K] each, by
    forward passes over each chain's own tokens (right-padded rows, no holes): the numbers ``draw_chains`` and
    ``score_answers`` compute on their cache. ``chain_prompt``: the prompt the proposal drew after (the peeking
    proposal's hint; None: ``prompt``). ``answer`` None: no answer scored (zeros)."""
    device = prompt.device
    log_p, log_q, log_y = [], [], []
    for start in range(0, len(chains), batch):
        part = chains[start : start + batch]
        lp = _chain_scores(network, prompt, part, ((1.0, 1.0, 0.0),))[0]
        if chain_prompt is None and (temperature, top_p) == (1.0, 1.0):
            lq = lp
        else:
            lq = _chain_scores(network, prompt if chain_prompt is None else chain_prompt, part,
                               ((temperature, top_p, mix),))[0]  # fmt: skip
        log_p.append(lp)
        log_q.append(lq)
        if answer is None:
            log_y.append(torch.zeros(len(part), dtype=torch.float64, device=device))
            continue
        contexts = [rule.suffix(chain) for chain in part]
        rows = [prompt.tolist() + kept + suffix + answer.tolist() for kept, suffix in contexts]
        starts = [prompt.numel() + len(kept) + len(suffix) for kept, suffix in contexts]
        log_y.append(_target_sums(network, rows, starts, answer.numel(), device))
    return torch.cat(log_p), torch.cat(log_q), torch.cat(log_y)


def _chain_scores(network, prompt, chains, proposals) -> list[torch.Tensor]:
    """Σ_t log q(z_t | prompt, z_<t) [K] for each (τ, top_p, mix) of ``proposals`` (τ = 1, top_p = 1: log p)."""
    device = prompt.device
    rows = [prompt.tolist() + chain for chain in chains]
    inputs = pad_rows(rows, 0).to(device)
    mask = pad_rows([[1] * len(r) for r in rows], 0).to(device)
    logits = network(input_ids=inputs, attention_mask=mask).logits[:, prompt.numel() - 1 : -1]
    targets = pad_rows(chains, 0).to(device)
    real = pad_rows([[1] * len(c) for c in chains], 0).to(device).bool()
    out = []
    for temperature, top_p, mix in proposals:
        lq = proposal_log_probs(logits[:, : targets.shape[1]], temperature, top_p, mix)
        picked = lq.gather(-1, targets[..., None])[..., 0]
        out.append(picked.masked_fill(~real, 0.0).sum(1))
    return out


def _target_sums(network, rows, starts, length, device) -> torch.Tensor:
    """Σ of log p(row[j] | row[<j]) for j in [start, start + length) of each row: float64 [len(rows)]."""
    if length == 0:
        return torch.zeros(len(rows), dtype=torch.float64, device=device)
    inputs = pad_rows(rows, 0).to(device)
    mask = pad_rows([[1] * len(r) for r in rows], 0).to(device)
    logp = torch.log_softmax(network(input_ids=inputs, attention_mask=mask).logits.double(), -1)
    at = torch.tensor(starts, device=device)[:, None] + torch.arange(length, device=device)[None]
    picked = logp[:, :-1].gather(-1, inputs[:, 1:, None])[..., 0]
    return picked.gather(1, at - 1).sum(1)


__all__ = ["CUT", "MARKER", "PAD", "STOP", "ChainDraws", "draw_chains", "score_answers", "teacher_forced"]
