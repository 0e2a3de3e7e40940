"""Build the bundled default: a small masked-diffusion LM trained on the sentences of the bundled tiny corpus.

``python -m lm_latent_eval.models.masked.make_default --output-dir lm_latent_eval/data`` writes
``lm_latent_eval/data/masked/`` (config.json + model.safetensors, training.json, README.md) and the held-out task's
sentences ``lm_latent_eval/data/masked_tiny/test.jsonl`` (those of ``data/corpus/tiny_test.jsonl``), with nothing
downloaded. The first 100 training sentences are the validation set. Deterministic given the seed (up to
floating-point differences across torch builds); a few minutes on 2 CPU cores.
"""

from __future__ import annotations

import time

from ..training import default_settings, fresh_folder, make_default_arguments
from .corpus import HELD_OUT_FILE, TRAIN_FILE, read_sentences, write_sentences
from .train import TrainConfig, train_masked

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


def main(argv: list[str] | None = None) -> None:
    args = make_default_arguments(__doc__, TRAINING.epochs, argv)
    sentences = read_sentences(TRAIN_FILE)
    valid, train = sentences[:NUM_VALID], sentences[NUM_VALID:]
    settings = default_settings(TRAINING, args)
    out = fresh_folder(args.output_dir / "masked")
    start = time.time()
    model, history = train_masked(train, valid, settings, out, progress=False)
    seconds = time.time() - start
    (out / "model.safetensors").chmod(0o644)
    best = min((r for r in history if "valid_nelbo_ppl" in r), key=lambda r: r["valid_nelbo_ppl"])
    final = history[-1]
    card = CARD.format(layers=settings.num_layers, d_model=settings.d_model, vocab=len(model.vocab),
                       train=len(train), valid=len(valid), seed=args.seed, seconds=seconds,
                       nelbo=best["valid_nelbo_ppl"], exact=final["valid_exact_ppl"],
                       exact_texts=final["valid_exact_texts"], exact_tokens=settings.exact_tokens)  # fmt: skip
    (out / "README.md").write_text(card)
    test_file = write_sentences(read_sentences(HELD_OUT_FILE), args.output_dir / "masked_tiny" / "test.jsonl")
    print(f"wrote {out} and {test_file} in {seconds:.0f} s; final: {final}")


if __name__ == "__main__":
    main()
