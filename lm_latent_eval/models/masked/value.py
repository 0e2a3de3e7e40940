"""The look-ahead ψ(S) of the masked LM's SMC: a guess of V(S), how likely the masked tokens are given those revealed.

SMC over orders weighs a particle that revealed the set S by p(x_S, σ_≤t) ψ(S). The ideal ψ is the value

    V(S) = p(x_M | x_S) = Σ_{i ∈ M} π(i | S) p_θ(x_i | S) V(S ∪ {i}),   V(all positions) = 1,   M = the masked set,

(the Bellman identity of the order latent; ``exact.exact_log_values`` computes it for every S of a short text): with
ψ = V every particle's weight after step t has the same expectation, and the orders that carry p(x) are not resampled
away. Two guesses from the network's rows:

- the mean field, log ψ(S) = Σ_{j ∈ M} ℓ_j(S) with ℓ_j(S) = log p_θ(x_j | S): each masked token as if revealed
  next; it ignores that later tokens are read in more context, so it prefers orders that revealed easy tokens first;
- a value head (``ValueHead``), log ψ(S) = Σ_{j ∈ M} [ℓ_j(S) + g_φ(ℓ_j(S), λ_j, |M| / T, log |M|)], λ_j =
  log p_θ(x_j | x_−j) the token's pseudo-likelihood (its conditional given every other token: T network rows per
  text, once), g_φ a small network fitted to exact log V(S) of short texts, then to the Bellman identity on longer
  ones (``fit_value_head``): how far each masked token's share moves from its conditional now toward its
  conditional in full context, given how much is masked.

The model's ``value_head`` (None: the mean field) decides; any ψ leaves SMC unbiased (it telescopes to ψ(∅) = 1 and
ψ(all) = 1), so a poor ψ costs variance, never the expectation. A text the network reads in windows (``windows.py``)
gets the head of its current window alone: V(S) there is that window's rest given S, times the later windows'
factors, the same for every particle at a step.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file
from torch import nn
from tqdm.auto import tqdm

from ...errors import InputError, MissingFileError, one_line
from .conditionals import StepScores, step_scores
from .windows import current_window, window_size

# the head's inputs per masked position: ℓ_j(S), |M| / T, log |M|, λ_j, λ_j − ℓ_j(S)
FEATURES = 5
# what ``fit_value_head`` fits log ψ(S) to
TARGETS = ("dynamic_program", "bellman")
# the ``format`` in a saved head's metadata
HEAD_FORMAT = "lm-latent-eval value head v1"
# The longest text (positions marginalized over their orders) at which the statement of SMC that resamples held the
# exact value in at least 94% of 100 or more seeds, by ψ and whether the proposal peeks (docs/models.md, "At length",
# and "Masked and masked-diffusion LMs"); beyond it, the model's ``smc_interval_doubt`` leaves the certified bound.
# The mean field peeking (the myopic proposal) covered too rarely on the bundled sentences: no length.
RESAMPLED_INTERVAL_TOKENS = {
    ("value head", False): 32,
    ("value head", True): 32,
    ("mean field", False): 14,
    ("mean field", True): 0,
}


class ValueHead(nn.Module):
    """g_φ of the module docstring: an MLP from each masked position's ``FEATURES`` numbers to its correction.

    Parameters
    ----------
    width : int
        Hidden units of its two hidden layers.

    Examples
    --------
    >>> head, inf = ValueHead(width=8), float("inf")
    >>> log_token = torch.tensor([[-1.0, -2.0, -inf], [-1.5, -inf, -inf]], dtype=torch.float64)
    >>> revealed = torch.tensor([[False, False, True], [False, True, True]])
    >>> head(log_token, torch.tensor([-0.5, -1.0, -0.2], dtype=torch.float64), revealed).shape
    torch.Size([2])
    """

    def __init__(self, width: int = 64):
        super().__init__()
        self.mlp = nn.Sequential(
            nn.Linear(FEATURES, width), nn.GELU(), nn.Linear(width, width), nn.GELU(), nn.Linear(width, 1)
        )

    @classmethod
    def seeded(cls, seed: int, width: int = 64) -> ValueHead:
        """A fresh head whose initial weights depend on ``seed`` only (torch's global stream left as it was)."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return cls(width)

    def save(self, path: str | Path) -> None:
        """Write the head as one safetensors file, its width in the file's metadata (``load`` reads it back)."""
        save_file({k: v.float().contiguous() for k, v in self.state_dict().items()}, str(path),
                  metadata={"format": HEAD_FORMAT, "width": str(self.mlp[0].out_features)})  # fmt: skip

    @classmethod
    def load(cls, path: str | Path) -> ValueHead:
        """The head that ``save`` wrote to ``path`` (model_args ``value_head``); one line naming the file where it is
        missing or is not such a head."""
        if not Path(path).is_file():
            raise MissingFileError(
                f"value_head={path}: no such file (write one with lm-latent-eval fit-value-head)"
            )
        try:
            with safe_open(str(path), "pt") as f:
                metadata = f.metadata() or {}
            if metadata.get("format") != HEAD_FORMAT:
                raise ValueError("no value-head metadata")
            head = cls(int(metadata["width"]))
            head.load_state_dict(load_file(str(path)))
        except (ValueError, RuntimeError, OSError, SafetensorError) as err:
            raise InputError(
                f"value_head={path}: not a value head written by lm-latent-eval fit-value-head ({one_line(err)})"
            ) from None
        return head.eval()

    def corrections(
        self, log_token: torch.Tensor, pseudo: torch.Tensor, revealed: torch.Tensor, shift: int = 0
    ) -> torch.Tensor:
        """g_φ(ℓ_j(S), λ_j, |M| / T, log |M|) of every position j [N, T] (meaningful at the masked ones), with |M|
        counted ``shift`` more than the sets' masked positions (−1: as if one more were revealed)."""
        own = log_token.masked_fill(revealed, 0.0)
        count = ((~revealed).sum(1, keepdim=True) + shift).to(own.dtype).expand_as(own)
        pseudo = pseudo.expand_as(own)
        features = torch.stack(
            [own, count / own.shape[1], count.clamp(min=1).log(), pseudo, pseudo - own], -1
        )
        return self.mlp(features.to(self.mlp[0].weight.dtype)).squeeze(-1).to(own.dtype)

    @staticmethod
    def log_psi(
        log_token: torch.Tensor, revealed: torch.Tensor, corrections: torch.Tensor | None
    ) -> torch.Tensor:
        """log ψ(S) = Σ_{j ∈ M} [ℓ_j(S) + g_j] [N] from the rows ``log_token`` [N, T] (−inf at revealed j) and the
        ``corrections`` g [N, T] (None: the mean field, g = 0)."""
        own = log_token.masked_fill(revealed, 0.0)
        if corrections is None:
            return own.sum(-1)
        return ((own + corrections) * ~revealed).sum(-1)

    def forward(self, log_token: torch.Tensor, pseudo: torch.Tensor, revealed: torch.Tensor) -> torch.Tensor:
        """log ψ(S) [N], float64, for the rows ``log_token`` [N, T] (ℓ_j(S), −inf at revealed j), the pseudo
        log-likelihoods ``pseudo`` [T] (or [N, T]) and the sets ``revealed`` [N, T]."""
        return self.log_psi(log_token, revealed, self.corrections(log_token, pseudo, revealed))


def pseudo_log_likelihoods(model, x: torch.Tensor) -> torch.Tensor:
    """λ_j = log p_θ(x_j | x_−j) of every position j [T], float64: T network rows, each revealing all but one token.

    Examples
    --------
    >>> from lm_latent_eval.models.masked.diffusion import tiny_masked_lm
    >>> model = tiny_masked_lm(seed=0)
    >>> pseudo_log_likelihoods(model, torch.tensor([2, 3, 4])).shape
    torch.Size([3])
    """
    others = ~torch.eye(x.numel(), dtype=torch.bool, device=x.device)
    return step_scores(model, x, others).log_token.diagonal().clone()


def uses_value_head(model) -> bool:
    """Whether ψ is the model's value head (else the mean field)."""
    return getattr(model, "value_head", None) is not None


def resampled_interval_doubt(model, length: int, settings) -> str | None:
    """Why the statement of SMC under ``settings`` over a text of ``length`` positions has no measured coverage
    (``RESAMPLED_INTERVAL_TOKENS``), or None: never for SMC that does not resample (importance sampling, whose
    weights' Pareto k̂ judges it).

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> from lm_latent_eval.models.masked.diffusion import tiny_masked_lm
    >>> smc = SimpleNamespace(resample_threshold=0.5, peek=False)
    >>> resampled_interval_doubt(tiny_masked_lm(seed=0), 20, smc).split(" (")[0]
    'SMC that resamples under the mean field, drawing uniform orders, has an interval of measured coverage only on texts of up to 14 tokens, not 20'
    >>> resampled_interval_doubt(tiny_masked_lm(seed=0), 14, smc) is None
    True
    """
    if settings.resample_threshold <= 0:
        return None
    twist = "value head" if uses_value_head(model) else "mean field"
    measured = RESAMPLED_INTERVAL_TOKENS[twist, bool(settings.peek)]
    if length <= measured:
        return None
    proposal = "peeking" if settings.peek else "drawing uniform orders"
    reach = f"only on texts of up to {measured} tokens, not {length}" if measured else "at no length"
    return (
        f"SMC that resamples under the {twist}, {proposal}, has an interval of measured coverage {reach} "
        '(docs/models.md, "At length"): resample_threshold=0 gives importance sampling\'s interval where its '
        "weights allow"
    )


def head_corrections(model, log_token, revealed, pseudo, shift: int = 0) -> torch.Tensor:
    """The value head's g_φ of every position [N, T] (``ValueHead.corrections``) of the sets ``revealed`` [N, T] from
    their rows ``log_token`` [N, T] and λ ``pseudo`` ([T] or [N, T]), run in blocks of ``block_tokens // T`` rows, as
    the network is (a row in a shorter last block may round differently: texts side by side equal each text alone
    to float rounding, docs/speed.md)."""
    N, T = revealed.shape
    pseudo = pseudo.expand(N, T)
    size = window_size(model, T)
    if size is not None:
        # in windows: each set's current window alone, read as a text of its own (0 at the other positions)
        out = torch.zeros_like(log_token)
        window = current_window(revealed, size)
        for j in window.unique().tolist():
            rows, span = (window == j).nonzero().squeeze(1), slice(j * size, min(T, (j + 1) * size))
            out[rows, span] = head_corrections(
                model, log_token[rows, span], revealed[rows, span], pseudo[rows, span], shift
            )
        return out
    step = max(1, model.block_tokens // max(T, 1))
    with torch.no_grad():
        return torch.cat(
            [
                model.value_head.corrections(
                    log_token[s : s + step], pseudo[s : s + step], revealed[s : s + step], shift
                )
                for s in range(0, N, step)
            ]
        )


def log_lookahead(model, log_token: torch.Tensor, revealed: torch.Tensor, pseudo: torch.Tensor | None):
    """log ψ(S) [N] of the sets ``revealed`` [N, T] from their rows ``log_token`` [N, T]: the value head where
    ``pseudo`` (λ [T] or [N, T], from ``pseudo_log_likelihoods``) is given, else the mean field."""
    corrections = None if pseudo is None else head_corrections(model, log_token, revealed, pseudo)
    return ValueHead.log_psi(log_token, revealed, corrections)


def sets_of_size(length: int, size: int, count: int, generator) -> torch.Tensor:
    """``count`` sets of ``size`` of the positions 0 .. length − 1, each uniform: bool [count, length]."""
    return torch.rand(count, length, generator=generator).argsort(1).argsort(1) < size


def bellman_targets(
    model, x: torch.Tensor, pseudo: torch.Tensor, revealed: torch.Tensor, scores: StepScores
) -> torch.Tensor:
    """log Σ_{i ∈ M} π(i | S) p_θ(x_i | S) ψ(S ∪ {i}) [N] of the sets ``revealed`` [N, T] of one size (their
    ``scores``, ``step_scores``'), ψ the head as it stands (ψ of the full set 1): the right side of the Bellman
    identity, |M| network rows more per set."""
    at = torch.nonzero(~revealed)
    child = revealed[at[:, 0]].clone()
    child[torch.arange(at.shape[0], device=x.device), at[:, 1]] = True
    factor = scores.log_joint[at[:, 0], at[:, 1]]
    # the full set's ψ is 1 (no network row for it)
    ahead = (
        0.0
        if bool(child.all())
        else log_lookahead(model, step_scores(model, x, child).log_token, child, pseudo)
    )
    return torch.logsumexp((factor + ahead).view(revealed.shape[0], -1), 1)


def fit_value_head(
    model,
    texts: list[torch.Tensor],
    steps: int = 2000,
    seed: int = 0,
    targets: str | Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = "dynamic_program",
    sets: int = 32,
    learning_rate: float = 1e-3,
    progress: bool = False,
) -> list[float]:
    """Fit ``model.value_head`` to log V(S) on sets of ``texts``.

    ``targets``: ``"dynamic_program"``, the exact log V(S) (``exact.exact_log_values``: texts of at most
    ``max_exact_tokens``); ``"bellman"``, the identity's right side under the head as it stands (``bellman_targets``:
    any text the network reads whole), which carries a head fitted to exact values on short texts to longer ones; or a
    function (x, revealed [N, T]) -> log V(S) [N] that knows them otherwise (the oracle's count program). Each step
    draws 8 groups, each one text, one size s and ``sets`` sets of that size, and minimises the squared error of
    log ψ(S) − target less its mean over the group (Adam): particles of one step hold sets of one size, and a
    constant per size leaves the weights' ratios, hence SMC, unchanged. ``progress``: a bar over the steps.

    Returns
    -------
    list of float
        The loss of every step.
    """
    from .exact import exact_log_values

    if not callable(targets) and targets not in TARGETS:
        raise ValueError(f"fit_value_head: targets must be one of {', '.join(TARGETS)}, got {targets!r}")
    head = model.value_head
    pseudos = [pseudo_log_likelihoods(model, x) for x in texts]
    exact = [exact_log_values(model, x)[0] for x in texts] if targets == "dynamic_program" else None
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(head.parameters(), lr=learning_rate)
    losses = []
    head.train()
    name = "given targets" if callable(targets) else targets
    for _ in tqdm(range(steps), desc=f"value head ({name})", disable=not progress):
        loss = 0.0
        for _ in range(8):
            k = int(torch.randint(len(texts), (1,), generator=generator))
            x, T = texts[k], texts[k].numel()
            size = int(torch.randint(T, (1,), generator=generator))
            revealed = sets_of_size(T, size, sets, generator).to(x.device)
            scores = step_scores(model, x, revealed)
            if callable(targets):
                target = targets(x, revealed)
            elif exact is None:
                with torch.no_grad():
                    target = bellman_targets(model, x, pseudos[k], revealed, scores)
            else:
                target = exact[k][(revealed.long() << torch.arange(T, device=x.device)).sum(1)]
            residual = head(scores.log_token, pseudos[k], revealed) - target
            loss = loss + ((residual - residual.mean()) ** 2).mean() / 8
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    head.eval()
    return losses


__all__ = [
    "ValueHead",
    "bellman_targets",
    "fit_value_head",
    "head_corrections",
    "log_lookahead",
    "pseudo_log_likelihoods",
    "uses_value_head",
]
