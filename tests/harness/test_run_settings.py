"""Settings a run is given and how the backend treats them (issue 34): lm-eval's default ``--batch_size 1`` does not
choose the particle block, a model_arg the chosen estimator ignores is named, and generation settings are honoured
or refused."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

lm_eval = pytest.importorskip("lm_eval")

from lm_latent_eval.harness.backends import LatentHMMEval

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("cli", ["1", 1])
def test_lm_evals_default_batch_size_does_not_choose_the_particle_block(cli, caplog):
    """``--batch_size 1`` (lm-eval's default) scored one particle per log_joint call: up to 10x slower."""
    with caplog.at_level(logging.WARNING, logger="lm_latent_eval"):
        lm = LatentHMMEval.create_from_arg_obj({"estimator": "is"}, {"batch_size": cli, "device": "cpu"})
    assert lm.settings.batch_size is None  # auto: one sample block
    assert not [r for r in caplog.records if "particle" in r.getMessage()]


def test_the_dropped_default_batch_size_is_logged(caplog):
    """A user who typed ``--batch_size 1`` (which lm-eval cannot tell from its default) reads why it was not used."""
    with caplog.at_level(logging.INFO, logger="lm_latent_eval"):
        LatentHMMEval.create_from_arg_obj({"estimator": "is"}, {"batch_size": "1", "device": "cpu"})
    (line,) = [r.getMessage() for r in caplog.records if "--batch_size 1" in r.getMessage()]
    assert "particle block" in line and "model_args batch_size=N" in line
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="lm_latent_eval"):
        LatentHMMEval.create_from_arg_obj(
            {"estimator": "is", "batch_size": 1}, {"batch_size": "1", "device": "cpu"}
        )
    assert not [r for r in caplog.records if "--batch_size 1" in r.getMessage()]


def test_a_batch_size_asked_for_still_sets_the_particle_block():
    """model_args ``batch_size=1`` (a memory-limited user) and any other ``--batch_size`` are kept."""
    one = LatentHMMEval.create_from_arg_obj(
        {"estimator": "is", "batch_size": 1}, {"batch_size": "1", "device": "cpu"}
    )
    four = LatentHMMEval.create_from_arg_obj({"estimator": "is"}, {"batch_size": "4", "device": "cpu"})
    assert (one.settings.batch_size, four.settings.batch_size) == (1, 4)


def ignored(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "no effect" in r.getMessage()]


def test_a_setting_the_chosen_estimator_ignores_is_named_once(caplog):
    """The docs' estimate-card example gave ``num_samples=1000`` on the HMM, where ``auto`` runs the exact estimator:
    K had no effect, without a word."""
    with caplog.at_level(logging.WARNING, logger="lm_latent_eval"):
        LatentHMMEval.create_from_arg_obj(
            {"num_samples": 1000, "seed": 3}, {"batch_size": "auto", "device": "cpu"}
        )
    (message,) = ignored(caplog)
    assert "num_samples=1000" in message and "estimator=exact" in message
    assert "seed" not in message  # generate_until samples with it under any estimator
    assert "auto" in message  # why that estimator
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="lm_latent_eval"):
        LatentHMMEval(estimator="beam", num_samples=8, beam_size=4, device="cpu")
    (message,) = ignored(caplog)
    assert "num_samples=8" in message and "beam_size" not in message.split("no effect")[0]


def test_settings_canonical_ignores_are_named_under_canonical(caplog):
    """latent_tokenization once ran estimator=canonical as exact: its ignored settings were said to have no effect
    under "estimator=exact (as requested)", an estimator the user never asked for. canonical is now an estimator of
    the table, and the warning names it."""
    from lm_latent_eval.harness.backends import LatentTokenizationEval

    with caplog.at_level(logging.WARNING, logger="lm_latent_eval"):
        LatentTokenizationEval(estimator="canonical", num_samples=7, seed=3, device="cpu")
    (message,) = ignored(caplog)
    assert "num_samples=7" in message and "estimator=canonical" in message and "exact" not in message
    assert "seed" not in message


