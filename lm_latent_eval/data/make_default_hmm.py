"""Regenerate the embedded default: the tiny synthetic English corpus and the HMM trained on it.

    python -m lm_latent_eval.data.make_default_hmm --output-dir lm_latent_eval/data   # corpus/tiny_*.jsonl, hmm/

The corpus comes from a small probabilistic grammar (determiners, adjectives, nouns, verbs, prepositions,
names, numbers) with Zipf-distributed word choices, so it has the part-of-speech structure an HMM can find
and a long tail of rare names and numbers that become ``<unk>``. Everything is seeded: same files every run.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

WORDS = {
    "det": ["the", "a", "this", "every", "that", "some"],
    "adj": [
        "old",
        "small",
        "quiet",
        "young",
        "red",
        "happy",
        "tall",
        "dark",
        "busy",
        "green",
        "cold",
        "bright",
        "tired",
        "little",
    ],
    "noun": [
        "dog",
        "cat",
        "teacher",
        "child",
        "farmer",
        "river",
        "house",
        "city",
        "bird",
        "book",
        "king",
        "doctor",
        "garden",
        "road",
        "ship",
        "friend",
        "village",
        "window",
        "letter",
        "horse",
        "tree",
        "student",
        "market",
        "song",
    ],
    "vt": [
        "saw",
        "found",
        "liked",
        "followed",
        "helped",
        "watched",
        "carried",
        "visited",
        "painted",
        "called",
        "met",
        "built",
    ],
    "vi": ["slept", "arrived", "laughed", "waited", "smiled", "left", "sang", "ran", "worked", "stayed"],
    "adv": ["quickly", "slowly", "again", "today", "quietly", "later", "often"],
    "prep": ["near", "in", "behind", "under", "with", "across", "beside"],
    "time": ["in the morning", "at night", "after the rain", "on sunday", "every day", "before dinner"],
    "name": [
        "anna",
        "john",
        "maria",
        "peter",
        "lucy",
        "tom",
        "sara",
        "david",
        "emma",
        "paul",
        "nina",
        "oscar",
        "clara",
        "hugo",
        "ivan",
        "julia",
        "leo",
        "mona",
        "felix",
        "greta",
        "omar",
        "rosa",
        "victor",
        "wanda",
    ],
    "num": [
        "two",
        "three",
        "four",
        "five",
        "six",
        "seven",
        "ten",
        "twelve",
        "3",
        "7",
        "12",
        "20",
        "41",
        "58",
        "99",
        "100",
        "250",
        "1000",
    ],
}


def zipf(rng: random.Random, words: list[str], s: float = 1.1) -> str:
    """One word, the r-th most common with probability ∝ 1 / r^s."""
    return rng.choices(words, weights=[1.0 / (r + 1) ** s for r in range(len(words))])[0]


def noun_phrase(rng: random.Random) -> str:
    if rng.random() < 0.25:
        return zipf(rng, WORDS["name"], 1.3)
    if rng.random() < 0.1:
        return f"{zipf(rng, WORDS['num'], 1.2)} {zipf(rng, WORDS['noun'])}s"
    adj = f"{zipf(rng, WORDS['adj'])} " if rng.random() < 0.4 else ""
    return f"{zipf(rng, WORDS['det'])} {adj}{zipf(rng, WORDS['noun'])}"


def verb_phrase(rng: random.Random) -> str:
    if rng.random() < 0.55:
        vp = f"{zipf(rng, WORDS['vt'])} {noun_phrase(rng)}"
    else:
        vp = zipf(rng, WORDS["vi"])
    if rng.random() < 0.3:
        vp += f" {zipf(rng, WORDS['prep'])} {noun_phrase(rng)}"
    if rng.random() < 0.2:
        vp += f" {zipf(rng, WORDS['adv'])}"
    return vp


def sentence(rng: random.Random) -> str:
    """One sentence from the grammar, capitalized and punctuated."""
    kind = rng.random()
    if kind < 0.1:
        s = f"did {noun_phrase(rng)} see {noun_phrase(rng)} ?"
    elif kind < 0.2:
        s = f"{zipf(rng, WORDS['time'])} , {noun_phrase(rng)} {verb_phrase(rng)} ."
    elif kind < 0.3:
        s = f"{noun_phrase(rng)} said that {noun_phrase(rng)} {verb_phrase(rng)} ."
    elif kind < 0.38:
        s = f"{noun_phrase(rng)} {verb_phrase(rng)} and {verb_phrase(rng)} ."
    else:
        s = f"{noun_phrase(rng)} {verb_phrase(rng)} ."
    s = s.replace(" .", ".").replace(" ?", "?").replace(" ,", ",")
    return s[0].upper() + s[1:]


def document(rng: random.Random, min_sentences: int, max_sentences: int) -> str:
    return " ".join(sentence(rng) for _ in range(rng.randint(min_sentences, max_sentences)))


def make_corpus(seed: int = 0, num_train: int = 400, num_test: int = 30) -> tuple[list[str], list[str]]:
    """(train, test) documents: train has 2–5 sentences each, test 1–2 short ones so IS on it is quick."""
    rng = random.Random(seed)
    train = [document(rng, 2, 5) for _ in range(num_train)]
    test = [document(rng, 1, 2) for _ in range(num_test)]
    return train, test


def write_jsonl(path: Path, texts: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps({"text": text}) + "\n" for text in texts)


def main(argv: list[str] | None = None) -> int:
    from lm_latent_eval.cli import main as cli_main
    from lm_latent_eval.models.training import make_default_arguments

    args = make_default_arguments(__doc__, None, argv)
    train, test = make_corpus(args.seed)
    corpus_dir = args.output_dir / "corpus"
    write_jsonl(corpus_dir / "tiny_train.jsonl", train)
    write_jsonl(corpus_dir / "tiny_test.jsonl", test)
    print(f"wrote {len(train)} training and {len(test)} test documents to {corpus_dir}")
    # paths relative to the working directory when possible, so the recipe in the model card is portable
    train_file, test_file, out = (
        os.path.relpath(p) if Path.cwd() in p.resolve().parents else str(p)
        for p in (corpus_dir / "tiny_train.jsonl", corpus_dir / "tiny_test.jsonl", args.output_dir / "hmm")
    )
    recipe = [*DEFAULT_TRAIN_ARGS[:-2], "--seed", str(args.seed)]  # the held-out documents are only reported
    return cli_main(["train", "hmm", "--train", train_file, "--valid", test_file, "--output", out, *recipe])


# the exact training recipe of the bundled checkpoint
DEFAULT_TRAIN_ARGS = [
    "--num-states",
    "12",
    "--iterations",
    "100",
    "--proposal-iterations",
    "30",
    "--proposal-flatten",
    "0.5",
    "--min-count",
    "2",
    "--seed",
    "0",
]

if __name__ == "__main__":
    raise SystemExit(main())
