"""`lm-latent-eval distortion` end to end on tiny GPT-2 models built here (nothing downloaded)."""

import csv
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.stats import chisquare
from tiny_models import make_tiny_gpt2

from lm_latent_eval.cli import main
from lm_latent_eval.distortion.artificial_language import sample_language, score_sequences

WORDS = ("the", "cat", "dog", "sat")
BOS, EOS = 1, 2


def build_tiny_lm(path: Path, seed: int, words=WORDS, sharpness: float = 6.0, n_positions: int = 64) -> Path:
    """A random GPT-2 (1 layer, 16 dims) over <unk> <bos> <eos> <pad> + words; ``sharpness`` scales logits."""
    return make_tiny_gpt2(
        path,
        words,
        n_positions,
        seed,
        n_embd=16,
        n_layer=1,
        n_head=2,
        bos="<bos>",
        eos="<eos>",
        pad="<pad>",
        sharpness=sharpness,
    )


@pytest.fixture(scope="module")
def lm_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny_lms")
    return {
        "reference": build_tiny_lm(root / "reference", seed=0),
        "model": build_tiny_lm(root / "model", seed=1),
        "other_vocab": build_tiny_lm(root / "other_vocab", seed=2, words=("a", "b", "c", "d")),
    }


@pytest.fixture(scope="module")
def reference_model(lm_dirs):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(lm_dirs["reference"]).eval()


@torch.no_grad()
def independent_token_log_probs(model, tokens, temperature, with_eos=True):
    """log softmax(logits / T)[x_t] from one full forward pass over BOS x (no cache, no batch, no padding)."""
    target = list(tokens) + ([EOS] if with_eos else [])
    ids = torch.tensor([[BOS, *target]])
    logits = model(input_ids=ids).logits[0, :-1].double() / temperature
    return torch.log_softmax(logits, -1)[torch.arange(len(target)), torch.tensor(target)].numpy()


def read_rows(path: Path) -> list[dict]:
    with open(path) as fh:
        return list(csv.DictReader(fh))


def test_sampled_log_probs_match_independent_recomputation(reference_model):
    gen = torch.Generator().manual_seed(0)
    sample = sample_language(
        reference_model, 30, BOS, EOS, temperature=0.7, max_length=12, batch_size=7, generator=gen
    )
    assert len(sample.tokens) == 30 and sample.finished.any() and (~sample.finished).any()
    for x, lp, done in zip(sample.tokens, sample.token_log_probs, sample.finished):
        want = independent_token_log_probs(reference_model, x, 0.7, with_eos=bool(done))
        assert lp.shape == want.shape == (len(x) + 1 if done else 12,)
        np.testing.assert_allclose(lp, want, atol=1e-5)
        assert EOS not in x[:-1] or not done  # a finished sample stops at its first EOS
    finished = [x for x, d in zip(sample.tokens, sample.finished) if d]
    scored = score_sequences(reference_model, finished, BOS, EOS, temperature=0.7, batch_size=4)
    logp = sample.log_probs[sample.finished]
    np.testing.assert_allclose([s.sum() for s in scored], logp, atol=1e-4)


def test_sampling_uses_the_current_cache_api(reference_model, recwarn, capfd):
    """No deprecation warning (warnings or transformers' logger) about ``past_key_values`` on every run."""
    capfd.readouterr()
    sample_language(
        reference_model, 4, BOS, EOS, max_length=5, generator=torch.Generator().manual_seed(0), progress=False
    )
    messages = [str(w.message) for w in recwarn] + [capfd.readouterr().err]
    assert not [m for m in messages if "past_key_values" in m or "deprecated" in m], messages


