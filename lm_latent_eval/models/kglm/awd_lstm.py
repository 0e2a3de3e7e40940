"""AWD-LSTM encoder (Merity et al., 2018) as used by KGLM: stacked 1-layer LSTMs with DropConnect on W_hh.

Layer i maps ``input_size`` (i = 0) or ``hidden_size`` to ``hidden_size`` (i < L-1) or ``output_size`` (last
layer). In training, W_hh of every layer is dropped with probability ``weight_dropout`` (one mask per forward
pass), inputs get a time-locked dropout mask (``input_dropout``) and outputs another (``output_dropout``). In
evaluation the module is a plain deterministic LSTM stack. ``state`` carries (h, c) of every layer across chunks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

LSTMState = list[tuple[torch.Tensor, torch.Tensor]]


def locked_dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Dropout with one mask per sequence shared over time: x [B, T, D]."""
    if not training or p <= 0:
        return x
    mask = x.new_empty(x.shape[0], 1, x.shape[2]).bernoulli_(1 - p) / (1 - p)
    return x * mask


def embedding_dropout(weight: torch.Tensor, ids: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Look up rows of ``weight`` after dropping whole rows (words) with probability p: ids [...] -> [..., D]."""
    if training and p > 0:
        mask = weight.new_empty(weight.shape[0], 1).bernoulli_(1 - p) / (1 - p)
        weight = weight * mask
    return F.embedding(ids, weight)


class AWDLSTM(nn.Module):
    """``layers[i]`` is an ``nn.LSTM`` whose ``weight_hh_l0`` is the raw (undropped) recurrent weight."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        output_size: int,
        num_layers: int = 3,
        weight_dropout: float = 0.5,
        input_dropout: float = 0.65,
        output_dropout: float = 0.4,
    ):
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}")
        sizes = [input_size] + [hidden_size] * (num_layers - 1) + [output_size]
        self.layers = nn.ModuleList(
            nn.LSTM(sizes[i], sizes[i + 1], batch_first=True) for i in range(num_layers)
        )
        self.weight_dropout = weight_dropout
        self.input_dropout = input_dropout
        self.output_dropout = output_dropout

    @property
    def output_size(self) -> int:
        return self.layers[-1].hidden_size

    def forward(self, inputs: torch.Tensor, state: LSTMState | None = None) -> tuple[torch.Tensor, LSTMState]:
        """inputs [B, T, D_in] -> (outputs [B, T, D_out], state after the last step)."""
        h = locked_dropout(inputs, self.input_dropout, self.training)
        new_state: LSTMState = []
        for i, layer in enumerate(self.layers):
            prev = None if state is None else state[i]
            if self.training and self.weight_dropout > 0:
                dropped = F.dropout(layer.weight_hh_l0, self.weight_dropout, training=True)
                h, hc = functional_call(layer, {"weight_hh_l0": dropped}, (h, prev))
            else:
                h, hc = layer(h, prev)
            new_state.append(hc)
        return locked_dropout(h, self.output_dropout, self.training), new_state

    def encode_chunked(
        self, inputs: torch.Tensor, chunk_size: int, state: LSTMState | None = None
    ) -> torch.Tensor:
        """Run over a long sequence in chunks of ``chunk_size`` steps, carrying (h, c) across chunks: [B, T, D_out]."""
        if inputs.shape[1] == 0:
            return inputs.new_zeros(inputs.shape[0], 0, self.output_size)
        outs = []
        for s in range(0, inputs.shape[1], max(1, int(chunk_size))):
            out, state = self(inputs[:, s : s + chunk_size], state)
            outs.append(out)
        return torch.cat(outs, 1)


@dataclass(frozen=True)
class AWDLSTMDropouts:
    """The four dropout rates of an AWD-LSTM language model, named as KGLM and EntityNLM name them: ``dropout`` on the
    encoder's output, ``dropouti`` on its input, ``dropoute`` on whole rows of the token embedding, ``wdrop`` on the
    recurrent weights. A model builds its encoder with them and hands them to its proposal."""

    dropout: float = 0.0
    dropouti: float = 0.0
    dropoute: float = 0.0
    wdrop: float = 0.0

    def encoder(self, input_size: int, hidden_size: int, output_size: int, num_layers: int) -> AWDLSTM:
        """An ``AWDLSTM`` with these rates (``dropoute`` is the embedding's, applied before the encoder)."""
        return AWDLSTM(
            input_size, hidden_size, output_size, num_layers, self.wdrop, self.dropouti, self.dropout
        )
