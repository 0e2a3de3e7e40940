"""An artificial language p_L^T from a causal LM: ancestral sampling and scoring under the tempered softmax.

p_L^T(x) = Π_{t=1}^{n+1} softmax(logits(BOS x_<t) / T)[x_t] with x_{n+1} = EOS: a distribution over Σ* whose
sequence probabilities are exact. The sampling loop is ours (not ``generate``) so that the distribution
sampled from is exactly the tempered softmax (no top-k / top-p defaults from a generation config).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from ..models.causal_lm import cache_step


@dataclass
class LanguageSample:
    """N ancestral samples: tokens without BOS/EOS; per-token log p_L^T, [n + 1] (EOS last) or [max_len]."""

    tokens: list[list[int]]
    token_log_probs: list[np.ndarray]
    # bool [N]: EOS was drawn within max_length tokens
    finished: np.ndarray

    @property
    def log_probs(self) -> np.ndarray:
        """log p_L^T(x) = Σ_t log p_L^T(x_t | x_<t), EOS included: float64 [N]."""
        return np.array([lp.sum() for lp in self.token_log_probs], dtype=np.float64)


def check_temperature(temperature: float) -> float:
    """T > 0 and finite."""
    if not (isinstance(temperature, (int, float)) and np.isfinite(temperature) and temperature > 0):
        raise ValueError(f"softmax temperature must be a positive finite number, got {temperature!r}")
    return float(temperature)


def max_positions(model) -> int | None:
    """The model's context window (n_positions / max_position_embeddings), None if it declares none."""
    for key in ("n_positions", "max_position_embeddings"):
        value = getattr(model.config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def _check_length(model, max_length: int) -> None:
    if not isinstance(max_length, int) or max_length < 1:
        raise ValueError(f"max_length must be a positive integer, got {max_length!r}")
    window = max_positions(model)
    if window is not None and max_length + 1 > window:
        raise ValueError(f"BOS + {max_length} tokens exceed the model's context window of {window} positions")


@torch.no_grad()
def sample_language(
    model,
    num_sequences: int,
    bos_token_id: int,
    eos_token_id: int,
    temperature: float = 1.0,
    max_length: int = 128,
    batch_size: int = 64,
    generator: torch.Generator | None = None,
    progress: bool = True,
) -> LanguageSample:
    """Draw x_t ~ softmax(logits / T) from BOS until EOS, ≤ max_length tokens incl. EOS (KV-cached)."""
    temperature = check_temperature(temperature)
    _check_length(model, max_length)
    device = next(model.parameters()).device
    tokens, token_log_probs, finished = [], [], []
    bar = tqdm(
        total=num_sequences, desc=f"sampling p_L (T={temperature:g})", unit="seq", disable=not progress
    )
    for start in range(0, num_sequences, batch_size):
        b = min(batch_size, num_sequences - start)
        inputs = torch.full((b, 1), bos_token_id, dtype=torch.long, device=device)
        drawn = torch.empty((b, max_length), dtype=torch.long, device=device)
        log_p = torch.zeros((b, max_length), dtype=torch.float64, device=device)
        # tokens incl. EOS
        length = torch.full((b,), max_length, dtype=torch.long, device=device)
        alive = torch.ones(b, dtype=torch.bool, device=device)
        past = None
        for t in range(max_length):
            out, past = cache_step(model, inputs, past)
            # [b, V]
            step_log_p = torch.log_softmax(out.logits[:, -1].double() / temperature, dim=-1)
            # [b, 1]
            nxt = torch.multinomial(step_log_p.exp(), 1, generator=generator)
            drawn[:, t] = nxt[:, 0]
            log_p[:, t] = step_log_p.gather(1, nxt)[:, 0]
            ended = alive & (nxt[:, 0] == eos_token_id)
            length[ended] = t + 1
            alive &= ~ended
            if not alive.any():
                break
            inputs = nxt
        drawn, log_p, length, alive = drawn.cpu(), log_p.cpu().numpy(), length.cpu(), alive.cpu()
        for i in range(b):
            n = int(length[i])
            done = not bool(alive[i])
            tokens.append(drawn[i, : n - 1 if done else n].tolist())
            token_log_probs.append(log_p[i, :n].copy())
            finished.append(done)
        bar.update(b)
    bar.close()
    return LanguageSample(tokens, token_log_probs, np.array(finished, dtype=bool))


@torch.no_grad()
def score_sequences(
    model,
    sequences: list[list[int]],
    bos_token_id: int,
    eos_token_id: int,
    temperature: float = 1.0,
    batch_size: int = 64,
    progress: bool = True,
    desc: str = "scoring",
) -> list[np.ndarray]:
    """Per-token log p^T(x_t | BOS x_<t), t = 1..n+1 (x_{n+1} = EOS), of each sequence: float64 [n_i + 1]."""
    temperature = check_temperature(temperature)
    if not sequences:
        return []
    _check_length(model, max(len(s) for s in sequences) + 1)
    device = next(model.parameters()).device
    # similar lengths share a batch
    order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]))
    result: list[np.ndarray | None] = [None] * len(sequences)
    for start in tqdm(range(0, len(order), batch_size), desc=desc, unit="batch", disable=not progress):
        idx = order[start : start + batch_size]
        # BOS … EOS
        width = max(len(sequences[i]) for i in idx) + 2
        ids = torch.full((len(idx), width), eos_token_id, dtype=torch.long)
        mask = torch.zeros((len(idx), width), dtype=torch.long)
        for row, i in enumerate(idx):
            full = [bos_token_id, *sequences[i], eos_token_id]
            ids[row, : len(full)] = torch.tensor(full, dtype=torch.long)
            mask[row, : len(full)] = 1
        # right padding: real positions stay 0..n+1
        ids, mask = ids.to(device), mask.to(device)
        logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].double() / temperature
        log_p = torch.log_softmax(logits, dim=-1).gather(2, ids[:, 1:, None])[..., 0].cpu().numpy()
        for row, i in enumerate(idx):
            result[i] = log_p[row, : len(sequences[i]) + 1].copy()
    return result  # type: ignore[return-value]
