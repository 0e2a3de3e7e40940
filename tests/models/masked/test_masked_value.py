"""SMC's look-ahead for the masked LMs (``models/masked/value.py``): the exact values V(S) against brute force over
the orders of the masked positions, SMC under a value head unbiased for p(x), a fitted head closer to log V(S) than
the mean field, and the bundled checkpoint's head written and read back."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from lm_latent_eval.estimators import DEFAULT_POLICY, EstimatorSettings
from lm_latent_eval.estimators.registry import resolve
from lm_latent_eval.models.masked import tiny_masked_lm
from lm_latent_eval.models.masked.conditionals import step_scores
from lm_latent_eval.models.masked.exact import dp_log_marginal, exact_log_values
from lm_latent_eval.models.masked.oracle import make_oracle_model, sample_oracle_text
from lm_latent_eval.models.masked.orders import all_orders
from lm_latent_eval.models.masked.value import (
    RESAMPLED_INTERVAL_TOKENS,
    ValueHead,
    bellman_targets,
    fit_value_head,
    head_corrections,
    log_lookahead,
    pseudo_log_likelihoods,
    resampled_interval_doubt,
)
from lm_latent_eval.models.masked.value_fit import HeadRecipe


def brute_force_value(model, x: torch.Tensor, revealed: torch.Tensor) -> float:
    """log Σ over the orders of the masked positions of Π_t π(i_t | S_t) p_θ(x_{i_t} | S_t), S_0 = ``revealed``."""
    masked = torch.nonzero(~revealed).squeeze(1).tolist()
    total = []
    for order in itertools.permutations(masked):
        state, log_p = revealed.clone(), 0.0
        for i in order:
            log_p += float(step_scores(model, x, state[None]).log_joint[0, i])
            state[i] = True
        total.append(log_p)
    return float(torch.logsumexp(torch.tensor(total, dtype=torch.float64), 0)) if total else 0.0


@pytest.mark.parametrize("policy", ["uniform", "confidence"])
def test_the_exact_values_are_the_sums_over_the_remaining_orders(policy):
    """log V(S) of every set S of a 5-token text = the brute-force sum over the orders of its masked positions;
    log V(∅) = log p(x) of the forward program, log V(all) = 0."""
    model = tiny_masked_lm(seed=3, policy=policy)
    x = model.tokenize("c a d b a")
    log_v, member = exact_log_values(model, x)
    assert float(log_v[0]) == pytest.approx(dp_log_marginal(model, x), abs=1e-12) and float(log_v[-1]) == 0.0
    for s in range(0, 32, 3):
        assert float(log_v[s]) == pytest.approx(brute_force_value(model, x, member[s]), abs=1e-10)


def fitted_tiny(seed: int = 0, steps: int = 300):
    """The tiny masked LM (float64) with a value head fitted to 9 texts of 4 to 6 tokens."""
    model = tiny_masked_lm(seed=seed)
    torch.manual_seed(seed)
    model.value_head = ValueHead(16).double()
    generator = torch.Generator().manual_seed(seed)
    texts = [torch.randint(2, 6, (n,), generator=generator) for n in (4, 5, 6) * 3]
    fit_value_head(model, texts, steps, seed)
    return model


def test_given_targets_fit_as_the_dynamic_program_does():
    """A function that returns the dynamic program's log V(S) as targets fits the same head, bit for bit, as
    targets="dynamic_program" (the bench fits the oracle's head to its count program this way)."""
    heads = []
    for targets in ("dynamic_program", "function"):
        model = tiny_masked_lm(seed=1)
        model.value_head = ValueHead.seeded(1, 8).double()
        texts = [model.tokenize("c a d b"), model.tokenize("a b b d c")]
        if targets == "function":
            tables = {tuple(x.tolist()): exact_log_values(model, x)[0] for x in texts}

            def targets(x, revealed, tables=tables):
                return tables[tuple(x.tolist())][(revealed.long() << torch.arange(x.numel())).sum(1)]

        fit_value_head(model, texts, 20, 1, targets, sets=4)
        heads.append(model.value_head.state_dict())
    assert all(torch.equal(heads[0][k], heads[1][k]) for k in heads[0])


def test_a_fitted_head_is_closer_to_the_exact_values_than_the_mean_field():
    """On a text it was not fitted to, the head's log ψ(S) − log V(S), less its mean over the sets of each size
    (what SMC's weights see), is smaller in squared error than the mean field's."""
    model = fitted_tiny()
    x = model.tokenize("d a c c b a")
    log_v, member = exact_log_values(model, x)
    rows = step_scores(model, x, member).log_token
    pseudo = pseudo_log_likelihoods(model, x)
    size = member.sum(1)
    errors = {}
    for name, lam in (("head", pseudo), ("mean field", None)):
        residual = log_lookahead(model, rows, member, lam) - log_v
        errors[name] = sum(
            float(((r - r.mean()) ** 2).sum()) for r in (residual[size == s] for s in range(6))
        )
    assert errors["head"] < 0.5 * errors["mean field"], errors


def test_the_bellman_targets_are_exact_one_step_from_the_end_and_fit_longer_texts():
    """The identity's right side for sets with one position masked is the exact log V(S) (ψ of the full set is 1);
    fitting to it on texts of 8 tokens moves a head fitted on 4 to 6 toward their exact values."""
    model = fitted_tiny()
    x = model.tokenize("d a c c b a b d")
    log_v, member = exact_log_values(model, x)
    pseudo = pseudo_log_likelihoods(model, x)
    last = member.sum(1) == 7
    assert torch.allclose(
        bellman_targets(model, x, pseudo, member[last], step_scores(model, x, member[last])),
        log_v[last],
        atol=1e-12,
        rtol=0,
    )
    rows = step_scores(model, x, member).log_token
    size = member.sum(1)

    def error():
        residual = log_lookahead(model, rows, member, pseudo) - log_v
        return sum(float(((r - r.mean()) ** 2).sum()) for r in (residual[size == s] for s in range(8)))

    before = error()
    generator = torch.Generator().manual_seed(7)
    longer = [torch.randint(2, 6, (8,), generator=generator) for _ in range(6)]
    fit_value_head(model, longer, 150, 0, "bellman", sets=8, learning_rate=3e-4)
    assert error() < before


def test_the_peeking_proposal_under_a_head_is_the_posterior_step_guessed_from_one_row():
    """peek=True under a value head: q(i | S) ∝ π(i | S) exp(−g_φ(ℓ_i(S), λ_i, |M| − 1)), the head's inputs built
    here by hand at S = ∅; q sums to 1 over the 720 orders of 6 tokens, a draw's log q is ``log_prob``'s, and its
    exact second moment E_q[(p(x, σ) / q(σ))²] / p(x)² − 1 (K·Var of p̂ / p) is below half that of uniform orders
    and of the myopic q ∝ π p_θ(x_i | S) (the head set aside) on texts of 5 and 6 tokens."""
    model = fitted_tiny()
    x = model.tokenize("d a c c b a")
    orders = all_orders(6)
    log_q = model.proposal.log_prob(x, orders, 1.0, True)
    assert abs(float(torch.logsumexp(log_q, 0))) < 1e-12
    first = torch.stack([torch.logsumexp(log_q[orders[:, 0] == i], 0) for i in range(6)])
    own, lam = (
        step_scores(model, x, torch.zeros(1, 6, dtype=torch.bool)).log_token[0],
        pseudo_log_likelihoods(model, x),
    )
    features = torch.stack(
        [own, torch.full_like(own, 5 / 6), torch.full_like(own, math.log(5)), lam, lam - own], -1
    )
    with torch.no_grad():
        expected = torch.log_softmax(-model.value_head.mlp(features).squeeze(-1), 0)  # π(i | ∅) uniform
    torch.testing.assert_close(first, expected, rtol=0, atol=1e-12)
    drawn, drawn_log_q = model.proposal.sample(x, 64, 1.0, True, torch.Generator().manual_seed(3))
    torch.testing.assert_close(drawn_log_q, model.proposal.log_prob(x, drawn, 1.0, True), rtol=0, atol=1e-12)
    for text in ("d a c c b a", "a a b c d"):
        head, uniform = chi_square(model, text, True), chi_square(model, text, False)
        model.value_head, kept = None, model.value_head
        myopic = chi_square(model, text, True)
        model.value_head = kept
        assert head < 0.5 * min(uniform, myopic), (text, head, uniform, myopic)


def chi_square(model, text: str, peek: bool) -> float:
    """E_q[(p(x, σ) / q(σ | x))²] / p(x)² − 1 over every order of the text, exactly."""
    x = model.tokenize(text)
    orders = all_orders(x.numel())
    log_q = model.proposal.log_prob(x, orders, 1.0, peek)
    log_ratio = float(torch.logsumexp(2 * model.log_joint(x, orders) - log_q, 0))
    return math.expm1(log_ratio - 2 * dp_log_marginal(model, x))


@pytest.mark.parametrize(("peek", "windows"), [(False, False), (True, False), (True, True)])
def test_smc_under_a_value_head_is_unbiased_for_p_of_x(peek, windows):
    """E[p̂ / p] = 1 for SMC resampling at ESS < K/2 under the fitted head, drawing uniform orders or peeking through
    the head (K = 8, 400 seeds, 6 tokens; and read in windows of 2 by a network given 4 positions, the head applied
    to each set's current window): the mean of p̂ / p within 4 standard errors of 1 (any ψ telescopes and any
    proposal is corrected; a wrong increment would show here)."""
    model = fitted_tiny()
    if windows:
        model.max_length = 4
    text = "d a c c b a"
    log_p = dp_log_marginal(model, model.tokenize(text))
    ratios = np.array(
        [
            math.exp(
                resolve(
                    EstimatorSettings("smc", 8, peek=peek, resample_threshold=0.5, seed=s, target_se=0),
                    model,
                )
                .estimate(text)
                .log_likelihood
                - log_p
            )
            for s in range(400)
        ]
    )
    assert abs(ratios.mean() - 1) < 4 * ratios.std(ddof=1) / math.sqrt(ratios.size), ratios.mean()


def test_the_head_is_written_and_read_back_with_the_checkpoint(tmp_path, monkeypatch):
    """``make_default --value-head-only`` (fewer texts and steps here: both stages) writes the bundled network with a head: the
    network's weights unchanged, the head's read back, and the card names it."""
    from lm_latent_eval.models import load_model
    from lm_latent_eval.models.masked import make_default
    from lm_latent_eval.models.masked.diffusion import MaskedDiffusionLM
    from lm_latent_eval.paths import DATA_DIR

    bundled, _ = load_model("masked")
    folder = tmp_path / "masked"
    bundled.save_pretrained(folder)
    (folder / "README.md").write_text((DATA_DIR / "masked" / "README.md").read_text())
    small = HeadRecipe(pieces=5, steps=3, bellman_pieces=5, bellman_steps=2)
    monkeypatch.setattr(make_default, "HeadRecipe", lambda: small)
    make_default.main(["--output-dir", str(tmp_path), "--value-head-only"])
    written = MaskedDiffusionLM.from_pretrained(str(folder))
    assert written.value_head is not None
    for name, tensor in bundled.predictor.state_dict().items():
        assert torch.equal(written.predictor.state_dict()[name], tensor), name
    card = (folder / "README.md").read_text()
    assert card.count("SMC's value head") == 1 and "5 pieces of 10" in card and "5 pieces of 20" in card


def test_fit_value_head_writes_a_head_that_model_args_read(tmp_path, capsys):
    """``lm-latent-eval fit-value-head`` on the bundled network (a small recipe) writes a head that model_args
    ``value_head`` loads over the checkpoint's, weights equal; SMC that resamples then runs under it (other numbers
    than under the checkpoint's head, the same expectation: tested above). Bad files and too few tokens: one line."""
    from lm_latent_eval.cli import main
    from lm_latent_eval.models import load_model
    from lm_latent_eval.paths import DATA_DIR

    texts, out = DATA_DIR / "masked_tiny" / "test.jsonl", tmp_path / "head.safetensors"
    small = ["--pieces", "2", "--steps", "2", "--bellman-pieces", "2", "--bellman-steps", "1"]
    assert main(["fit-value-head", "--texts", str(texts), "--output", str(out), *small]) == 0
    assert f"value_head={out}" in capsys.readouterr().out
    bundled, _ = load_model("masked")
    model, _ = load_model("masked", value_head=str(out))
    written = ValueHead.load(out)
    assert all(torch.equal(a, b) for a, b in zip(model.value_head.state_dict().values(),
                                                 written.state_dict().values()))  # fmt: skip
    assert not torch.equal(model.value_head.mlp[0].weight, bundled.value_head.mlp[0].weight)
    text = "the cat sat on the mat and the dog sat on the rug"
    settings = EstimatorSettings("smc", 64, peek=False, resample_threshold=1.0, target_se=0, seed=0)
    ours, theirs = (resolve(settings, m).estimate(text).log_likelihood for m in (model, bundled))
    assert math.isfinite(ours) and ours != theirs

    short = tmp_path / "short.txt"
    short.write_text("a b c\n")
    assert main(["fit-value-head", "--texts", str(short), "--output", str(out), *small]) == 2
    assert "the texts hold 3 tokens in all" in capsys.readouterr().err
    for bad, message in ((tmp_path / "none.safetensors", "no such file"), (short, "not a value head")):
        with pytest.raises(Exception, match=message):
            load_model("masked", value_head=str(bad))
    assert (
        main(["fit-value-head", "--texts", str(texts), "--output", str(out), "--model_args", "num_samples=8"])
        == 2
    )
    assert "estimator settings" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("length", "head", "peek", "threshold", "stated"),
    [
        (32, True, True, 0.5, True),
        (33, True, True, 0.5, False),
        (33, True, False, 0.5, False),
        (33, True, True, 0.0, True),
        (14, False, False, 0.5, True),
        (15, False, False, 0.5, False),
        (10, False, True, 0.5, False),
    ],
)
def test_resampled_smc_states_its_interval_only_at_the_lengths_measured(
    length, head, peek, threshold, stated
):
    """The masked LM's SMC that resamples prints an interval only up to the length at which its coverage was
    measured for its look-ahead and proposal (``RESAMPLED_INTERVAL_TOKENS``); beyond it the document's error carries
    the model's lasting doubt and the statement is the certified bound. SMC that never resamples is judged by its
    weights instead, at any length."""
    oracle = make_oracle_model(seed=0)
    oracle.value_head = ValueHead.seeded(0, width=8).double() if head else None
    text = oracle.detokenize(sample_oracle_text(oracle, length, seed=length))
    settings = EstimatorSettings("smc", 64, peek=peek, resample_threshold=threshold, seed=1, target_se=0)
    estimate = resolve(settings, oracle).estimate(text)
    doubt, err = estimate.diagnostics.model_doubt, estimate.error()
    measured = RESAMPLED_INTERVAL_TOKENS["value head" if head else "mean field", peek]
    assert (doubt is None) == stated, doubt
    if not stated:
        reach = f"only on texts of up to {measured} tokens, not {length} " if measured else "at no length "
        assert f"has an interval of measured coverage {reach}(docs/models.md" in doubt
        assert not err.trusted and not DEFAULT_POLICY.interval([err]).two_sided


