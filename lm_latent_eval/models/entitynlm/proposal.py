"""q(z | x): the discriminative EntityNLM twin (as the original ``entitydisc``), for importance sampling and beam search.

Its own token embedding and AWD-LSTM read ``@@START@@ x_1 .. x_T`` (x only: computed once per document, shared by
every particle), giving states g_0..g_T. It has the latent factors of p (``latents.py``: type, entity with its own
dynamic memory, length; no word head):

    peek=True   z_t is labelled from g_t, the state after reading x_t (the original discriminator), by ``heads``;
    peek=False  z_t is labelled from g_{t−1} (x_<t only) by its own ``nopeek_heads``.

In both, the entity mentioned at t is updated with g_t after the label is chosen. Every logit is divided by the
temperature τ, and ``sample`` returns log q_τ(z | x) of exactly what it drew. q applies the same masks as p, and
all its logits are finite, so its support is p's support: every drawn z has p(x, z) > 0 and every z with
p(x, z) > 0 can be drawn.
"""

from __future__ import annotations

import torch
from torch import nn

from ...protocol import CheckedProposal
from ..cuda_graphs import DEFAULT_CUDA_GRAPHS, graphs_in_effect
from ..encoder_cache import DocumentCache
from ..kglm.awd_lstm import AWDLSTMDropouts, embedding_dropout
from ..vocabulary import check_word_ids
from .drawing import beam_latents, sample_latents, sample_latents_static
from .heads import EntityHeads
from .latents import LATENT_KEYS, check_latents, without_autograd
from .scoring import score_latents

NO_DROPOUT = AWDLSTMDropouts()


