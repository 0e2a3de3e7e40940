"""Latent Dirichlet allocation as a latent LM: p(x, z) = p(z) Π_t Φ[z_t, x_t] with θ integrated out (urn.py)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import ClassVar

import torch
from huggingface_hub import PyTorchModelHubMixin
from torch import nn

from ...checks import check_text
from ...errors import UnsupportedError
from ..stepwise_module import StepwiseFromModule
from ..vocabulary import check_id_range
from . import stepwise
from .exact import exact_work, log_marginal_dp
from .loaders import LOADER_ARGS, detect_format, load_library_model
from .proposal import LDAProposal
from .tokenizer import DEFAULT_TOKEN_PATTERN, LDATokenizer
from .urn import log_prior, topic_counts

# the proposal's view of the words ahead (lookahead.py): none (the urn, Wallach et al.) or cvb0 (twisted SMC)
LOOKAHEADS = ("cvb0", "none")
DEFAULT_LOOKAHEAD = "cvb0"
# K² C(T + K, K) of the exact dynamic program: K = 4 up to T = 165 tokens (seconds), K = 8 up to T = 22
DEFAULT_MAX_EXACT_WORK = 500_000_000


class LDA(
    StepwiseFromModule,
    nn.Module,
    PyTorchModelHubMixin,
    library_name="lm-latent-eval",
    tags=["latent-variable-lm", "lda", "topic-model"],
):
    """An LDA topic model over its own vocabulary: topics Φ [K, V] (rows sum to 1), Dirichlet prior α [K].

    z_t is the topic of token t; with θ ~ Dir(α) integrated out, p(x, z) = Γ(Σα)/Γ(T + Σα) Π_k Γ(n_k + α_k)/Γ(α_k) ·
    Π_t Φ[z_t, x_t], a product of per-token factors (the Pólya urn). ``log_marginal`` is exact by dynamic programming
    over topic counts where that is feasible (``max_exact_work``), so ``estimator=auto`` picks SMC.
    Optionally the topic-word pseudo-counts λ [K, V] (Φ = λ / Σ_w λ for a model trained here, gensim and MALLET) and the
    topic-word prior η they came from, which scikit-learn's and gensim's own perplexity need (``reports/lda_peers``).
    """

    # no end-of-text event: Σ_z p(x, z) = P(a document starts with x)
    prefix_probability = True
    # the dynamic program only for few topics and short documents
    exact_marginal_tractable = False
    # SMC, token by token (stepwise.py: the urn's proposal, optionally with the words ahead); texts side by side there
    # too, None where the lookahead's tables padded to the longest text would be too large
    stepwise_module = documents_module = stepwise

    MODEL_ARGS: ClassVar[dict[str, tuple[type, str]]] = {
        "unknown_words": (
            str,
            "drop (default, as LDA libraries do: perplexity per vocabulary token) or error",
        ),
        "lookahead": (
            str,
            (
                "cvb0 (default): the proposal and SMC's targets see the words ahead (expected topic counts of a "
                "CVB0 fit: twisted SMC) or none: the urn times the token's topic probability (Wallach et al.'s "
                "left-to-right)"
            ),
        ),
        "max_exact_work": (
            int,
            f"refuse the exact marginal beyond K² C(T + K, K) (default {DEFAULT_MAX_EXACT_WORK:,})",
        ),
        "lda_format": (
            str,
            "auto (default), checkpoint, sklearn, gensim, tomotopy or mallet: what pretrained= is",
        ),
        "vocabulary": (
            Path,
            "a word per line: the vocabulary of a bare scikit-learn LatentDirichletAllocation",
        ),
        "alpha": (str, "MALLET files: α per topic, one value or one per topic separated by ':'"),
        "mallet_state": (Path, "MALLET files: the --output-state file, whose header gives α and β"),
        "token_pattern": (str, "regular expression of a token (default scikit-learn's (?u)\\b\\w\\w+\\b)"),
        "topic_estimate": (
            str,
            "scikit-learn / gensim: mean (Φ = λ / Σλ, default) or exp_expected_log (renormalized)",
        ),
    }

    def __init__(
        self,
        vocab: list[str],
        num_topics: int = 4,
        token_pattern: str = DEFAULT_TOKEN_PATTERN,
        lowercase: bool = True,
        unknown_words: str = "drop",
        max_exact_work: int = DEFAULT_MAX_EXACT_WORK,
        has_pseudocounts: bool = False,
        source: str = "lm-latent-eval",
        lookahead: str = DEFAULT_LOOKAHEAD,
    ):
        super().__init__()
        if not isinstance(num_topics, int) or num_topics <= 0:
            raise ValueError(f"num_topics must be a positive integer, got {num_topics!r}")
        self.tokenizer = LDATokenizer(vocab, token_pattern, lowercase, unknown_words)
        self.num_topics, self.max_exact_work, self.source = num_topics, int(max_exact_work), source
        if lookahead not in LOOKAHEADS:
            raise ValueError(f"lookahead must be one of {', '.join(LOOKAHEADS)}, got {lookahead!r}")
        self.lookahead = lookahead
        V = len(vocab)
        self.register_buffer("phi", torch.full((num_topics, V), 1.0 / max(V, 1), dtype=torch.float64))
        self.register_buffer("alpha", torch.full((num_topics,), 1.0 / num_topics, dtype=torch.float64))
        self.register_buffer(
            "pseudocounts", torch.zeros(num_topics if has_pseudocounts else 0, V, dtype=torch.float64)
        )
        self.register_buffer("eta", torch.tensor(math.nan, dtype=torch.float64))
        self.proposal = LDAProposal(self)

    # ---- parameters -----------------------------------------------------------------------------------------------

    @classmethod
    def from_parameters(cls, phi, alpha, vocab, pseudocounts=None, eta: float | None = None, **config) -> LDA:
        """A model from topics Φ [K, V] (rows normalized here), α (a number or [K]) and the vocabulary."""
        phi = torch.as_tensor(phi, dtype=torch.float64)
        model = cls(
            list(vocab), num_topics=int(phi.shape[0]), has_pseudocounts=pseudocounts is not None, **config
        )
        model.set_parameters(phi, alpha, pseudocounts, eta)
        return model

    @torch.no_grad()
    def set_parameters(self, phi, alpha, pseudocounts=None, eta: float | None = None) -> None:
        """Check and set Φ (each row normalized to sum 1 unless it does), α (> 0) and the optional λ and η."""
        K, V = self.phi.shape
        phi = torch.as_tensor(phi, dtype=torch.float64).cpu()
        alpha = torch.as_tensor(alpha, dtype=torch.float64).cpu()
        alpha = alpha.expand(K).clone() if alpha.dim() == 0 else alpha
        if phi.shape != (K, V):
            raise ValueError(f"Φ must have shape [topics={K}, vocabulary={V}], got {tuple(phi.shape)}")
        if alpha.shape != (K,) or not (torch.isfinite(alpha).all() and (alpha > 0).all()):
            raise ValueError(f"α must be {K} finite numbers > 0, got {alpha.tolist()}")
        if not torch.isfinite(phi).all() or (phi < 0).any() or (phi.sum(1) <= 0).any():
            raise ValueError("Φ must be finite and ≥ 0, with a positive sum in every topic")
        if not torch.allclose(phi.sum(1), torch.ones(K, dtype=torch.float64), rtol=0, atol=1e-12):
            # normalized rows (a loaded checkpoint's are kept bit for bit)
            phi = phi / phi.sum(1, keepdim=True)
        never = (phi.max(0).values <= 0).nonzero().flatten()
        if never.numel():
            word = self.tokenizer.vocab[int(never[0])]
            raise ValueError(
                f"{never.numel()} vocabulary words (e.g. {word!r}) have probability 0 under every topic"
            )
        self.phi.copy_(phi.to(self.phi.device))
        self.alpha.copy_(alpha.to(self.alpha.device))
        if pseudocounts is not None:
            self.pseudocounts.copy_(torch.as_tensor(pseudocounts, dtype=torch.float64).to(self.phi.device))
        self.eta.fill_(math.nan if eta is None else float(eta))

    @classmethod
    def from_pretrained(
        cls, pretrained_model_name_or_path, *, lda_format: str | None = None, **kwargs
    ) -> LDA:
        """Our checkpoint folder (or Hub id), or a model file of scikit-learn, gensim, tomotopy or MALLET
        (``loaders.py``; ``lda_format`` auto-detected unless given)."""
        fmt = detect_format(pretrained_model_name_or_path) if lda_format in (None, "auto") else lda_format
        if fmt != "checkpoint":
            return load_library_model(cls, fmt, pretrained_model_name_or_path, **kwargs)
        given = [k for k in LOADER_ARGS if kwargs.pop(k, None) is not None]
        if given:
            raise ValueError(f"{given} apply to models of LDA libraries, not to an lm-latent-eval checkpoint")
        return super().from_pretrained(pretrained_model_name_or_path, **kwargs)

    @classmethod
    def _from_pretrained(cls, *, strict: bool = True, **kwargs):
        """Load with strict=True (a missing tensor is an error), then check Φ and α."""
        model = super()._from_pretrained(strict=strict, **kwargs)
        model.set_parameters(model.phi.clone(), model.alpha.clone(), None, float(model.eta))
        return model

    def to(self, *args, **kwargs) -> LDA:
        """Move to a device; a dtype is ignored: Φ and α stay float64 (the LDA has no network to run in low
        precision, and rounding Φ would change every number)."""
        device = torch._C._nn._parse_to(*args, **kwargs)[0]
        return super().to(device) if device is not None else self

    @property
    def vocab(self) -> list[str]:
        return self.tokenizer.vocab

    @property
    def device(self) -> torch.device:
        return self.phi.device

    def log_phi_columns(self, x: torch.Tensor) -> torch.Tensor:
        """log Φ[k, x_t] as float64 [T, topics]."""
        return torch.log(self.phi.to(torch.float64)[:, x].t())

    # ---- the contract ---------------------------------------------------------------------------------------------

    def tokenize(self, text: str) -> torch.Tensor:
        """LongTensor [T] of vocabulary ids (``token_pattern`` tokens; unknown words dropped or refused)."""
        return self.tokenizer.encode(text).to(self.device)

    def detokenize(self, ids) -> str:
        return self.tokenizer.decode(ids)

    def check_x(self, x: torch.Tensor) -> torch.Tensor:
        check_text(x)
        check_id_range(x, len(self.vocab), "word ids")
        return x.to(self.device)

    def check_z(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        z = z.to(self.device, torch.long)
        if z.dim() != 2 or z.shape[1] != x.shape[0]:
            raise ValueError(f"z must have shape [K, T={x.shape[0]}], got {tuple(z.shape)}")
        check_id_range(z, self.num_topics, "topics")
        return z

    @torch.no_grad()
    def log_joint(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """log p(x, z) = log p(z) + Σ_t log Φ[z_t, x_t] for z [K, T]: float64 [K] (−inf where some Φ[z_t, x_t] = 0)."""
        x = self.check_x(x)
        z = self.check_z(x, z)
        alpha = self.alpha.to(torch.float64)
        words = self.log_phi_columns(x).gather(1, z.t()).sum(0) if x.numel() else 0.0
        return log_prior(topic_counts(z, self.num_topics), alpha) + words

    @torch.no_grad()
    def log_marginal(self, x: torch.Tensor) -> float:
        """log p(x) exactly by the dynamic program over topic counts (``exact.py``); a ValueError when its cost
        K² C(T + K, K) exceeds ``max_exact_work``."""
        x = self.check_x(x)
        work = exact_work(x.numel(), self.num_topics)
        if work > self.max_exact_work:
            raise UnsupportedError(
                f"the exact LDA marginal of a {x.numel()}-token document over {self.num_topics} topics costs "
                f"K² C(T + K, K) = {work:.3g}, beyond max_exact_work = {self.max_exact_work:.3g} (minutes of "
                "dynamic programming; raise max_exact_work to wait for them)"
            )
        if x.numel() == 0:
            return 0.0
        return log_marginal_dp(self.log_phi_columns(x), self.alpha)

    def extra_repr(self) -> str:
        return (
            f"num_topics={self.num_topics}, vocab_size={len(self.vocab)}, "
            f"unknown_words={self.tokenizer.unknown_words!r}, lookahead={self.lookahead!r}, source={self.source!r}"
        )
