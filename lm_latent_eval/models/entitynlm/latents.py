"""The latent factors of EntityNLM (Ji et al., 2017), shared by p(x, z) and its proposal q(z | x).

Latents, one triple per token (dict of LongTensor [K, T], keys ``LATENT_KEYS``):

    mention  R_t ∈ {0, 1}    x_t belongs to an entity mention
    entity   E_t             −1 when R_t = 0; otherwise the entity's index in order of first mention, so that
                             E_t = n_{t−1} (the number of entities introduced before t) starts a new entity
    length   L_t ∈ 1..ℓ_max  tokens left in the mention, x_t included (1 when R_t = 0)

Generative story of z (Ji et al., Algorithm 1). When the previous mention is over (L_{t−1} = 1, or t = 1):

    p(R_t = r | h)            ∝ exp(h · r_r)                                  (eq. 3; r_0, r_1: ``type_embedding``)
    p(E_t = e | R_t = 1, h)   ∝ exp(h · W_ent e_e + λ (t − last_e))   e < n    (eq. 4; an existing entity)
                              ∝ exp(h · W_ent u_new)                  e = n    (a new entity; only while n < M)
    p(L_t = ℓ | R_t = 1, h)   ∝ exp(W_len [h; e_{E_t}] + b_len)_ℓ              (eq. 5)

otherwise the mention goes on: R_t = 1, E_t = E_{t−1}, L_t = L_{t−1} − 1 with probability 1. After x_t is read,
the entity mentioned at t (R_t = 1, every token of a mention) is updated with the state h_t (eqs. 7-8):

    δ = σ(h_t · W_δ e),   e ← (δ e + (1 − δ) h_t) / ‖δ e + (1 − δ) h_t‖,

a new entity starting from u_new = r_1 / ‖r_1‖ (the original adds 1e-4 Gaussian noise to it; we do not, so that
p is a deterministic function of its weights). ``h`` is the *labelling* state: h_{t−1} for p and for q without
peeking, h_t (after reading x_t) for the peeking q. M = ``max_entities`` bounds the entity memory; a text is a
prefix, so a mention may be cut off by the end of x (L_T > 1).

Memory per particle: embeddings [K, M, D] (every unused slot holds u_new, so the new-entity score is the score of
slot n), position of each entity's latest mention [K, M], entity count [K] (a "particle" may be a row standing for
several: SMC's particles on the CPU keep one row per distinct history, ``stepwise.py``). This module holds the latents'
format and the memory; the heads' parameters are in ``heads.py``. Per-token kernels: ``scoring.score_step`` (log p
or log q of given z_t), ``drawing.draw_step`` (draw z_t ~ q_τ) and the model's ``word_step``;
``drawing.sample_latents`` and the stepwise SMC particles (``stepwise.py``) loop over tokens calling them. ``scoring.score_latents``
(given z) runs only the memory token by token (``entity_rows``) and takes the softmaxes once over all tokens, giving
each row the numbers ``score_step`` gives it (a product over some particles' rows, or over several tokens' rows at
once, only where that holds: ``rows_apart``). No Python loop over particles or entities and no host synchronisation
inside a token loop. With gradients the memory is updated out of place (training); without, the touched rows are
written in place (on the CPU only the rows of the entities mentioned at t are moved).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

LATENT_KEYS = ("mention", "entity", "length")
# see rows_apart
MIN_ROWS = 4


@dataclass
class EntityMemory:
    """Dynamic entity state of K particles after some prefix of the document."""

    embeddings: torch.Tensor  # [K, M, D]
    # [K, M] position of each entity's latest mention token (unused slots: 0)
    last_seen: torch.Tensor
    count: torch.Tensor  # [K] entities introduced so far (n)
    prev_entity: torch.Tensor  # [K] E_{t−1}
    # [K] L_{t−1} (1: the next token starts a decision)
    prev_length: torch.Tensor
    # [K] k·M: row of particle k's slot 0 in embeddings viewed as [K·M, D]
    offsets: torch.Tensor

    def row(self, entity: torch.Tensor, particles: torch.Tensor | None = None) -> torch.Tensor:
        """Embedding of entity slot ``entity`` [K] of each particle (values in 0..M−1): [K, D]; with ``particles``
        [n], slot entity[i] of particle particles[i]: [n, D]."""
        K, M, D = self.embeddings.shape
        return self.embeddings.view(K * M, D).index_select(0, self.row_index(entity, particles))

    def row_index(self, entity: torch.Tensor, particles: torch.Tensor | None = None) -> torch.Tensor:
        """Row of ``row``'s embeddings in the table viewed as [K·M, D]: [K] or [n]."""
        return (self.offsets if particles is None else self.offsets.index_select(0, particles)) + entity

    def select(self, index: torch.Tensor) -> EntityMemory:
        """The memory of particles ``index`` [K'] (resampling, beam search): new tensors, owned by the result."""
        # index_select: a gather of whole rows, several times faster on the CPU than advanced indexing
        fields = {
            f: getattr(self, f).index_select(0, index) for f in self.__dataclass_fields__ if f != "offsets"
        }
        M = self.embeddings.shape[1]
        return EntityMemory(**fields, offsets=torch.arange(index.shape[0], device=index.device) * M)


