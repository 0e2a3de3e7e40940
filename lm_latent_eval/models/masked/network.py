"""The bundled mask predictor: a small bidirectional transformer encoder mapping ids [B, L] to logits [B, L, V]."""

from __future__ import annotations

import torch
from torch import nn

# MKL's sgemm sums a product of fewer rows than about a dozen along another path on AVX-512 CPUs, so a text's row
# would round differently alone than beside others (measured: bench/RESULTS.md); the CPU pads such a call to this many
# positions with copies of its first row, so that every row's numbers are the same in any batch
CPU_MIN_POSITIONS = 64


class MaskPredictor(nn.Module):
    """Token and learned position embeddings, ``num_layers`` pre-norm ``nn.TransformerEncoderLayer`` s (no causal
    mask: every position attends to every other), a final LayerNorm and a linear map to the vocabulary.

    Parameters
    ----------
    vocab_size : int
        V, the mask id included.
    d_model, num_layers, num_heads : int
        Width, depth and attention heads (feed-forward width 4 · d_model).
    max_length : int
        L_max, the longest input (rows of the position embedding).
    dropout : float
        Dropout inside the encoder layers (training only; eval mode switches it off).

    Examples
    --------
    >>> net = MaskPredictor(vocab_size=7, d_model=8, num_layers=1, num_heads=2, max_length=5)
    >>> net(torch.zeros(3, 4, dtype=torch.long)).shape
    torch.Size([3, 4, 7])
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int = 64,
        num_layers: int = 2,
        num_heads: int = 4,
        max_length: int = 64,
        dropout: float = 0.0,
    ):
        super().__init__()
        self.max_length = max_length
        self.embed = nn.Embedding(vocab_size, d_model)
        self.position = nn.Embedding(max_length, d_model)
        layer = nn.TransformerEncoderLayer(
            d_model, num_heads, 4 * d_model, dropout, batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.output = nn.Linear(d_model, vocab_size)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits [B, L, V] for ids [B, L] (L ≤ max_length); on the CPU a row's logits do not depend on the rows
        beside it (``CPU_MIN_POSITIONS``)."""
        B, L = ids.shape
        if ids.device.type == "cpu" and 0 < B * L < CPU_MIN_POSITIONS:
            ids = torch.cat([ids, ids[:1].expand(-(-CPU_MIN_POSITIONS // L) - B, -1)])
        positions = torch.arange(L, device=ids.device)
        hidden = self.embed(ids) + self.position(positions)
        return self.output(self.norm(self.encoder(hidden)))[:B]
