"""The prefix-probability policy of ``loglikelihood``: log p̂(continuation | context) = log p̂(ctx ⊕ cont) − log p̂(ctx).

A model that offers ``conditional_model(context)`` (the masked LMs: the context revealed, the continuation's
positions marginalized over their reveal orders) answers instead from that view: each continuation is one document
of the context's view (``view_estimates``), estimated by the run's estimator, so the conditional is exact under
``estimator=exact`` and normalized over the continuations of its length.

Otherwise the difference is the probability of the continuation given the context only when Σ_z p(x, z) is the
probability that a text *starts with* x: the model's own ``log_joint`` where it declares ``prefix_probability = True``, or its
``prefix_model()`` (the RNNG's); anything else is refused before any work (``protocol.prefix_view``). It is also no
conditional of the continuation's tokens when tokens(ctx) are not a prefix of tokens(ctx ⊕ cont): a warning says so.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import torch
from tqdm import tqdm

from ..errors import InputError, UnsupportedError
from ..estimators import DocumentEstimate
from ..estimators.seeding import stream_text
from ..protocol import is_prefix_probability, prefix_view
from .exchange import Conditional

Pair = tuple[str, str]
NOT_GREEDY = (
    "{owner}: is_greedy is not computed for latent LMs (always False), so metrics built on it (e.g. 'acc' of "
    "loglikelihood tasks such as lambada) are meaningless; multiple-choice accuracy does not use it (the Monte Carlo "
    "error of its answers is logged per task and kept in the results' choice_monte_carlo)"
)


def prefix_model(model):
    """The model (or its prefix view) that ``loglikelihood`` estimates from.

    Raises
    ------
    InputError
        When log p(context ⊕ continuation) − log p(context) would not be the probability of the continuation given
        the context (the model scores complete texts, or does not declare ``prefix_probability``).
    """
    view = prefix_view(model)
    if view is not None:
        return view
    declared, name = is_prefix_probability(model), type(model).__name__
    what = (
        "it scores complete texts (for example whole trees or an end-of-sentence event), so log p(context ⊕ "
        "continuation) − log p(context) is not the probability of the continuation given the context"
        if declared is False
        else "it does not declare whether log_joint is a prefix probability; set the "
        "class attribute prefix_probability = True if Σ_z p(x, z) is the probability that a text starts with x"
    )
    raise InputError(
        f"{name}: loglikelihood requests (multiple-choice and completion tasks) are refused: {what}. "
        "Perplexity tasks (loglikelihood_rolling) are unaffected."
    )


def has_conditional_model(model) -> bool:
    """Whether ``model`` offers ``conditional_model(context)``: a latent LM of the continuations given the context.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> has_conditional_model(SimpleNamespace(conditional_model=lambda context: None)), has_conditional_model(None)
    (True, False)
    """
    return callable(getattr(model, "conditional_model", None))


def view_estimates(
    model, pairs: list[Pair], estimate, progress: bool = False
) -> dict[Pair, DocumentEstimate]:
    """log p̂(continuation | context) of every distinct pair from the context's view ``model.conditional_model(ctx)``:
    ``estimate(view, texts)`` estimates its documents ctx ⊕ cont (each seeded from its whole text), one call per
    distinct context; or, where the model offers ``conditional_models(pairs)`` (one model of several contexts'
    continuations: the reasoning model's ``QuestionsView``, which draws their chains side by side), one call per
    group of contexts (``context_groups``), with the same estimates.

    Examples
    --------
    >>> from lm_latent_eval.estimators import EstimatorSettings, estimate_document
    >>> from lm_latent_eval.models import load_model
    >>> masked, _ = load_model("masked")
    >>> run = lambda view, texts: {t: estimate_document(view, t, EstimatorSettings("exact")) for t in texts}
    >>> out = view_estimates(masked, [("anna saw", " the dog.")], run)
    >>> out["anna saw", " the dog."].num_tokens, round(out["anna saw", " the dog."].log_likelihood, 4)
    (3, -2.2778)
    """
    by_context: dict[str, list[str]] = {}
    for ctx, cont in dict.fromkeys(pairs):
        by_context.setdefault(ctx, []).append(cont)
    together = callable(getattr(model, "conditional_models", None))
    out = {}
    with tqdm(total=len(by_context), desc="contexts", disable=not progress) as bar:
        for group in context_groups(by_context) if together else [[ctx] for ctx in by_context]:
            texts = {ctx + cont: (ctx, cont) for ctx in group for cont in by_context[ctx]}
            view = (
                model.conditional_models(list(texts.values()))
                if together
                else model.conditional_model(group[0])
            )
            estimates = estimate(view, list(texts))
            out.update({pair: estimates[text] for text, pair in texts.items()})
            bar.update(len(group))
    return out


def context_groups(by_context: dict[str, list[str]]) -> list[list[str]]:
    """The contexts in order, cut where a context's text ctx ⊕ cont is already one of its group's (a document of one
    model answers one context).

    Examples
    --------
    >>> context_groups({"a": [" b c"], "b": [" c"], "a b": [" c"], "c": [" d"]})
    [['a', 'b'], ['a b', 'c']]
    """
    groups: list[list[str]] = []
    seen: set[str] = set()
    for ctx, conts in by_context.items():
        texts = {ctx + cont for cont in conts}
        if not groups or texts & seen:
            groups.append([])
            seen = set()
        groups[-1].append(ctx)
        seen |= texts
    return groups


def texts_to_estimate(model, pairs: list[Pair]) -> list[str]:
    """Every context and every context ⊕ continuation of ``pairs``; warns (once per batch) when tokens(context) are
    not a prefix of tokens(context ⊕ continuation): the difference is then no conditional of the continuation."""
    for ctx, cont in dict.fromkeys(pairs):
        x_ctx, x_full = model.tokenize(ctx), model.tokenize(ctx + cont)
        if x_full.numel() < x_ctx.numel() or not torch.equal(x_full[: x_ctx.numel()], x_ctx):
            # stacklevel 3: the caller of the backend's loglikelihood
            warnings.warn(
                f"tokens of context {ctx[-40:]!r} are not a prefix of those of context+continuation "
                f"{(ctx + cont)[-60:]!r}: the loglikelihood is log p(context+continuation) - log p(context), "
                "not a conditional of the continuation's tokens",
                stacklevel=3,
            )
            break
    return [ctx for ctx, _ in pairs] + [ctx + cont for ctx, cont in pairs]


@dataclass
class ConditionalEstimates:
    """The document estimates behind each pair's log p̂(continuation | context): ``terms[pair]`` lists (sign, key)
    and the value is Σ sign · log p̂ of ``estimates[key]`` (the prefix path: (+1, context ⊕ continuation), (−1,
    context); a conditional view: (+1, pair)). ``replace`` swaps in new estimates of some keys (more samples for a
    question whose answer is not settled, ``harness.choices``).

    Examples
    --------
    >>> from lm_latent_eval.estimators import ExactEstimate
    >>> found = prefix_estimates([("a", " b")], {"a": ExactEstimate("a", 1, -1.0), "a b": ExactEstimate("a b", 2, -3.5)})
    >>> found.conditional(("a", " b"))
    Conditional(log_likelihood=-2.5, num_tokens=1, stderr=0.0)
    """

    terms: dict[Pair, tuple[tuple[float, object], ...]]
    estimates: dict[object, DocumentEstimate]
    # key -> the random stream it shares with other keys (``seeding.stream_text``: a reasoning view's answers on one
    # question's chains); keys absent draw from streams of their own
    streams: dict[object, str] = field(default_factory=dict)

    def conditional(self, pair: Pair) -> Conditional:
        """log p̂(continuation | context), the continuation's model tokens, and the standard error √Σ v̂ of the terms'
        log p̂ (NaN where a v̂ cannot be trusted)."""
        parts = [(sign, self.estimates[key]) for sign, key in self.terms[pair]]
        errors = [e.error() for _, e in parts]
        v = sum(err.relative_variance for err in errors)
        return Conditional(
            sum(sign * e.log_likelihood for sign, e in parts),
            sum(int(sign) * e.num_tokens for sign, e in parts),
            math.sqrt(v) if all(err.trusted for err in errors) and math.isfinite(v) else math.nan,
        )

    def replace(self, estimates: dict) -> ConditionalEstimates:
        return ConditionalEstimates(self.terms, {**self.estimates, **estimates}, self.streams)

    def view_estimates(self) -> dict[Pair, DocumentEstimate]:
        """The whole estimate of each pair answered by one estimate of a conditional view (a single term)."""
        return {
            pair: self.estimates[terms[0][1]]
            for pair, terms in self.terms.items()
            if len(terms) == 1 and terms[0][0] == 1.0
        }


def prefix_estimates(pairs: list[Pair], estimates: dict[str, DocumentEstimate]) -> ConditionalEstimates:
    """log p̂(ctx ⊕ cont) − log p̂(ctx) per distinct pair, from the estimates of the texts."""
    terms = {(ctx, cont): ((1.0, ctx + cont), (-1.0, ctx)) for ctx, cont in pairs}
    return ConditionalEstimates(terms, estimates)


def view_conditional_estimates(model, estimates: dict[Pair, DocumentEstimate]) -> ConditionalEstimates:
    """Each pair's own estimate from the context's conditional view (``view_estimates``), with the streams its
    documents share (a view's ``random_stream_text``)."""
    streams, views = {}, {}
    if callable(getattr(model, "random_stream_text", None)):
        for ctx, cont in estimates:
            if ctx not in views:
                views[ctx] = model.conditional_model(ctx)
            if (name := stream_text(views[ctx], ctx + cont)) != ctx + cont:
                streams[ctx, cont] = name
    return ConditionalEstimates({pair: ((1.0, pair),) for pair in estimates}, dict(estimates), streams)


def refuse_rolling(model) -> None:
    """UnsupportedError, in one line, for a model that declares ``rolling_refusal`` (why it answers no
    ``loglikelihood_rolling``: the reasoning model, whose documents need a question).

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> refuse_rolling(SimpleNamespace())
    >>> refuse_rolling(SimpleNamespace(rolling_refusal="no documents"))
    Traceback (most recent call last):
    ...
    lm_latent_eval.errors.UnsupportedError: SimpleNamespace: no documents
    """
    reason = getattr(model, "rolling_refusal", None)
    if reason:
        raise UnsupportedError(f"{type(model).__name__}: {reason}")


def weight_bound(model, settings) -> float | None:
    """B with every importance weight w ≤ B under the run's proposal (the model's optional
    ``importance_weight_bound(temperature, peek)``), for the statement that holds at any K; None: unbounded."""
    declared = getattr(model, "importance_weight_bound", None)
    return declared(settings.temperature, settings.peek) if callable(declared) else None


class GreedyNotice:
    """The warning, once per backend, that ``is_greedy`` (the second value of a loglikelihood answer) is not computed.

    Examples
    --------
    >>> import warnings
    >>> notice = GreedyNotice("LatentHMMEval: is_greedy is not computed")
    >>> with warnings.catch_warnings(record=True) as seen:
    ...     warnings.simplefilter("always")
    ...     notice.warn(); notice.warn()
    >>> len(seen)
    1
    """

    def __init__(self, message: str) -> None:
        self.message = message
        self.given = False

    def warn(self) -> None:
        if not self.given:
            # stacklevel 3: the caller of the backend's loglikelihood
            warnings.warn(self.message, stacklevel=3)
            self.given = True