@pytest.mark.parametrize("temperature", [0.5, 2.0])
def test_sampling_frequencies_match_tempered_distribution(reference_model, temperature):
    """Two-token prefixes (x1, x2) drawn at T have probability p^T(x1 | BOS) p^T(x2 | BOS x1)."""
    n = 4000
    sample = sample_language(
        reference_model,
        n,
        BOS,
        EOS,
        temperature,
        max_length=2,
        batch_size=1000,
        generator=torch.Generator().manual_seed(1),
        progress=False,
    )
    outcomes = Counter(
        tuple(x) + (("EOS",) if done else ()) for x, done in zip(sample.tokens, sample.finished)
    )

    def prob(outcome, t):
        tokens = [EOS if tok == "EOS" else tok for tok in outcome]
        return float(np.exp(independent_token_log_probs(reference_model, tokens, t, with_eos=False).sum()))

    vocab = reference_model.config.vocab_size
    words = [a for a in range(vocab) if a != EOS]
    support = [("EOS",)] + [(a, "EOS") for a in words] + [(a, b) for a in words for b in words]

    def chi2_pvalue(t):
        expected = np.array([n * prob(s, t) for s in support])
        assert expected.sum() == pytest.approx(n, rel=1e-6)  # the outcomes cover the whole distribution
        observed = np.array([outcomes.get(s, 0) for s in support], dtype=float)
        assert observed.sum() == n
        big = expected >= 5  # merge rare outcomes into one cell
        if not big.all():
            observed = np.r_[observed[big], observed[~big].sum()]
            expected = np.r_[expected[big], expected[~big].sum()]
        return chisquare(observed, expected).pvalue

    assert chi2_pvalue(temperature) > 1e-3
    assert chi2_pvalue(1.0) < 1e-6  # the test can tell the tempered from the untempered distribution


def run_cli(tmp_path, reference, model, *extra, rc=0) -> tuple[Path, dict, list[dict]]:
    out = tmp_path / "out"
    code = main(
        [
            "distortion",
            "--reference",
            str(reference),
            "--model",
            str(model),
            "--output",
            str(out),
            "--device",
            "cpu",
            "--no-progress",
            "--num-resamples",
            "500",
            *map(str, extra),
        ]
    )
    assert code == rc
    if rc:
        return out, {}, []
    return out, json.loads((out / "summary.json").read_text()), read_rows(out / "sequences.csv")


@pytest.mark.filterwarnings("ignore:.*drew no EOS:UserWarning")
def test_pipeline_same_model_gives_zero_error_everywhere(tmp_path, lm_dirs):
    out, summary, rows = run_cli(
        tmp_path,
        lm_dirs["reference"],
        lm_dirs["reference"],
        "--num-sequences",
        300,
        "--max-length",
        30,
        "--perturbation-steps",
        2,
        "--num-random-sequences",
        60,
        "--num-rarity-bins",
        4,
        "--num-equal-size-bins",
        10,
        "--seed",
        3,
    )
    errors = np.array([float(r["error"]) for r in rows])
    assert np.abs(errors).max() < 1e-4
    kept = 300 - summary["num_truncated"]
    sources = Counter(r["source"] for r in rows)
    assert sources == {"sample": kept, "perturbed": 2 * kept, "random": 60}
    language = summary["language"]
    assert language["num_sequences"] == kept
    assert abs(language["mean_error"]) < 1e-5
    assert language["share_underestimated"] == 0.0 and language["share_overestimated"] == 0.0
    assert np.abs(language["equal_width_curve"]["mean_error"]).max() < 1e-5
    assert summary["perturbation_grid"]["steps"] == [0, 1, 2]
    assert summary["perturbation_grid"]["count_by_steps"] == [kept, kept, kept]
    assert summary["random"]["num_sequences"] == 60
    assert 0.0 < summary["potential_productivity"] <= 1.0
    # the recorded lengths, steps and parents describe the perturbation chains
    for r in rows:
        assert int(r["length"]) == len(r["tokens"].split()) + 1
        if r["source"] == "perturbed":
            assert 0 <= int(r["parent"]) < kept and int(r["perturbation_steps"]) in (1, 2)
    random_curve = summary["random"]["equal_width_curve"]
    assert sum(random_curve["count"]) + random_curve["dropped_sequences"] == 60  # none silently lost
    grid = summary["perturbation_grid"]
    expected_rows = {
        "equal_width_curve": len(language["equal_width_curve"]["count"]),
        "equal_size_curve": len(language["equal_size_curve"]["count"]),
        "length_curve": len(language["length_curve"]["count"]),
        "perturbation_grid": len(grid["bin_left"]) * len(grid["steps"]),
        "random_equal_width_curve": len(random_curve["count"]),
    }
    assert (
        min(
            expected_rows["equal_width_curve"],
            expected_rows["equal_size_curve"],
            expected_rows["length_curve"],
        )
        > 0
    )
    assert expected_rows["random_equal_width_curve"] == 0  # 60 sequences: no bin keeps more than 10 of them
    for name, n_rows in expected_rows.items():
        png = out / f"{name}.png"  # an empty frame is not drawn (it would read as "no error")
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" if n_rows else not png.exists()
        assert len(read_rows(out / f"{name}.csv")) == n_rows


