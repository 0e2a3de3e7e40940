"""Build the bundled default: a small masked-diffusion LM trained on the sentences of the bundled tiny corpus.

``python -m lm_latent_eval.models.masked.make_default --output-dir lm_latent_eval/data`` writes
``lm_latent_eval/data/masked/`` (config.json + model.safetensors, training.json, README.md) and the held-out task's
sentences ``lm_latent_eval/data/masked_tiny/test.jsonl`` (those of ``data/corpus/tiny_test.jsonl``), with nothing
downloaded. The first 100 training sentences are the validation set. After the network, SMC's value head
(``value.py``) is fitted to the exact log V(S) of short pieces of the training sentences joined, then to the
Bellman identity on longer pieces (``--value-head-only``: that step alone, on the checkpoint already in the output
folder). Deterministic given the seed (up to
floating-point differences across torch builds); a few minutes on 2 CPU cores.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from ..training import default_settings, fresh_folder, make_default_arguments
from .corpus import HELD_OUT_FILE, TRAIN_FILE, read_sentences, write_sentences
from .diffusion import MaskedDiffusionLM
from .train import TrainConfig, train_masked
from .value_fit import HeadRecipe, fit_head, value_pieces

TRAINING = TrainConfig(epochs=30)
NUM_VALID = 100
CARD = """# Bundled masked-diffusion LM (lm-latent-eval)

A word-level masked-diffusion LM: a {layers}-layer bidirectional transformer encoder (d_model {d_model}) over
{vocab} words, trained by `python -m lm_latent_eval.models.masked.make_default` with the MDLM objective (mask ratio
t ~ U(0, 1), cross-entropy on the masked positions weighted 1/t) on {train} sentences of
`lm_latent_eval/data/corpus/tiny_train.jsonl` ({valid} more for validation; seed {seed}; {seconds:.0f} s).
As a latent LM its latent is the reveal order σ: p(x) = Σ_σ p(x, σ), exact by a dynamic program over revealed
sets up to 16 tokens. Final validation: negative-ELBO perplexity bound {nelbo:.3f}; exact perplexity {exact:.3f}
over the {exact_texts} sentences of at most {exact_tokens} tokens. Settings and per-epoch record: `training.json`.
A test fixture for the estimators, not a model of English.
"""
VALUE_CARD = """
SMC's value head (`lm_latent_eval/models/masked/value.py`, width {width}): fitted by the same command
(`--value-head-only`: that step alone) to the exact log V(S) of {texts} pieces of {lengths} tokens of the training
sentences joined ({steps} Adam steps; mean loss of the last 100 {loss:.4f}), then to the Bellman identity on
{long_texts} pieces of {long_lengths} tokens ({long_steps} steps; {long_loss:.4f}); seed {seed}, {seconds:.0f} s.
"""


def add_value_head(model: MaskedDiffusionLM, sentences: list[str], seed: int, out: Path) -> str:
    """The model again with a value head fitted to pieces of ``sentences`` (``fit_head``), saved to ``out``;
    returns the card's paragraph."""
    start = time.time()
    recipe = HeadRecipe()
    config = {**model._hub_mixin_config, "value_width": recipe.width}
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        headed = MaskedDiffusionLM(**config)
    headed.predictor.load_state_dict(model.predictor.state_dict())
    headed.eval()
    short = value_pieces(headed, sentences, seed, recipe.pieces, recipe.lengths)
    long = value_pieces(headed, sentences, seed + 1, recipe.bellman_pieces, recipe.bellman_lengths)
    loss, long_loss = fit_head(headed, short, long, seed, recipe)
    headed.save_pretrained(out)
    (out / "model.safetensors").chmod(0o644)
    return VALUE_CARD.format(width=recipe.width, texts=recipe.pieces, steps=recipe.steps, seed=seed, loss=loss,
                             lengths=f"{recipe.lengths[0]} to {recipe.lengths[-1]}", long_texts=recipe.bellman_pieces,
                             long_lengths=f"{recipe.bellman_lengths[0]} to {recipe.bellman_lengths[-1]}",
                             long_steps=recipe.bellman_steps,
                             long_loss=long_loss, seconds=time.time() - start)  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    flags = {"--value-head-only": "fit the value head of the checkpoint in OUTPUT_DIR/masked, nothing else"}
    args = make_default_arguments(__doc__, TRAINING.epochs, argv, flags)
    sentences = read_sentences(TRAIN_FILE)
    valid, train = sentences[:NUM_VALID], sentences[NUM_VALID:]
    out = args.output_dir / "masked"
    if args.value_head_only:
        model = MaskedDiffusionLM.from_pretrained(str(out))
        card = (out / "README.md").read_text().split("\nSMC's value head")[0]
        (out / "README.md").write_text(card + add_value_head(model, train, args.seed, out))
        print(f"wrote the value head into {out}")
        return
    settings = default_settings(TRAINING, args)
    out = fresh_folder(out)
    start = time.time()
    model, history = train_masked(train, valid, settings, out, progress=False)
    seconds = time.time() - start
    best = min((r for r in history if "valid_nelbo_ppl" in r), key=lambda r: r["valid_nelbo_ppl"])
    final = history[-1]
    card = CARD.format(layers=settings.num_layers, d_model=settings.d_model, vocab=len(model.vocab),
                       train=len(train), valid=len(valid), seed=args.seed, seconds=seconds,
                       nelbo=best["valid_nelbo_ppl"], exact=final["valid_exact_ppl"],
                       exact_texts=final["valid_exact_texts"], exact_tokens=settings.exact_tokens)  # fmt: skip
    (out / "README.md").write_text(card + add_value_head(model, train, args.seed, out))
    test_file = write_sentences(read_sentences(HELD_OUT_FILE), args.output_dir / "masked_tiny" / "test.jsonl")
    print(f"wrote {out} and {test_file} in {seconds:.0f} s; final: {final}")


if __name__ == "__main__":
    main()