def test_settings_the_estimator_uses_raise_no_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="lm_latent_eval"):
        LatentHMMEval(estimator="is", num_samples=8, seed=3, temperature=1.5, level=0.9, device="cpu")
        LatentHMMEval(
            estimator="smc", num_samples=8, smc_runs=2, target_se=0.01, max_samples=64, device="cpu"
        )
        LatentHMMEval(estimator="exact", batch_size=4, device="cpu")
    assert ignored(caplog) == []


def documented_lm_eval_runs() -> list[tuple[str, str, str]]:
    """(file, backend, model_args) of every ``lm_eval --model latent* ... --model_args ...`` the docs quote."""
    runs = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = page.read_text(encoding="utf-8").replace("\\\n", " ")
        for command in re.findall(r"lm_eval [^\n`]*", text):
            backend = re.search(r"--model (latent\w*)", command)
            model_args = re.search(r"--model_args (\S+)", command)
            if backend and model_args:
                runs.append((page.name, backend.group(1), model_args.group(1)))
    return runs


def test_no_documented_command_gives_a_setting_its_estimator_ignores():
    """docs/lm-eval.md's first command gave num_samples, temperature and peek to the HMM under auto, which runs the
    exact marginal: none of them had an effect (the same mistake as the estimate-card example of item 10)."""
    from lm_eval.utils import simple_parse_args_string

    from lm_latent_eval.estimators import ResolvedEstimator, estimator_named, resolve
    from lm_latent_eval.harness.model_args import parse_settings, settings_args
    from lm_latent_eval.models import load_model

    runs = documented_lm_eval_runs()
    assert len(runs) > 10
    names = {a.name for a in settings_args()}
    wrong = []
    for page, backend, model_args in runs:
        given = simple_parse_args_string(model_args)
        if not names & set(given):
            continue
        settings = parse_settings(given)
        if settings.estimator == "auto":
            if "pretrained" in given or backend == "latent":
                continue  # a placeholder model: auto's choice depends on it
            settings = resolve(settings, load_model(backend.removeprefix("latent_"))[0]).settings
        run = ResolvedEstimator(estimator_named(settings.estimator), settings, None)
        unused = run.ignored_settings([n for n in given if n in names])
        if unused:
            wrong.append(f"{page}: --model {backend} --model_args {model_args}: {unused} ignored")
    assert wrong == []


def generate(lm, context: str, **gen_kwargs) -> str:
    from lm_eval.api.instance import Instance

    gen_kwargs = {"until": ["."], "max_gen_toks": 12} | gen_kwargs
    (text,) = lm.generate_until([Instance("generate_until", {}, (context, gen_kwargs), 0)], disable_tqdm=True)
    return text


def seeded_candidates(lm, context: str) -> list[str]:
    """The GREEDY_CANDIDATES seeded samples ``generate_until`` chooses from, drawn here as it draws them (seed 3, cut at
    the first ".")."""
    from lm_latent_eval.estimators.seeding import document_generator
    from lm_latent_eval.harness.generation import GENERATION_STREAM, GREEDY_CANDIDATES

    candidates = []
    for i in range(GREEDY_CANDIDATES):
        gen = document_generator(3, context, GENERATION_STREAM - i, device=lm.device)
        text = lm.model.sample_text(context, 12, generator=gen, stop=["."])
        candidates.append(text[: text.find(".")] if "." in text else text)
    return candidates


def test_greedy_decoding_returns_the_most_probable_of_the_seeded_samples():
    """``do_sample: false`` (gsm8k and lm-eval's default) was dropped without a word: the text was one ancestral
    sample. Now the most probable, under the run's estimator, of GREEDY_CANDIDATES seeded samples."""

    lm = LatentHMMEval(estimator="exact", seed=3, device="cpu")
    context = "Anna saw"
    candidates = seeded_candidates(lm, context)
    best = max(candidates, key=lambda c: lm.model.log_marginal(lm.model.tokenize(context + c)))
    greedy = generate(lm, context, do_sample=False, temperature=0.0)
    assert (
        greedy == best == generate(lm, context, temperature=0.0)
    )  # temperature 0 alone means greedy, as in hf
    assert generate(lm, context, do_sample=True) == candidates[0] == generate(lm, context)


