"""A hidden Markov language model: p(x, z) = π(z_1) B(z_1, x_1) Π_{t>1} A(z_{t-1}, z_t) B(z_t, x_t)."""

from __future__ import annotations

import torch
from huggingface_hub import PyTorchModelHubMixin
from torch import nn

from ...checks import check_text
from ..checkpoints import StrictLoading
from ..stepwise_module import StepwiseFromModule
from ..vocabulary import check_id_range
from . import stepwise
from .parameters import HMMParameters, forward_log_alpha
from .proposal import HMMProposal
from .tokenizer import UNK, WordTokenizer


class HMMLanguageModel(
    StepwiseFromModule,
    nn.Module,
    StrictLoading,
    PyTorchModelHubMixin,
    library_name="lm-latent-eval",
    tags=["latent-variable-lm", "hmm"],
):
    """Word-level HMM LM with S hidden states; the exact reference model for the IS / beam estimators.

    ``hmm`` holds the model's (π, A, B); ``proposal`` holds a second, deliberately mismatched HMM
    (π', A', B') used only as q(z | x), so importance sampling has real variance while log p(x) stays exact.
    The vocabulary (``<unk>`` included) is part of config.json.
    """

    # log_joint has no end-of-text event: Σ_z p(x, z) = P(a text starts with x)
    prefix_probability = True
    # log_marginal is the forward algorithm: O(T · states²) on any text
    exact_marginal_tractable = True
    # SMC (stepwise.py says the proposal each peek mode uses); texts side by side in the same module
    stepwise_module = documents_module = stepwise

    def __init__(self, vocab: list[str], num_states: int = 12, seed: int = 0):
        super().__init__()
        self.tokenizer = WordTokenizer(vocab)
        self.num_states = num_states
        # random initial parameters (the starting point of training) depend only on the config;
        # the proposal starts as a copy and is made to differ by training (see train.py)
        self.hmm = HMMParameters(num_states, len(vocab), torch.Generator().manual_seed(seed))
        self.proposal = HMMProposal(num_states, len(vocab))
        self.proposal.load_state_dict(self.hmm.state_dict())

    @property
    def vocab(self) -> list[str]:
        return self.tokenizer.vocab

    @property
    def device(self) -> torch.device:
        return self.hmm.initial_logits.device

    def tokenize(self, text: str) -> torch.Tensor:
        """LongTensor[T] of word ids (lower-cased, punctuation split off, unknown words -> ``<unk>``)."""
        return self.tokenizer.encode(text)

    def detokenize(self, ids) -> str:
        """Words of the ids joined by spaces (lower-cased; ``<unk>`` stays ``<unk>``)."""
        return self.tokenizer.decode(ids)

    def _check_x(self, x: torch.Tensor) -> torch.Tensor:
        check_text(x)
        check_id_range(x, len(self.vocab), "token ids")
        return x.to(self.device)

    @torch.no_grad()
    def log_joint(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """log p(x_1..x_T, z_1..z_T) for z [K, T]: float64 [K] (prefix probability: no end event)."""
        x = self._check_x(x)
        z = z.to(self.device)
        if z.dim() != 2 or z.shape[1] != x.shape[0]:
            raise ValueError(f"z must have shape [K, T={x.shape[0]}], got {tuple(z.shape)}")
        check_id_range(z, self.num_states, "states")
        K, T = z.shape
        if T == 0:
            return torch.zeros(K, dtype=torch.float64, device=self.device)
        log_pi, log_A, log_B = self.hmm.log_probs()
        score = log_pi[z[:, 0]] + log_B[z, x].sum(1)
        if T > 1:
            score = score + log_A[z[:, :-1], z[:, 1:]].sum(1)
        return score

    @torch.no_grad()
    def log_marginal(self, x: torch.Tensor) -> float:
        """log p(x) = log Σ_z p(x, z) by the forward algorithm in float64 (0.0 for T = 0)."""
        x = self._check_x(x)
        if x.numel() == 0:
            return 0.0
        log_pi, log_A, _ = self.hmm.log_probs()
        return float(torch.logsumexp(forward_log_alpha(log_pi, log_A, self.hmm.emission_scores(x))[-1], 0))

    @torch.no_grad()
    def sample_text(
        self,
        prefix_text: str,
        max_tokens: int,
        generator: torch.Generator | None = None,
        stop: list[str] | None = None,
    ) -> str:
        """Ancestral sample of a continuation from p(· | prefix): filter z_T on the prefix, run the chain on.

        Returns the continuation text (led by a space when the prefix is non-empty), cut before the first
        stop string; stop strings match case-insensitively, since the model writes lower-case words.
        """
        x = self._check_x(self.tokenize(prefix_text))
        log_pi, log_A, log_B = self.hmm.log_probs()
        if x.numel():
            log_alpha = forward_log_alpha(log_pi, log_A, self.hmm.emission_scores(x))[-1]
            # ∝ p(z_{T+1} | x)
            next_state = torch.logsumexp(log_alpha[:, None] + log_A, 0)
        else:
            next_state = log_pi
        stops = [s.lower() for s in (stop or []) if s]
        words: list[int] = []
        out = ""
        for _ in range(max(0, int(max_tokens))):
            state = torch.multinomial(torch.softmax(next_state, 0), 1, generator=generator).item()
            words.append(torch.multinomial(log_B[state].exp(), 1, generator=generator).item())
            next_state = log_A[state]
            text = self.detokenize(words)
            out = " " + text if x.numel() and text[0] not in ".,;:!?)" else text
            if any(s in out for s in stops):
                break
        return out[: min((out.find(s) for s in stops if s in out), default=len(out))]

    def extra_repr(self) -> str:
        return f"num_states={self.num_states}, vocab_size={len(self.vocab)}, unk={UNK!r}"
