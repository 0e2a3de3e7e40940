"""Writes test.jsonl: 40 four-choice questions over the bundled HMM's vocabulary, in ARC-Easy's schema (lm-eval's
``arc_easy`` task reads them through ``tests/harness/test_builtin_tasks.local_copy_of``).

Each question is a sentence the HMM writes, each choice a continuation of 3 words it writes after the task's context
"Question: <question>\\nAnswer:", so the four choices' log p differ by a few nats at most and Monte Carlo error can
change which is largest; the answer key is drawn at random. Run from the repository root:
``python tests/data/hmm_choice/make.py`` (seeded: the same file every time).
"""

import json
from pathlib import Path

import torch

from lm_latent_eval.models import load_model

QUESTIONS, CHOICES, WORDS = 40, 4, 3


def main() -> None:
    hmm, _ = load_model("hmm")
    gen = torch.Generator().manual_seed(2026)
    rows = []
    for n in range(QUESTIONS):
        question = hmm.sample_text("", 6, gen).strip().capitalize() + "?"
        context = f"Question: {question}\nAnswer:"
        choices = []
        while len(choices) < CHOICES:
            choice = hmm.sample_text(context, WORDS, gen).strip()
            if choice and choice not in choices:
                choices.append(choice)
        answer = int(torch.randint(CHOICES, (1,), generator=gen))
        labels = ["A", "B", "C", "D"]
        rows.append(
            {
                "id": f"hmm-{n + 1}",
                "question": question,
                "choices": {"text": choices, "label": labels},
                "answerKey": labels[answer],
            }
        )
    out = Path(__file__).with_name("test.jsonl")
    out.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


if __name__ == "__main__":
    main()