@pytest.mark.parametrize(
    "gen_kwargs, match",
    [
        ({"do_sample": True, "temperature": 0.0}, "temperature=0.0"),
        ({"temperature": -1.0}, "temperature=-1.0"),
        ({"do_sample": True, "top_p": 0.9}, "top_p=0.9"),
        ({"top_k": 40}, "top_k=40"),
        ({"num_beams": 4}, "num_beams=4"),
    ],
)
def test_a_generation_setting_the_model_cannot_honour_is_refused(gen_kwargs, match):
    from lm_latent_eval.errors import UserError

    lm = LatentHMMEval(estimator="exact", seed=3, device="cpu")
    with pytest.raises(UserError, match=match) as err:
        generate(lm, "Anna saw", **gen_kwargs)
    assert "\n" not in str(err.value)
    generate(lm, "Anna saw", do_sample=True, temperature=1.0, top_p=1.0, top_k=0)  # settings with no effect


def test_a_gen_kwargs_setting_the_model_cannot_honour_says_how_to_pass_what_it_reads():
    """Issue 43, item 11: ``lm_eval --gen_kwargs top_k=5`` was told to edit the task's ``generation_kwargs`` (it
    comes from the command line, which lm-eval merges into them): the line names what the backends read, how to pass
    it with --gen_kwargs, and the value of top_k that is accepted."""
    from lm_latent_eval.errors import UserError

    lm = LatentHMMEval(estimator="exact", seed=3, device="cpu")
    with pytest.raises(UserError) as err:
        generate(lm, "Anna saw", top_k=5)
    message = str(err.value)
    assert message.startswith("generate_until: top_k=5 is not supported (HMMLanguageModel.sample_text draws")
    assert (
        "read until, max_gen_toks, do_sample, temperature from lm_eval --gen_kwargs or the task's" in message
    )
    assert "e.g. --gen_kwargs do_sample=true,temperature=0.7): remove top_k from --gen_kwargs" in message
    assert message.endswith("; top_k=0 is accepted, as it changes nothing") and "\n" not in message


def test_a_sampling_temperature_resamples_the_seeded_candidates_by_their_tempered_probability():
    """``temperature: 0.7`` under sampling was refused (and before that dropped): now one of the GREEDY_CANDIDATES
    seeded samples, drawn with probability ∝ p̂(c | context)^{1/τ − 1} (``tempered_pick``, from its own stream of
    (seed, context)); a temperature near 0 gives the greedy pick."""
    from lm_latent_eval.estimators.seeding import document_generator
    from lm_latent_eval.harness.generation import GENERATION_STREAM, GREEDY_CANDIDATES, tempered_pick

    lm = LatentHMMEval(estimator="exact", seed=3, device="cpu")
    context = "Anna saw"
    candidates = seeded_candidates(lm, context)
    scores = [float(lm.model.log_marginal(lm.model.tokenize(context + c))) for c in candidates]
    assert len(set(candidates)) > 1
    for tau in (0.5, 2.0):
        pick = tempered_pick(
            scores, tau, document_generator(3, context, GENERATION_STREAM - GREEDY_CANDIDATES)
        )
        assert generate(lm, context, do_sample=True, temperature=tau) == candidates[pick]
        assert generate(lm, context, temperature=tau) == candidates[pick]  # do_sample unset: sampling
    assert generate(lm, context, do_sample=True, temperature=1e-4) == generate(lm, context, do_sample=False)


@pytest.mark.parametrize("tau", [0.5, 2.0])
def test_tempered_pick_draws_each_candidate_with_probability_proportional_to_its_tempered_weight(tau):
    """P(pick i) = softmax((1/τ − 1) · score)_i: candidates sampled from p, resampled toward p^{1/τ}."""
    import torch

    from lm_latent_eval.harness.generation import tempered_pick

    scores = [-1.0, -2.0, -3.0, -0.5]
    gen, n = torch.Generator().manual_seed(0), 20000
    counts = torch.bincount(torch.tensor([tempered_pick(scores, tau, gen) for _ in range(n)]), minlength=4)
    expected = torch.softmax(torch.tensor(scores, dtype=torch.float64) * (1 / tau - 1), 0)
    sd = (expected * (1 - expected) / n).sqrt()
    assert ((counts / n - expected).abs() <= 4 * sd).all(), (counts / n, expected)
