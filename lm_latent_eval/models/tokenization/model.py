"""Any Hugging Face causal LM as a latent LM over its tokenizations: x = the text, z = a token sequence spelling it.

log p(x, z) = Σ_t log p(z_t | window before t) if the bytes of z spell x (concatenate to its UTF-8 bytes), else
−inf; the first token conditions on one prefix token (BOS, else EOS: lm-eval's ``prefix_token_id``), and sequences
longer than the context length L use lm-eval's disjoint rolling windows (``windows``). There is no end-of-text
event, so Σ_z p(x, z) is the probability that the model's token stream starts with a segmentation of x.
With ``cover_end`` (``with_cover_end()``) the last token may also run past the end of x: Σ_z p(x, z) is then the
probability that the generated text starts with x (used for the context of ``loglikelihood``).
"""

from __future__ import annotations

import copy
from typing import ClassVar

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from ...errors import UnsupportedError
from ...tensors import pad_rows
from ..stepwise_module import StepwiseFromModule
from . import canonical, stepwise
from .canonical import windows
from .lattice import SegmentationLattice
from .proposal import SegmentationProposal
from .vocab import ByteTrie, token_bytes

# padding of z rows [K, T_max]
PAD = -1
# as lm-eval's resolve_max_length
SEQLEN_CONFIG_ATTRS = ("n_positions", "max_position_embeddings", "n_ctx")
# float32 logits per forward pass of log_joint (512 MiB)
LOGIT_BUDGET = 2**27


def context_length(config, tokenizer, default: int = 2048) -> int:
    """L, resolved as lm-eval's hf backend does: config (text_config first), tokenizer.model_max_length, 2048."""
    cfg = getattr(config, "text_config", None) or config
    for attr in SEQLEN_CONFIG_ATTRS:
        value = getattr(cfg, attr, None)
        if value is not None:
            return int(value)
    model_max = getattr(tokenizer, "model_max_length", None)
    if model_max is not None and model_max < 10**29:
        return int(model_max)
    return default


