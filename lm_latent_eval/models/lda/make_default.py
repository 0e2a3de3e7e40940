"""Write the bundled split of ``pydoc_data.topics`` (once) and train the bundled LDA on it.

python -m lm_latent_eval.models.lda.make_default            # retrains from the bundled split
python -m lm_latent_eval.models.lda.make_default --new-split  # rewrites the split from this Python's pydoc_data
"""

from __future__ import annotations

import argparse
import json
import platform

from ...paths import DATA_DIR
from ..training import save_checkpoint
from .corpus import CORPUS_DIR, pydoc_paragraphs, read_texts, split_paragraphs, write_jsonl
from .tokenizer import DEFAULT_TOKEN_PATTERN
from .train import LDATrainingConfig, train_lda


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--new-split", action="store_true")
    parser.add_argument("--output", default=str(DATA_DIR / "lda"))
    args = parser.parse_args(argv)
    if args.new_split or not (CORPUS_DIR / "train.jsonl").is_file():
        train, test = split_paragraphs(pydoc_paragraphs(), DEFAULT_TOKEN_PATTERN, seed=0)
        write_jsonl(CORPUS_DIR / "train.jsonl", train)
        write_jsonl(CORPUS_DIR / "test.jsonl", test)
        source = {"python": platform.python_version(), "train": len(train), "test": len(test)}
        (CORPUS_DIR / "source.json").write_text(json.dumps(source, indent=1) + "\n")
    config = LDATrainingConfig()
    model, history = train_lda(read_texts(CORPUS_DIR / "train.jsonl"), config)
    save_checkpoint(model, args.output, config, history)
    print(f"wrote {args.output}: {model}")


if __name__ == "__main__":
    main()
