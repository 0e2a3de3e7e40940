"""The masked-diffusion trainer (the MDLM objective, by hand), the sentence corpus, the bundled checkpoint and its task
data, and `lm-latent-eval train masked`."""

from __future__ import annotations

import json
import math

import pytest
import torch

from lm_latent_eval.models import load_model
from lm_latent_eval.models.masked import MASK, MaskedDiffusionLM
from lm_latent_eval.models.masked.corpus import TEST_FILE, load_masked_tiny, read_sentences, split_sentences
from lm_latent_eval.models.masked.exact import brute_force_log_marginal
from lm_latent_eval.models.masked.train import (
    TrainConfig,
    diffusion_loss,
    length_batches,
    train_masked,
)
from lm_latent_eval.paths import DATA_DIR

SENTENCES = [
    "the dog slept .",
    "a cat ran .",
    "the cat slept .",
    "a dog ran .",
    "the dog ran .",
    "a cat slept .",
]


def test_the_diffusion_loss_is_the_inverse_ratio_weighted_cross_entropy_on_masked_positions():
    """t_b = (b + u_b) / B; position i masked when its uniform < t_b; loss Σ_b (1/t_b) Σ_masked −log p_θ(x_i | ...)."""
    torch.manual_seed(0)
    model = MaskedDiffusionLM(
        ["<unk>", MASK, "a", "b"], d_model=8, num_layers=1, num_heads=2, max_length=4
    ).eval()
    ids = torch.tensor([[2, 3, 2], [3, 3, 2]])
    with torch.no_grad():
        loss = diffusion_loss(model, ids, torch.Generator().manual_seed(5))
    g = torch.Generator().manual_seed(5)
    t = (torch.arange(2) + torch.rand(2, generator=g)) / 2
    masked = torch.rand(2, 3, generator=g) < t[:, None]
    expected = 0.0
    with torch.no_grad():
        for b in range(2):
            inputs = torch.where(masked[b], torch.tensor(1), ids[b])
            logits = model.predict(inputs[None])[0].double()
            logits[:, 1] = -math.inf
            log_p = torch.log_softmax(logits, -1)
            expected += sum(-float(log_p[i, ids[b, i]]) for i in range(3) if masked[b, i]) / float(t[b])
    assert masked.any() and float(loss) == pytest.approx(expected, rel=1e-5)


def test_sentences_and_length_batches():
    assert split_sentences(["A b. C d?", " E f! "]) == ["A b.", "C d?", "E f!"]
    batches = length_batches(
        [torch.tensor([1, 2]), torch.tensor([3]), torch.tensor([4, 5]), torch.tensor([])], 1
    )
    assert [b.tolist() for b in batches] == [[[3]], [[1, 2]], [[4, 5]]]


def test_training_lowers_the_bound_keeps_the_best_epoch_and_reports_the_exact_perplexity(tmp_path):
    config = TrainConfig(
        d_model=16, num_layers=1, num_heads=2, max_length=8, epochs=6, min_count=1, exact_tokens=4
    )
    model, history = train_masked(SENTENCES * 4, SENTENCES[:2], config, tmp_path, progress=False)
    assert [r["epoch"] for r in history[:-1]] == list(range(1, 7))
    assert history[-1]["final"] and history[-1]["valid_exact_texts"] == 2
    assert history[-2]["train_nelbo_ppl"] < history[0]["train_nelbo_ppl"]
    x = [model.tokenize(s) for s in SENTENCES[:2]]
    exact = math.exp(-sum(model.log_marginal(t) for t in x) / 8)
    assert history[-1]["valid_exact_ppl"] == pytest.approx(exact, rel=1e-9)
    record = json.loads((tmp_path / "training.json").read_text())
    assert record["config"]["d_model"] == 16 and len(record["history"]) == 7
    loaded = MaskedDiffusionLM.from_pretrained(str(tmp_path))
    assert loaded.log_marginal(x[0]) == pytest.approx(model.log_marginal(x[0]), abs=1e-12)


def test_the_bundled_model_is_small_and_exact_on_its_held_out_sentences():
    folder = DATA_DIR / "masked"
    assert sum(p.stat().st_size for p in folder.iterdir()) < 2_000_000
    model, _ = load_model("masked")
    held_out = read_sentences(TEST_FILE)
    assert len(held_out) == 44 and max(model.tokenize(s).numel() for s in held_out) <= 14
    assert load_masked_tiny()["test"]["text"] == held_out
    x = model.tokenize(held_out[0])
    assert x.numel() <= 6
    assert model.log_marginal(x) == pytest.approx(brute_force_log_marginal(model, x), abs=1e-6)


def test_the_train_subcommand_trains_and_saves(tmp_path, capsys):
    from lm_latent_eval.cli import main

    data = tmp_path / "train.txt"
    data.write_text("\n".join(SENTENCES) + "\n")
    args = ["train", "masked", "--train", str(data), "--output", str(tmp_path / "out"), "--epochs", "1",
            "--d-model", "8", "--num-heads", "2", "--num-layers", "1", "--no-progress"]  # fmt: skip
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["final"]["epoch"] == 1
    assert (tmp_path / "out" / "model.safetensors").is_file()
