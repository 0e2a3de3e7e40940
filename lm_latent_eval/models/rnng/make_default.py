"""Build the bundled default: the synthetic treebank, a small RNNG + tree-CRF proposal trained on it, test trees.

``python -m lm_latent_eval.models.rnng.make_default --output-dir lm_latent_eval/data`` writes ``lm_latent_eval/data/rnng/`` (checkpoint in the Hub
layout) and ``lm_latent_eval/data/ptb_tiny/test.txt`` (PTB-style bracketed trees with POS tags), with nothing
downloaded. Deterministic given the seed (up to floating-point differences across torch builds).
"""

from __future__ import annotations

from ..training import default_settings, fresh_folder, make_default_arguments, split_documents, write_card
from .synthetic import SyntheticConfig, generate_treebank
from .train import TrainConfig, train_rnng
from .treebank import sentence_from_bracketed

CORPUS = SyntheticConfig(num_sentences=1500)
TRAINING = TrainConfig(epochs=30)
NUM_TEST = 50
NUM_VALID = 100
CARD = """# Bundled RNNG (lm-latent-eval)

A small unlabeled binarized RNNG p(x, z) (Dyer et al. 2016; Kim et al. 2019) and its tree-CRF proposal q(z | x),
trained by `python -m lm_latent_eval.models.rnng.make_default` on {train} trees of the synthetic treebank
(`lm_latent_eval/models/rnng/synthetic.py`, seed {seed}); {valid} trees for validation; the first {test} are
`lm_latent_eval/data/ptb_tiny/test.txt`. Settings and the per-epoch record: `training.json`.
Final validation (sentence end counted): per-token perplexity on gold trees {gold:.3f}, IS perplexity ({k} trees per
sentence) {is_ppl:.3f}. A test fixture for the estimators, not a model of English.
"""


def main(argv: list[str] | None = None) -> None:
    args = make_default_arguments(__doc__, TRAINING.epochs, argv)
    trees = generate_treebank(CORPUS, seed=args.seed)
    sents = [sentence_from_bracketed(t, f"synthetic tree {i}") for i, t in enumerate(trees)]
    splits = _, valid, train = split_documents(sents, NUM_TEST, NUM_VALID)
    out = fresh_folder(args.output_dir / "rnng")
    _, history = train_rnng(train, valid, default_settings(TRAINING, args), out, progress=False)
    final = history[-1]
    write_card(out, CARD, splits, args.seed, final)
    test_file = args.output_dir / "ptb_tiny" / "test.txt"
    test_file.parent.mkdir(parents=True, exist_ok=True)
    test_file.write_text("".join(t + "\n" for t in trees[:NUM_TEST]), encoding="utf-8")
    print(f"wrote {out} and {test_file}; final: {final}")


if __name__ == "__main__":
    main()
