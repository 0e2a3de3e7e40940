"""The RNNG's prefix probability, for ``loglikelihood(context, continuation)``: P(a sentence starts with w_1..w_n).

After the SHIFT of w_n the word-synchronous steps (``stepwise.py``) have built a partial tree: the actions up to that
SHIFT. Summed over those, p(w_1..w_n, actions) is the probability that the generative story starts with w_1..w_n,
whatever comes next (more words, or the REDUCEs that close the tree and ``</s>``). The partial trees of n words are in
one-to-one correspondence with the trees (the closing REDUCEs are forced), so this view keeps the RNNG's trees as z,
its proposals (q of a tree is q of its partial tree: the closing REDUCEs have q = 1) and its enumeration, and only
``log_joint`` changes: a text without ``</s>`` scores a tree's actions up to the last SHIFT, none after. A text ending
with ``</s>`` is a whole sentence, scored as by the RNNG with the end counted, so for every context Σ_w P(starts with
context w) over the vocabulary (``</s>`` included) is P(starts with context): the declaration ``prefix_probability =
True`` holds (tests/contract/). SMC runs the same steps and stops after word n (the closing REDUCEs, q = p = 1 here,
are filled in by ``smc_latents``).

``RNNG.prefix_model()`` returns the view; ``latent_rnng``'s ``loglikelihood`` answers from it.
"""

from __future__ import annotations

import torch

from ...protocol import CheckedStepwise
from . import stepwise
from .enumerate import enumerate_trees
from .latents import REDUCE


class RNNGPrefix(CheckedStepwise):
    """P(a sentence starts with x) of an RNNG under the contract (the same network, trees and proposal)."""

    # no end of text unless x ends with </s>, which then ends the sentence
    prefix_probability = True
    # log_marginal lists every tree: ≤ 12 words
    exact_marginal_tractable = False

    def __init__(self, rnng):
        self.rnng = rnng
        self.proposal = rnng.proposal
        self.vocab = rnng.vocab

    @property
    def device(self) -> torch.device:
        return self.rnng.device

    def _ends_sentence(self, x: torch.Tensor) -> bool:
        return x.numel() > 0 and int(x[-1]) == self.rnng.eos_id

    def tokenize(self, text: str) -> torch.Tensor:
        """The words of the text, [T] (no </s>: a prefix)."""
        return self.rnng.token_ids(self.rnng.vocabulary.split(text), eos=False)

    def detokenize(self, x: torch.Tensor) -> str:
        return self.rnng.detokenize(x)

    def log_joint(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """log p(x, the actions of z_k up to the SHIFT of x's last word) for K trees z [K, 2T − 1]: float64 [K];
        with x ending in </s> the whole sentence's log p(x, z)."""
        return self.rnng.score_trees(x, z, prefix=not self._ends_sentence(x))

    @torch.no_grad()
    def log_marginal(self, x: torch.Tensor) -> float:
        """log P(a sentence starts with x) by listing every tree (≤ 12 words)."""
        if x.numel() == 0:
            return 0.0
        z = enumerate_trees(self.rnng.proposal.words(x).numel()).to(self.device)
        return float(
            torch.logsumexp(
                torch.cat([self.log_joint(x, z[s : s + 4096]) for s in range(0, len(z), 4096)]), 0
            )
        )

    # --- SMC: the RNNG's steps, stopped after the last word --------------------------------------------------------
    def _smc_init(self, x: torch.Tensor, num_particles: int, temperature: float, peek: bool):
        """The RNNG's particles for x [T], with </s> appended unless x ends the sentence."""
        if not self._ends_sentence(x) and x.numel():
            # steps 0..T−1 never reach the closing step
            x = torch.cat([x, x.new_tensor([self.rnng.eos_id])])
        return stepwise.init_particles(self.rnng, x, num_particles, temperature, peek)

    def smc_step(self, state, t: int, generator: torch.Generator | None):
        return stepwise.step_particles(self.rnng, state, t, generator)

    def smc_reorder(self, state, ancestors: torch.Tensor):
        return stepwise.reorder_particles(state, ancestors)

    def smc_latents(self, state) -> torch.Tensor:
        """The trees drawn: actions so far, closed by REDUCEs (the partial tree's one tree)."""
        z = stepwise.particle_latents(self.rnng, state)
        undrawn = torch.arange(z.shape[1], device=z.device) >= state.num_actions[:, None]
        return z.masked_fill(undrawn, REDUCE)
