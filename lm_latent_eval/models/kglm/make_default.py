"""Build the bundled default: a synthetic linked corpus, a small KGLM + proposal trained on it, tiny eval data.

``python -m lm_latent_eval.models.kglm.make_default --output-dir lm_latent_eval/data`` writes ``lm_latent_eval/data/kglm/`` (checkpoint in the Hub
layout) and ``lm_latent_eval/data/linked_tiny/`` (``test.jsonl`` in Linked WikiText-2 format + the graph JSON),
so that ``lm_eval --model latent_kglm --tasks linked_wikitext2_tiny`` needs nothing else. Deterministic given the
seed (up to floating-point differences across torch builds).
"""

from __future__ import annotations

from ..training import default_settings, fresh_folder, make_default_arguments, split_documents
from .linked_wikitext import write_linked_jsonl
from .synthetic import SyntheticConfig, generate_corpus
from .train import TrainConfig, train_kglm

CORPUS = SyntheticConfig(num_documents=400)
TRAINING = TrainConfig(epochs=15)
NUM_TEST = 20
NUM_VALID = 20


def main(argv: list[str] | None = None) -> None:
    args = make_default_arguments(__doc__, TRAINING.epochs, argv)
    graph, docs = generate_corpus(CORPUS, seed=args.seed)
    test, valid, train = split_documents(docs, NUM_TEST, NUM_VALID)
    out = fresh_folder(args.output_dir / "kglm")
    _, history = train_kglm(train, valid, graph, default_settings(TRAINING, args), out)
    tiny = args.output_dir / "linked_tiny"
    tiny.mkdir(parents=True, exist_ok=True)
    write_linked_jsonl(test, tiny / "test.jsonl")
    graph.to_json(tiny / "knowledge_graph.json")
    print(f"wrote {out} and {tiny}; last epoch: {history[-1]}")


if __name__ == "__main__":
    main()