def test_in_windows_the_head_reads_each_sets_current_window_alone():
    """A text read in windows gets the head of its current window (``head_corrections``): the corrections of a set
    equal those of its window's positions read as a text of their own (0 elsewhere), and the gate names the value
    head at the text's length."""
    model = fitted_tiny()
    x = model.tokenize("d a c c b a")
    revealed = torch.tensor([[True, True, False, True, False, False], [True, True, True, True, False, False]])
    model.max_length = 4
    windowed = step_scores(model, x, revealed).log_token
    pseudo = pseudo_log_likelihoods(model, x)
    g = head_corrections(model, windowed, revealed, pseudo)
    alone = head_corrections(model, windowed[:, 2:4], revealed[:, 2:4], pseudo[2:4])
    assert torch.allclose(g[0, 2:4], alone[0], rtol=0, atol=1e-12)
    assert torch.equal(g[0, :2], torch.zeros(2, dtype=g.dtype))
    assert torch.equal(g[0, 4:], torch.zeros(2, dtype=g.dtype))
    later = head_corrections(model, windowed[1:, 4:6], revealed[1:, 4:6], pseudo[4:6])
    assert torch.allclose(g[1, 4:], later[0], rtol=0, atol=1e-12) and not torch.equal(g[0], g[1])
    settings = EstimatorSettings("smc", 8, peek=True, resample_threshold=0.5)
    assert "under the value head, peeking" in resampled_interval_doubt(model, 40, settings)


