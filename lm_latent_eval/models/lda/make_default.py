"""Write the bundled split of ``pydoc_data.topics`` (once) and train the bundled LDA on it.

python -m lm_latent_eval.models.lda.make_default --output-dir lm_latent_eval/data   # lda/, from the bundled split
python -m lm_latent_eval.models.lda.make_default --output-dir OUT --new-split  # OUT/pydoc_topics/ from this Python too
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

from ..training import save_checkpoint
from .corpus import CORPUS_DIR, pydoc_paragraphs, read_texts, split_paragraphs, write_jsonl
from .tokenizer import DEFAULT_TOKEN_PATTERN
from .train import LDATrainingConfig, train_lda


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--output-dir",
        type=Path,
        required=True,
        help="writes OUTPUT_DIR/lda (and OUTPUT_DIR/pydoc_topics with --new-split)",
    )
    parser.add_argument(
        "--new-split", action="store_true", help="split this Python's pydoc_data.topics afresh (seed 0)"
    )
    args = parser.parse_args(argv)
    corpus_dir = args.output_dir / CORPUS_DIR.name if args.new_split else CORPUS_DIR
    if args.new_split:
        corpus_dir.mkdir(parents=True, exist_ok=True)
        train, test = split_paragraphs(pydoc_paragraphs(), DEFAULT_TOKEN_PATTERN, seed=0)
        write_jsonl(corpus_dir / "train.jsonl", train)
        write_jsonl(corpus_dir / "test.jsonl", test)
        source = {"python": platform.python_version(), "train": len(train), "test": len(test)}
        (corpus_dir / "source.json").write_text(json.dumps(source, indent=1) + "\n")
    config = LDATrainingConfig()
    model, history = train_lda(read_texts(corpus_dir / "train.jsonl"), config)
    save_checkpoint(model, args.output_dir / "lda", config, history)
    print(f"wrote {args.output_dir / 'lda'}: {model}")


if __name__ == "__main__":
    main()