class TokenizationLM(torch.nn.Module, StepwiseFromModule):
    """p(x) = Σ_{z spells x} p(z) for a transformers causal LM over a byte-level BPE vocabulary."""

    # log_joint sums the segmentations that spell exactly x; P(a text starts with x) is ``with_cover_end()``, which
    # latent_tokenization's loglikelihood uses for contexts
    prefix_probability = False
    # log_marginal enumerates segmentations: short texts only (auto picks SMC)
    exact_marginal_tractable = False
    # pretrained= is a transformers checkpoint (models.checkpoints.fits)
    reads_transformers_checkpoints = True
    # SMC, byte-synchronous: step t draws tokens until the bytes of x_0..x_t are spelled
    stepwise_module = stepwise
    # texts side by side (protocol.DocumentBatchLM): one node table, one pass per draw, shared forward passes
    documents_module = stepwise

    # options of from_pretrained that lm-eval's model_args may set (harness/model_args.py): name -> (type, help)
    MODEL_ARGS: ClassVar[dict[str, tuple[type, str]]] = {
        "canonical_mix": (
            float,
            "ε of the proposal's defensive mixture with the canonical token (default 0.9)",
        ),
        "particle_batch": (int, "particles decoded together (memory only; default 256)"),
        "max_length": (int, "context length L of the rolling windows (default: the model's)"),
    }

    def __init__(self, model, tokenizer, max_length: int | None = None, particle_batch: int = 256,
                 enumeration_limit: int = 100_000, cover_end: bool = False, canonical_mix: float = 0.9):  # fmt: skip
        super().__init__()
        self.model, self.tokenizer = model, tokenizer
        self.prefix_token = (
            tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
        )
        if self.prefix_token is None:
            raise ValueError(
                "the tokenizer has neither a BOS nor an EOS token to condition the first token on"
            )
        self.max_length = int(max_length or context_length(model.config, tokenizer))
        self.vocab = token_bytes(tokenizer, model.get_output_embeddings().weight.shape[0])
        self.trie = ByteTrie(self.vocab)
        self.particle_batch = int(particle_batch)
        self.enumeration_limit = int(enumeration_limit)
        self.cover_end = cover_end
        if not 0.0 <= float(canonical_mix) < 1.0:
            raise ValueError(f"canonical_mix must be in [0, 1), got {canonical_mix!r}")
        self.canonical_mix = float(canonical_mix)
        self.proposal = SegmentationProposal(self)
        self._lattices: dict[tuple, SegmentationLattice] = {}
        # log p of the proposal's last draws, keyed by z: (log p(z), True) when z fits in one window, else (the sum
        # over its full blocks of L tokens, False): the decoder reads exactly p's context there
        self.memo: dict[tuple[int, ...], tuple[float, bool]] = {}

    @classmethod
    def from_pretrained(cls, path: str, **kwargs):
        """Load model and tokenizer with transformers' Auto classes (local dir or Hub id)."""
        return cls(AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path), **kwargs)

    def with_cover_end(self) -> TokenizationLM:
        """The same network with ``cover_end``: Σ_z p(x, z) = P(generated text starts with x)."""
        view = copy.copy(self)
        view.cover_end = True
        view.proposal = SegmentationProposal(view)
        view._lattices, view.memo = {}, {}
        return view

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def canonical_log_likelihood(self, text: str) -> float:
        """log p(x, z*) of the tokenizer's own segmentation z*, as lm-eval's ``hf`` backend scores it (its rolling
        windows, ``canonical.loglikelihood_rolling``): ``estimator=canonical``."""
        return canonical.loglikelihood_rolling(self, [text])[0]

    def canonical_conditionals(self, pairs: list[tuple[str, str]]) -> list[tuple[float, bool]]:
        """(log p(continuation tokens | context tokens), greedy) per pair, as lm-eval's ``hf`` backend answers
        ``loglikelihood`` (``canonical.loglikelihood``)."""
        return canonical.loglikelihood(self, pairs)

    # ---- text and lattice ----------------------------------------------------------------------------------------

    def tokenize(self, text: str) -> torch.Tensor:
        """The canonical segmentation: the tokenizer's ids [T] without special tokens; its bytes must spell text."""
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        spelled = b"".join(self.vocab[i] or b"\x00<special>" for i in ids)
        if spelled != text.encode("utf-8"):
            raise ValueError(
                f"text {text[:60]!r}: its canonical tokens spell {spelled[:80]!r}, not the text's UTF-8 bytes (a "
                "normalizer or special token changed it); segmentations of the text are undefined"
            )
        return torch.tensor(ids, dtype=torch.long)

    def text_bytes(self, x: torch.Tensor) -> bytes:
        """The bytes spelled by token ids x."""
        return b"".join(self.vocab[i] for i in x.tolist())

    def lattice(self, x: torch.Tensor) -> SegmentationLattice:
        """The segmentation lattice of the text spelled by x (one cached per text)."""
        key = tuple(x.tolist())
        if key not in self._lattices:
            if len(self._lattices) > 64:
                self._lattices.clear()
            self._lattices[key] = SegmentationLattice(
                self.text_bytes(x), self.trie, self.vocab, self.cover_end
            )
        return self._lattices[key]

    # ---- the joint ---------------------------------------------------------------------------------------------

    @torch.no_grad()
    def score(self, rows: list[list[int]], last_window_only: bool = False) -> torch.Tensor:
        """log p(z) = Σ_t log p(z_t | window) for token lists, float64 [K]; windows as lm-eval's hf backend
        (``last_window_only``: the targets of each row's last window only)."""
        device, L, V = self.device, self.max_length, self.model.get_output_embeddings().weight.shape[0]
        out = torch.zeros(len(rows), dtype=torch.float64)
        # (row, input ids, number of scored targets at the end)
        pieces = []
        for r, row in enumerate(rows):
            ids = [self.prefix_token, *row]
            for s, e, lo in windows(len(row), L)[-1:] if last_window_only else windows(len(row), L):
                pieces.append((r, ids[lo:e], ids[s + 1 : e + 1]))
        pieces.sort(key=lambda p: len(p[1]))
        budget = max(1, LOGIT_BUDGET // V)
        i = 0
        while i < len(pieces):
            width = len(pieces[i][1])
            j = i + 1
            while j < len(pieces) and (j - i + 1) * len(pieces[j][1]) <= budget:
                j += 1
            group = pieces[i:j]
            width = max(len(p[1]) for p in group)
            inputs = torch.full((len(group), width), self.prefix_token, dtype=torch.long)
            targets = torch.zeros((len(group), width), dtype=torch.long)
            mask = torch.zeros((len(group), width), dtype=torch.bool)
            for g, (_, inp, tgt) in enumerate(group):
                # right padding: causal attention never reads it
                inputs[g, : len(inp)] = torch.tensor(inp)
                targets[g, len(inp) - len(tgt) : len(inp)] = torch.tensor(tgt)
                mask[g, len(inp) - len(tgt) : len(inp)] = True
            logp = torch.log_softmax(self.model(inputs.to(device)).logits.float(), -1)
            picked = logp.gather(-1, targets.to(device)[..., None])[..., 0].double().cpu()
            sums = (picked * mask).sum(-1)
            for g, (r, _, _) in enumerate(group):
                out[r] += sums[g]
            i = j
        return out

    def log_joint(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """log p(x, z_k), float64 [K]: −inf where z_k (a row of ids padded with −1) does not spell x."""
        lattice = self.lattice(x)
        rows = [[t for t in row if t != PAD] for row in z.tolist()]
        out = torch.full((len(rows),), float("-inf"), dtype=torch.float64)
        todo, last = [], []
        for k, row in enumerate(rows):
            if not lattice.contains(row):
                continue
            cached = self.memo.get(tuple(row))
            if cached is None:
                todo.append(k)
                continue
            out[k], complete = cached
            # the full blocks come from the decoder; the last window reads more left context
            if not complete:
                last.append(k)
        if todo:
            out[todo] = self.score([rows[k] for k in todo])
        if last:
            out[last] += self.score([rows[k] for k in last], last_window_only=True)
        return out

    @torch.no_grad()
    def log_marginal(self, x: torch.Tensor) -> float:
        """Exact log Σ_z p(x, z) by enumerating every segmentation (``enumeration_limit`` at most; short texts)."""
        lattice = self.lattice(x)
        try:
            rows = lattice.enumerate(self.enumeration_limit)
        except ValueError as err:
            raise UnsupportedError(f"exact marginalization of {lattice.data[:60]!r}: {err}") from None
        if not rows:
            return float("-inf")
        return float(torch.logsumexp(self.score(rows), 0))

    @torch.no_grad()
    def sample_text(
        self, prefix_text: str, max_tokens: int, generator: torch.Generator | None = None, stop=None
    ) -> str:
        """Ancestral sampling from p(· | prefix token ⊕ canonical tokens of the prefix) at temperature 1."""
        ids = torch.tensor([[self.prefix_token, *self.tokenize(prefix_text).tolist()]], device=self.device)
        # generate draws from torch's global stream: seeded from ``generator`` in a fork of it, so the caller's
        # global random state is left as it was
        with torch.random.fork_rng(devices=[ids.device] if ids.device.type == "cuda" else []):
            if generator is not None:
                torch.manual_seed(
                    int(torch.randint(0, 2**31 - 1, (1,), generator=generator, device=generator.device))
                )
            out = self.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True,
                                      max_new_tokens=max_tokens, top_k=0,
                                      pad_token_id=self.tokenizer.eos_token_id)  # fmt: skip
        return self.tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)

    def segmentations(self, x: torch.Tensor) -> torch.Tensor:
        """Every segmentation of the text, [S, T_max] padded with −1 (enumeration; short texts)."""
        return pad_rows(self.lattice(x).enumerate(self.enumeration_limit))