def test_pipeline_scores_match_independent_recomputation(tmp_path, lm_dirs, reference_model):
    from transformers import AutoModelForCausalLM

    other = AutoModelForCausalLM.from_pretrained(lm_dirs["model"]).eval()
    with pytest.warns(UserWarning, match="drew no EOS within --max-length 8"):
        _, summary, rows = run_cli(
            tmp_path,
            lm_dirs["reference"],
            lm_dirs["model"],
            "--temperature",
            1.5,
            "--num-sequences",
            120,
            "--max-length",
            8,
            "--max-truncated",
            0.9,
            "--perturbation-steps",
            1,
            "--num-random-sequences",
            10,
            "--batch-size",
            16,
        )
    assert summary["num_truncated"] > 0
    assert Counter(r["source"] for r in rows)["sample"] == 120 - summary["num_truncated"]
    for r in rows[::7]:
        tokens = [int(t) for t in r["tokens"].split()]
        log_p_ref = independent_token_log_probs(reference_model, tokens, 1.5).sum()
        log_p_model = independent_token_log_probs(other, tokens, 1.0).sum()
        assert float(r["log_p_reference"]) == pytest.approx(log_p_ref, abs=1e-4)
        assert float(r["log_p_model"]) == pytest.approx(log_p_model, abs=1e-4)
        assert float(r["error"]) == pytest.approx(log_p_model - log_p_ref, abs=2e-4)
    errors = np.array([float(r["error"]) for r in rows if r["source"] == "sample"])
    assert summary["language"]["mean_error"] == pytest.approx(errors.mean(), abs=1e-9)
    assert np.abs(errors).max() > 0.1  # a different model really differs


def test_pipeline_rejects_models_with_different_vocabularies(tmp_path, lm_dirs, capsys):
    run_cli(tmp_path, lm_dirs["reference"], lm_dirs["other_vocab"], "--num-sequences", 5, rc=2)
    assert "tokenizers differ" in capsys.readouterr().err


def test_default_max_length_fits_the_context_window_and_a_too_long_one_names_the_option(
    tmp_path, lm_dirs, capsys
):
    """The reference's window is 64 positions: the default is 63 tokens after BOS; 64 is refused, naming the option."""
    _, summary, _ = run_cli(tmp_path, lm_dirs["reference"], lm_dirs["reference"], "--num-sequences", 40)
    assert summary["settings"]["max_length"] == 63
    run_cli(tmp_path, lm_dirs["reference"], lm_dirs["reference"], "--max-length", 64, rc=2)
    assert "pass --max-length 63 or less" in capsys.readouterr().err


def test_too_few_complete_samples_is_an_error_not_a_curve(tmp_path, lm_dirs, capsys):
    """Samples without EOS are left out; when most are, the curves would describe another language: exit 2."""
    run_cli(tmp_path, lm_dirs["reference"], lm_dirs["model"], "--num-sequences", 60, "--max-length", 2, rc=2)
    err = capsys.readouterr().err
    assert "samples drew no EOS within --max-length 2" in err and "raise --max-length" in err
    assert not (tmp_path / "out" / "summary.json").exists()