class EntityNLMProposal(CheckedProposal, nn.Module):
    """q_τ(z | x) = Π_t q(z_t | ·) from its own LSTM over x, peeking (labels x_t after reading it) or not."""

    # "true", "false" or "auto": the sampler's per-token step in a CUDA graph (models/cuda_graphs.py)
    cuda_graphs = DEFAULT_CUDA_GRAPHS
    # what "auto" means on a CUDA device: no faster with graphs at full size, so eager (docs/speed.md, CUDA graphs)
    CUDA_GRAPHS_AUTO = False

    def __init__(
        self,
        vocab_size: int,
        bos_id: int,
        dim: int,
        hidden_size: int,
        num_layers: int,
        max_entities: int,
        max_mention_length: int,
        dropouts: AWDLSTMDropouts = NO_DROPOUT,
        chunk_size: int = 70,
    ):
        super().__init__()
        self.vocab_size, self.bos_id, self.chunk_size, self.dropoute = (
            vocab_size,
            bos_id,
            int(chunk_size),
            dropouts.dropoute,
        )
        self.token_embedding = nn.Embedding(vocab_size, dim)
        self.encoder = dropouts.encoder(dim, hidden_size, dim, num_layers)
        self.heads = EntityHeads(dim, max_entities, max_mention_length)
        self.nopeek_heads = EntityHeads(dim, max_entities, max_mention_length)
        nn.init.uniform_(self.token_embedding.weight, -0.1, 0.1)
        self._doc_cache = DocumentCache()

    @torch.no_grad()
    def copy_from_generative(self, model: nn.Module) -> EntityNLMProposal:
        """Start q from p's embedding, encoder and latent heads (both heads): q without peeking is then p's prior."""
        self.token_embedding.load_state_dict(model.token_embedding.state_dict())
        self.encoder.load_state_dict(model.encoder.state_dict())
        self.heads.load_state_dict(model.heads.state_dict())
        self.nopeek_heads.load_state_dict(model.heads.state_dict())
        return self

    # --- encoding -----------------------------------------------------------------------------------------------
    def encode_batch(self, x: torch.Tensor) -> torch.Tensor:
        """States g_0..g_T after reading @@START@@ x_1 .. x_t for rows of x [B, T]: [B, T + 1, D]."""
        inputs = torch.cat([x.new_full((x.shape[0], 1), self.bos_id), x], 1)
        emb = embedding_dropout(self.token_embedding.weight, inputs, self.dropoute, self.training)
        return self.encoder.encode_chunked(emb, self.chunk_size)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """g_0..g_T for one document x [T]: [T + 1, D]; cached per document in evaluation (no grad)."""
        x = self._check_x(x)
        return self._doc_cache.get(self, x, lambda: self.encode_batch(x.unsqueeze(0))[0])

    def train(self, mode: bool = True):
        self._doc_cache.clear()
        return super().train(mode)

    def _check_x(self, x: torch.Tensor) -> torch.Tensor:
        check_word_ids(x, self.vocab_size)
        return x.to(self.token_embedding.weight.device)

    def views(self, states: torch.Tensor, peek: bool) -> tuple[EntityHeads, torch.Tensor, torch.Tensor]:
        """(heads, labelling states, update states) from g_0..g_T [B, T + 1, D]: ([B, T, D], [B, T, D])."""
        if peek:
            return self.heads, states[:, 1:], states[:, 1:]
        return self.nopeek_heads, states[:, :-1], states[:, 1:]

    # --- scoring ------------------------------------------------------------------------------------------------
    @without_autograd
    def log_prob(self, x: torch.Tensor, z: dict, temperature: float = 1.0, peek: bool = True) -> torch.Tensor:
        """log q_τ(z_k | x) for K configurations: float64 [K] (−inf outside the support); differentiable."""
        x = self._check_x(x)
        z = {k: v.to(x.device) for k, v in z.items()} if isinstance(z, dict) else z
        R, _, _ = check_latents(z, x.numel())
        if x.numel() == 0:
            return torch.zeros(R.shape[0], dtype=torch.float64, device=x.device)
        return self.log_prob_batch(self.encode(x).unsqueeze(0), z, temperature, peek)

    def log_prob_batch(
        self, states: torch.Tensor, z: dict, temperature: float = 1.0, peek: bool = True, mask=None
    ) -> torch.Tensor:
        """log q_τ(z_k | x_k) from states [K|1, T + 1, D]: float64 [K]. ``mask`` (bool [K, T], optional) marks the
        real tokens of padded rows."""
        heads, h_label, h_update = self.views(states, peek)
        return score_latents(heads, h_label, h_update, z, temperature, mask)[0]

    # --- sampling and beam search -------------------------------------------------------------------------------
    def _sample(self, x, num_samples, temperature, peek, generator) -> tuple[dict, torch.Tensor]:
        """Draw K configurations z_k ~ q_τ(z | x): (dict of LongTensor [K, T], log q_τ(z_k | x) float64 [K])."""
        x = self._check_x(x)
        if x.numel() == 0:
            empty = {k: torch.zeros(num_samples, 0, dtype=torch.long, device=x.device) for k in LATENT_KEYS}
            return empty, torch.zeros(num_samples, dtype=torch.float64, device=x.device)
        heads, h_label, h_update = self.views(self.encode(x).unsqueeze(0), peek)
        if graphs_in_effect(self, x.device):
            return sample_latents_static(
                heads, h_label, h_update, num_samples, float(temperature), generator, capture=True
            )
        return sample_latents(heads, h_label, h_update, num_samples, float(temperature), generator)

    def _beam(self, x: torch.Tensor, beam_size: int) -> dict:
        """Up to ``beam_size`` distinct configurations with the highest q(z | x) (peeking, τ = 1): dict of [k', T]."""
        x = self._check_x(x)
        if x.numel() == 0:
            return {k: torch.zeros(1, 0, dtype=torch.long, device=x.device) for k in LATENT_KEYS}
        heads, h_label, h_update = self.views(self.encode(x).unsqueeze(0), True)
        return beam_latents(heads, h_label, h_update, beam_size)