def rows_apart(num_rows: int, row: torch.Tensor) -> bool:
    """Whether a matrix product gives each of ``num_rows`` rows like ``row`` the numbers it gets in any other batch
    of ≥ 4 such rows, so that a product over some particles' rows reproduces the all-particles one: float32 rows of
    a multiple of 16 values (whole 64-byte lines) in batches of ≥ 4 on the CPU (measured on its BLAS; 1–3 rows, or
    rows of 6 or 10 values, round by position; tests/models/entitynlm/test_entitynlm_stepwise.py compares both
    paths). Not assumed of accelerator libraries, which choose kernels by shape."""
    return (
        num_rows >= MIN_ROWS
        and row.shape[-1] % 16 == 0
        and row.dtype == torch.float32
        and row.device.type == "cpu"
    )


def padded(rows: torch.Tensor, n: int = MIN_ROWS) -> torch.Tensor:
    """rows [N, ...] followed by zero rows up to n rows in all (so that a product over them runs on ≥ n rows)."""
    return (
        rows if rows.shape[0] >= n else torch.cat([rows, rows.new_zeros(n - rows.shape[0], *rows.shape[1:])])
    )


def without_autograd(fn):
    """Run ``fn`` under ``torch.inference_mode`` when grad is off (less bookkeeping per op than ``no_grad``) and hand
    back its tensors cloned, as ordinary tensors usable anywhere; with grad on, run it as is."""

    def clone(out):
        if isinstance(out, torch.Tensor):
            return out.clone()
        if isinstance(out, dict):
            return {k: clone(v) for k, v in out.items()}
        if isinstance(out, tuple):
            return tuple(clone(v) for v in out)
        return out

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        if torch.is_grad_enabled():
            return fn(*args, **kwargs)
        with torch.inference_mode():
            out = fn(*args, **kwargs)
        return clone(out)

    return wrapped


def tempered(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """logits / τ (the same tensor when τ = 1, which divides exactly)."""
    return logits if temperature == 1 else logits / temperature


def check_latents(z, num_tokens: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(mention, entity, length), each LongTensor [K, T]; a clear error for anything else."""
    if not isinstance(z, dict) or set(z) != set(LATENT_KEYS):
        got = sorted(z) if isinstance(z, dict) else type(z).__name__
        raise ValueError(f"EntityNLM latents must be a dict with keys {LATENT_KEYS}, got {got}")
    parts = [z[k] for k in LATENT_KEYS]
    shapes = {tuple(p.shape) for p in parts}
    if len(shapes) != 1 or len(parts[0].shape) != 2 or parts[0].shape[1] != num_tokens:
        raise ValueError(f"EntityNLM latents must each have shape [K, T={num_tokens}], got {sorted(shapes)}")
    if any(p.dtype != torch.long for p in parts):
        raise ValueError("EntityNLM latents must be LongTensors")
    return tuple(parts)