def test_sampling_beyond_the_context_window_is_refused(reference_model):
    with pytest.raises(ValueError, match="context window of 64"):
        sample_language(reference_model, 2, BOS, EOS, max_length=64)
    with pytest.raises(ValueError, match="temperature must be a positive"):
        sample_language(reference_model, 2, BOS, EOS, temperature=0.0)


def test_figures_name_both_models_the_temperature_and_nats(tmp_path, lm_dirs, monkeypatch):
    """The figures had no unit and no model names: each now names p_M, p_L and T in its title and gives nats."""
    from lm_latent_eval.distortion import plots

    saved, save = {}, plots.save_figure

    def record(fig, path):
        saved[Path(path).name] = fig
        return save(fig, path)

    monkeypatch.setattr(plots, "save_figure", record)
    run_cli(tmp_path, lm_dirs["reference"], lm_dirs["model"], "--num-sequences", 200, "--temperature", 1.5,
            "--perturbation-steps", 1, "--num-bins", 4, "--num-equal-size-bins", 4, "--num-rarity-bins", 3)  # fmt: skip
    assert set(saved) == {f"{n}.png" for n in ("equal_width_curve", "equal_size_curve", "length_curve",
                                               "perturbation_grid")}  # fmt: skip
    names = f"p_M = {lm_dirs['model'].parent.name}/model, p_L = {lm_dirs['reference'].parent.name}/reference"
    for name, fig in saved.items():
        ax = fig.axes[0]
        assert f"{names} at T = 1.5" in ax.get_title(), (name, ax.get_title())
        labels = [ax.get_ylabel()] + [a.get_ylabel() for a in fig.axes[1:]]  # the grid's colour bar
        assert any("nats" in label for label in labels), (name, labels)
        assert ax.lines or ax.images


def test_a_figure_with_no_bin_left_is_not_drawn(tmp_path, lm_dirs):
    """60 sequences in the default 18 equal-width bins leave none with more than --min-count 10: an empty frame
    would read as "no error", so it is left out with a warning naming the options."""
    with pytest.warns(
        UserWarning, match=r"equal_width_curve: every bin .* use fewer --num-bins or lower --min-count"
    ):
        out, summary, _ = run_cli(tmp_path, lm_dirs["reference"], lm_dirs["model"], "--num-sequences", 60)
    assert summary["language"]["equal_width_curve"]["count"] == []
    assert not (out / "equal_width_curve.png").exists() and (out / "equal_width_curve.csv").exists()


def test_perturbation_grid_keeps_the_title_clear_and_tells_no_data_from_zero(tmp_path):
    """Errors of 1e-5 nats: the colour bar's ticks carry their own scale (no offset text drawn over the title); a cell
    with too few sequences is grey, not the white of zero error."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import to_rgba

    from lm_latent_eval.distortion import plots

    grid = {
        "mean_error": [[1e-5, -2e-5, None], [0.0, 3e-5, 1.5e-5]],
        "steps": [0, 1, 2],
        "bin_left": [-10.0, -5.0],
        "bin_right": [-5.0, 0.0],
    }
    fig = plots.plot_perturbation_grid(grid)
    FigureCanvasAgg(fig).draw()
    ax, bar = fig.axes
    assert bar.yaxis.get_offset_text().get_text() == ""
    assert all("e" in t.get_text() or t.get_text() in ("0", "") for t in bar.get_yticklabels())
    (image,) = ax.get_images()
    bad, zero = image.cmap.get_bad(), image.cmap(image.norm(0.0))
    assert not np.allclose(bad, zero, atol=0.05) and not np.allclose(bad, to_rgba("white"), atol=0.05)
    assert "grey" in ax.get_title()
    plots.save_figure(fig, tmp_path / "grid.png")
