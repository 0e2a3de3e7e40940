"""Build the bundled default: the synthetic coreference corpus, a small EntityNLM + proposal trained on it, test data.

``python -m lm_latent_eval.models.entitynlm.make_default --output-dir lm_latent_eval/data`` writes ``lm_latent_eval/data/entitynlm/`` (checkpoint in
the Hub layout) and ``lm_latent_eval/data/coref_tiny/test.jsonl`` (CoNLL-2012 JSONL: tokens + clusters), with
nothing downloaded. Deterministic given the seed (up to floating-point differences across torch builds).
"""

from __future__ import annotations

from ..training import default_settings, fresh_folder, make_default_arguments, split_documents, write_card
from .conll import write_coref_jsonl
from .synthetic import SyntheticConfig, generate_corpus
from .train import TrainConfig, train_entitynlm

CORPUS = SyntheticConfig(num_documents=350)
TRAINING = TrainConfig(epochs=40)
NUM_TEST = 20
NUM_VALID = 30
CARD = """# Bundled EntityNLM (lm-latent-eval)

A small EntityNLM (Ji et al., 2017) p(x, z) and its discriminative proposal q(z | x), trained by
`python -m lm_latent_eval.models.entitynlm.make_default` on {train} synthetic coreference stories
(`lm_latent_eval/models/entitynlm/synthetic.py`, seed {seed}); {valid} stories for validation; the first {test}
are `lm_latent_eval/data/coref_tiny/test.jsonl`. Settings and the per-epoch record: `training.json`.
Final validation: per-token perplexity on gold z {gold:.3f}, IS perplexity ({k} peeking samples) {is_ppl:.3f}.
A test fixture for the estimators, not a model of English.
"""


def main(argv: list[str] | None = None) -> None:
    args = make_default_arguments(__doc__, TRAINING.epochs, argv)
    docs = generate_corpus(CORPUS, seed=args.seed)
    splits = test, valid, train = split_documents(docs, NUM_TEST, NUM_VALID)
    out = fresh_folder(args.output_dir / "entitynlm")
    _, history = train_entitynlm(train, valid, default_settings(TRAINING, args), out)
    write_card(out, CARD, splits, args.seed, history[-1])
    write_coref_jsonl(test, args.output_dir / "coref_tiny" / "test.jsonl")
    print(f"wrote {out} and {args.output_dir / 'coref_tiny'}; final: {history[-1]}")


if __name__ == "__main__":
    main()