def test_a_gated_corpus_reports_its_first_stage_and_its_bound_at_the_full_level(monkeypatch, caplog):
    """Under a precision target a corpus with a text longer than the measured length pursues no target: its
    statement is the certified bound at any sample size, so stage 1 is reported (the same draws as stage 1 of the
    run the table admits), one-sided with the model's reason, its bound Markov's at δ (one stage, chosen before any
    was drawn), and one warning says so."""
    import logging

    from lm_latent_eval.estimators.adaptive import estimate_corpus
    from lm_latent_eval.estimators.corpus import corpus_estimate
    from lm_latent_eval.estimators.intervals import certified_lower_bound
    from lm_latent_eval.models.masked import value

    oracle = make_oracle_model(seed=0)
    oracle.value_head = ValueHead.seeded(0, width=8).double()
    texts = [oracle.detokenize(sample_oracle_text(oracle, length, seed=length)) for length in (8, 10)]
    settings = EstimatorSettings("smc", 64, peek=True, resample_threshold=0.5, seed=3, target_se=0.05,
                                 max_samples=512)  # fmt: skip

    def run():
        return estimate_corpus(resolve(settings, oracle), texts, progress=False)

    admitted = run()
    assert corpus_estimate(list(admitted.values())).interval.two_sided
    assert all(len(admitted[t].stage_log_likelihoods) >= 2 for t in texts)
    monkeypatch.setitem(value.RESAMPLED_INTERVAL_TOKENS, ("value head", True), 9)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="lm_latent_eval.estimators.adaptive"):
        gated = run()
    (line,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert "not pursued: for 1 of 2 documents" in line and "not 10" in line
    first = [admitted[t].stage_log_likelihoods[0] for t in texts]
    assert [gated[t].log_likelihood for t in texts] == first
    assert all(gated[t].stage_log_likelihoods is None and gated[t].num_samples == 64 for t in texts)
    statement = corpus_estimate([gated[t] for t in texts]).interval
    assert not statement.two_sided and "only on texts of up to 9 tokens, not 10" in statement.reason
    assert statement.lower == certified_lower_bound(first)
