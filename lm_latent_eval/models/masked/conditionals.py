"""One network call per revealed set S: log p_θ(x_i | S) and the policy's log π(i | S) at every position.

The mask predictor reads ids [B, T], the true token at the positions in S and the mask id elsewhere, and returns
logits [B, T, V] (or an output with ``.logits``). The token distribution at a position is the softmax of its logits
over the vocabulary without the mask id (a masked-diffusion sampler never writes the mask). States are scored in
blocks of ``block_tokens // T`` rows, each distinct state once; logits in the network's dtype, the normalizer
log Σ_v exp(logit_v) and everything after in float64 (``tensors.log_normalizer``: the logits widened to float64, so a
one-token conditional sums to 1 over the vocabulary to float64 rounding, not float32's).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ...tensors import distinct_rows, log_normalizer
from .policy import DEFAULT_BLOCK, TIE_ULPS, order_log_probs, position_scores
from .windows import closed_positions, current_window, window_size, window_spans


@dataclass
class StepScores:
    """What the model gives one step from N states S (revealed [N, T]): both float64 [N, T], −inf at i ∈ S.

    ``log_token[n, i]`` = log p_θ(x_i | S_n); ``log_order[n, i]`` = log π(i | S_n). Their sum is
    log p(σ_t = i, x_i | S_n), the factor of p(x, σ) for revealing position i next.
    """

    log_token: torch.Tensor
    log_order: torch.Tensor

    @property
    def log_joint(self) -> torch.Tensor:
        """log π(i | S) + log p_θ(x_i | S): float64 [N, T] (−inf at revealed positions)."""
        return self.log_order + self.log_token


def masked_ids(x: torch.Tensor, revealed: torch.Tensor, mask_id: int) -> torch.Tensor:
    """The network's input for N states: x at the revealed positions, ``mask_id`` elsewhere, LongTensor [N, T]
    (x [T] shared by every state, or x [N, T]: each state's own text, as for several texts side by side).

    Examples
    --------
    >>> masked_ids(torch.tensor([5, 6, 7]), torch.tensor([[False, True, False]]), 1)
    tensor([[1, 6, 1]])
    >>> masked_ids(torch.tensor([[5, 6], [7, 8]]), torch.tensor([[False, True], [True, False]]), 1)
    tensor([[1, 6],
            [7, 1]])
    """
    return torch.where(revealed, x.expand_as(revealed), torch.full_like(x, mask_id).expand_as(revealed))


@torch.no_grad()
def token_log_probs(
    model, x: torch.Tensor, revealed: torch.Tensor, keep_mask_row: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log p_θ(x_i | S) [N, T], the policy's score at i [N, T] (``policy.position_scores``: c_i = max_v log p_θ(v | S)
    for the confidence policies)), float64, for N states (rows of ``revealed``). ``keep_mask_row``: the softmax over
    every output row, the mask's included (LLaDA's evaluation code), instead of leaving the mask out.

    Each distinct row is run through ``model.predict`` once, in blocks of ``model.block_tokens // T`` rows, unless
    the model's ``row_cache`` (``row_cache.RowCache``) holds it from an earlier call; the count of rows run is added
    to ``model.network_rows``. A text longer than the network reads is scored window by
    window (``windows.py``): a state's row reads its current window after the one before it, and its entries outside
    the current window are 0 (the policy gives them probability 0).
    """
    distinct, index = distinct_rows(revealed.to(torch.uint8))
    distinct = distinct.bool()
    cache = getattr(model, "row_cache", None)
    text_key = None if cache is None else cache.key(model, x, keep_mask_row)
    if text_key is None:
        token, conf = run_rows(model, x, distinct, keep_mask_row)
        return token[index], conf[index]
    # states an earlier call ran are read back (row_cache.py); only the others go through the network
    keys = cache.state_keys(distinct)
    found, where, missing = cache.lookup(text_key, keys)
    token = torch.empty(distinct.shape, dtype=torch.float64, device=x.device)
    conf = torch.empty_like(token)
    if found:
        rows = cache.table(text_key)[torch.tensor(where, device=x.device)]
        at = torch.tensor(found, device=x.device)
        token[at], conf[at] = rows[:, 0], rows[:, 1]
    if missing:
        at = torch.tensor(missing, device=x.device)
        new_token, new_conf = run_rows(model, x, distinct[at], keep_mask_row)
        token[at], conf[at] = new_token, new_conf
        cache.store(text_key, [keys[n] for n in missing], new_token, new_conf)
    return token[index], conf[index]


def run_rows(
    model, x: torch.Tensor, distinct: torch.Tensor, keep_mask_row: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """``token_log_probs`` of distinct states, each run through the network (whole, or window by window)."""
    size = window_size(model, distinct.shape[1])
    if size is None:
        return scored_rows(model, x, distinct, keep_mask_row)
    return windowed_rows(model, x, distinct, size, keep_mask_row)


def scored_rows(
    model, x: torch.Tensor, revealed: torch.Tensor, keep_mask_row: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """``token_log_probs`` of distinct states of a text the network reads whole: x [T], or x [N, T] for states of
    several texts of one length T (each row its state's text: ``documents.py``), in blocks of
    ``model.block_tokens // T`` rows; a row's numbers are those of its state alone wherever the network's row does
    not depend on its batch."""
    T = revealed.shape[1]
    rows = max(1, model.block_tokens // max(T, 1))
    mask_index = torch.tensor([model.mask_id], device=x.device)
    token, conf = [], []
    for start in range(0, revealed.shape[0], rows):
        block = revealed[start : start + rows]
        text = x if x.dim() == 1 else x[start : start + rows]
        logits = model.predict(masked_ids(text, block, model.mask_id))
        if not keep_mask_row:
            logits = logits.index_fill(-1, mask_index, -math.inf)
        log_z = log_normalizer(logits, torch.float64)
        picked = logits.gather(-1, text.expand(block.shape[0], T)[..., None]).squeeze(-1).double()
        token.append(picked - log_z)
        conf.append(position_scores(model.policy, logits, log_z))
        model.network_rows += block.shape[0]
    return torch.cat(token), torch.cat(conf)


def windowed_rows(
    model, x: torch.Tensor, revealed: torch.Tensor, size: int, keep_mask_row: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """``token_log_probs`` of distinct states of a text in windows of ``size``: each state's current window scored
    after the window before it; 0 elsewhere."""
    token = torch.zeros(revealed.shape, dtype=torch.float64, device=x.device)
    conf = torch.zeros_like(token)
    window = current_window(revealed, size)
    spans = window_spans(x.numel(), size)
    for j in window.unique().tolist():
        rows = (window == j).nonzero().squeeze(1)
        start, mid, end = spans[j]
        t, c = scored_rows(model, x[start:end], revealed[rows, start:end], keep_mask_row)
        token[rows, mid:end], conf[rows, mid:end] = t[:, mid - start :], c[:, mid - start :]
    return token, conf


def tie_tolerance(model) -> float:
    """``TIE_ULPS`` machine epsilons of the network's dtype (its first floating parameter; float64 for a network
    without one): the tolerance within which a deterministic policy's scores are tied (``policy.py``).

    Examples
    --------
    >>> tie_tolerance(torch.nn.Module()) == TIE_ULPS * torch.finfo(torch.float64).eps
    True
    """
    predictor = getattr(model, "predictor", model)
    parameters = predictor.parameters() if isinstance(predictor, torch.nn.Module) else ()
    dtype = next((p.dtype for p in parameters if p.is_floating_point()), torch.float64)
    return TIE_ULPS * torch.finfo(dtype).eps


def step_scores(model, x: torch.Tensor, revealed: torch.Tensor, need_tokens: bool = True) -> StepScores:
    """log p_θ(x_i | S) and log π(i | S) for N states (revealed BoolTensor [N, T]) under the model's policy.

    With ``need_tokens=False`` under the uniform policy no network runs (log_token is 0: the caller reads only
    log_order, as the uniform proposal does).

    Examples
    --------
    >>> class Fixed(torch.nn.Module):  # logits ignore the input: p(token 0) = 1/3, p(token 1) = 2/3 everywhere
    ...     policy, policy_temperature, mask_id, block_tokens, network_rows = "uniform", 1.0, 2, 64, 0
    ...     max_length, context_ids = None, None
    ...     def predict(self, ids):
    ...         return torch.log(torch.tensor([1.0, 2.0, 5.0])).expand(*ids.shape, 3)
    >>> s = step_scores(Fixed(), torch.tensor([0, 1]), torch.tensor([[False, False], [True, False]]))
    >>> s.log_joint.exp()
    tensor([[0.1667, 0.3333],
            [0.0000, 0.6667]], dtype=torch.float64)
    """
    closed = closed_positions(model, revealed)
    if not need_tokens and model.policy == "uniform":
        zeros = torch.zeros(revealed.shape, dtype=torch.float64, device=revealed.device)
        return StepScores(zeros, order_log_probs("uniform", None, closed))
    return scores_of_rows(model, revealed, closed, *token_log_probs(model, x, revealed))


def scores_of_rows(
    model, revealed: torch.Tensor, closed: torch.Tensor, log_token: torch.Tensor, confidence: torch.Tensor
) -> StepScores:
    """``step_scores`` from the network's rows of N states (``token_log_probs``' two float64 [N, T]) and the positions
    the next step cannot reveal (``windows.closed_positions``): log π(i | S) from the policy's scores, row by row."""
    block = getattr(model, "policy_block", DEFAULT_BLOCK)
    log_order = order_log_probs(
        model.policy, confidence, closed, model.policy_temperature, block, tie_tolerance(model)
    )
    return StepScores(log_token.masked_fill(revealed, -math.inf), log_order)
