"""A plain Hugging Face causal LM seen through the latent-LM contract: z is a single trivial configuration.

With one latent value, p(x, z) = p(x), q(z | x) = 1, and every estimator (IS, SMC, beam, exact) returns the exact
log p(x); SMC's increments are the chain rule's log p(x_t | x_<t). It lets the plain-LM case run through our backend
and be compared with lm-eval's ``hf`` backend.
"""

from __future__ import annotations

import inspect

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from ..protocol import CheckedProposal, CheckedStepwise


class _TrivialProposal(CheckedProposal):
    """q(z | x) = 1 on the single configuration z = 0."""

    def _sample(self, x, num_samples, temperature, peek, generator):
        """z [K, 1] of zeros, log q = 0 [K] (tempering a point mass leaves it a point mass)."""
        return torch.zeros(num_samples, 1, dtype=torch.long), torch.zeros(num_samples, dtype=torch.float64)

    def _beam(self, x, beam_size):
        """The one configuration."""
        return torch.zeros(1, 1, dtype=torch.long)


class CausalLMAsLatent(torch.nn.Module, CheckedStepwise):
    """log p(x) = Σ_t log p(x_t | bos, x_<t) of a transformers causal LM, scored after a prefix token.

    Texts longer than the context length L go in lm-eval's disjoint windows (``windows``), ``window_batch`` windows
    per forward pass.
    """

    # log_joint has no end-of-text event: Σ_z p(x, z) = P(a text starts with x)
    prefix_probability = True
    # one configuration: log_marginal is the LM's own log-likelihood
    exact_marginal_tractable = True
    # pretrained= is a transformers checkpoint (models.checkpoints.fits)
    reads_transformers_checkpoints = True

    def __init__(self, model, tokenizer, max_length: int | None = None, window_batch: int = 8):
        super().__init__()
        self.model = model
        self.tokenizer = tokenizer
        self.proposal = _TrivialProposal()
        self.prefix_token = (
            tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
        )
        if self.prefix_token is None:
            raise ValueError(
                "the tokenizer has neither a BOS nor an EOS token to condition the first token on"
            )
        self.max_length = (
            max_length or getattr(model.config, "n_positions", None) or model.config.max_position_embeddings
        )
        self.window_batch = int(window_batch)
        # (token ids, log p(x_t | x_<t) [T]) of the last document
        self._memo = None

    @classmethod
    def from_pretrained(cls, path: str, **kwargs):
        """Load model and tokenizer with transformers' Auto classes (local dir or Hub id)."""
        return cls(AutoModelForCausalLM.from_pretrained(path, **kwargs), AutoTokenizer.from_pretrained(path))

    def tokenize(self, text: str) -> torch.Tensor:
        """Token ids [T] of the model's own tokenizer, without special tokens."""
        return torch.tensor(self.tokenizer(text, add_special_tokens=False)["input_ids"], dtype=torch.long)

    def windows(self, num_tokens: int) -> list[tuple[int, int]]:
        """Disjoint blocks [s, e) of at most L = max_length targets; block [s, e) is scored from ids[max(0, e − L) : e].

        With ids = prefix ⊕ x, target x_t (s ≤ t < e) then conditions on ids[max(0, e − L) : t + 1]: the first block
        on the prefix, a later block's first target on only the token before it. These are the windows of lm-eval's
        hf backend (``get_rolling_token_windows(..., context_len=1)``), so both report the same log p(x).
        """
        return [(s, min(num_tokens, s + self.max_length)) for s in range(0, num_tokens, self.max_length)]

    @torch.no_grad()
    def token_log_probs(self, x: torch.Tensor) -> torch.Tensor:
        """log p(x_t | window before t) for every token, float64 [T]; windows of full length L go through the network
        ``window_batch`` at a time (a fixed grouping, so the numbers never depend on lm-eval's batch_size)."""
        key = tuple(x.tolist())
        # log_joint asks once per particle chunk
        if self._memo is not None and self._memo[0] == key:
            return self._memo[1]
        device = next(self.model.parameters()).device
        ids = torch.cat([torch.tensor([self.prefix_token]), x.cpu()]).to(device)
        blocks = self.windows(x.numel())
        out = torch.zeros(x.numel(), dtype=torch.float64)
        for b in range(0, len(blocks), self.window_batch):
            group = blocks[b : b + self.window_batch]
            # equal lengths: with T ≥ L every window is L long; with T < L there is one window
            inputs = torch.stack([ids[max(0, e - self.max_length) : e] for _, e in group])
            # [W, L, V]
            logp = torch.log_softmax(self.model(inputs).logits.float(), -1)
            for row, (s, e) in enumerate(group):
                targets = ids[s + 1 : e + 1]
                out[s:e] = logp[row, -(e - s) :].gather(-1, targets[:, None])[:, 0].double().cpu()
        self._memo = (key, out)
        return out

    def log_marginal(self, x: torch.Tensor) -> float:
        """Exact log p(x) = Σ_t log p(x_t | window before t), float64."""
        return float(self.token_log_probs(x).sum())

    def log_joint(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """log p(x, z) = log p(x) for the single configuration: float64 [K]."""
        return torch.full((z.shape[0],), self.log_marginal(x), dtype=torch.float64)

    # ---- the stepwise part (SMC): nothing to draw, the increment of token t is log p(x_t | x_<t) ----------------------

    def _smc_init(self, x: torch.Tensor, num_particles: int, temperature: float, peek: bool):
        """K identical particles of x [T]: (per-token log probabilities [T], K, tokens done)."""
        return [self.token_log_probs(x), int(num_particles), 0]

    def smc_step(self, state, t: int, generator: torch.Generator | None):
        """(state, log p(x_t | x_<t) for every particle: float64 [K])."""
        log_p, k, done = state
        if t != done or not 0 <= t < log_p.numel():
            raise ValueError(f"smc_step: expected token {done} of {log_p.numel()}, got t = {t}")
        state[2] = t + 1
        return state, log_p[t].expand(k).clone()

    def smc_reorder(self, state, ancestors: torch.Tensor):
        # every particle is the same
        return state

    def smc_latents(self, state) -> torch.Tensor:
        return torch.zeros(state[1], 1, dtype=torch.long)

    @torch.no_grad()
    def sample_text(
        self, prefix_text: str, max_tokens: int, generator: torch.Generator | None = None, stop=None
    ) -> str:
        """Ancestral sampling from p(· | prefix) at temperature 1 (generate with do_sample)."""
        device = next(self.model.parameters()).device
        ids = torch.cat([torch.tensor([self.prefix_token]), self.tokenize(prefix_text)]).to(device)
        # generate draws from torch's global stream: seeded from ``generator`` in a fork of it, so the caller's
        # global random state is left as it was
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            if generator is not None:
                torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=generator)))
            out = self.model.generate(
                ids[None],
                do_sample=True,
                max_new_tokens=max_tokens,
                top_k=0,
                pad_token_id=self.tokenizer.eos_token_id,
            )
        return self.tokenizer.decode(out[0, ids.numel() :], skip_special_tokens=True)


def cache_step(model, inputs: torch.Tensor, cache, **kwargs):
    """One cached forward step: (outputs, the cache to pass next); ``kwargs`` (attention_mask, position_ids) go to the
    model. transformers ≥ 5.x names the cache ``cache`` (its ``past_key_values`` is deprecated, with a warning on
    every call); earlier versions name it ``past_key_values``."""
    if "cache" in inspect.signature(model.forward).parameters:
        out = model(input_ids=inputs, cache=cache, use_cache=True, **kwargs)
        return out, out.cache
    out = model(input_ids=inputs, past_key_values=cache, use_cache=True, **kwargs)
    return out, out.past_key_values
