"""RNNG data: PTB-style bracketed trees (odd ones included) -> binary trees over words, plain-text sentences, the
synthetic treebank, and training p and q on trees (`lm-latent-eval train rnng`) into a loadable Hub checkpoint."""

from __future__ import annotations

import json
import math

import pytest
import torch

from lm_latent_eval.models.rnng import RNNG
from lm_latent_eval.models.rnng.latents import bracketed, tree_from_actions
from lm_latent_eval.models.rnng.synthetic import SyntheticConfig, generate_treebank
from lm_latent_eval.models.rnng.train import TrainConfig, train_rnng
from lm_latent_eval.models.rnng.treebank import (
    load_ptb,
    read_sentences,
    read_treebank,
    sentence_from_bracketed,
    write_treebank,
)

PTB = """( (S
    (NP-SBJ (NP (DT The) (NN dog) ) (SBAR (-NONE- 0) (S (NP-SBJ (-NONE- *T*-1)) (VP (VBD barked)))))
    (VP (VBD saw)
      (NP (NP (DT a) (NN cat) ) (PP (IN with) (NP (CD 3) (NNS hats) ))))
    (, ,) (ADVP (RB now))
    (. .) ))
(TOP (S (VP (VB Go))))
(S (NP (-NONE- *)) (. .))
(X (Y (Z (NN word))))
"""


def test_ptb_trees_with_traces_unary_chains_and_punctuation(tmp_path):
    path = tmp_path / "trees.mrg"
    path.write_text(PTB)
    with pytest.warns(UserWarning, match=r"trees.mrg:8: tree has no words"):
        sents = read_treebank(path, remove_punctuation=True)
    assert [s.name.rsplit(":", 1)[1] for s in sents] == [
        "1",
        "7",
        "9",
    ]  # multi-line tree; the empty one skipped
    first = sents[0]
    # -NONE- removed, the SBAR left with one word collapses, NP with 2 kids stays, VP (saw NP) binary, 4 kids of S
    assert first.words == ("The", "dog", "barked", "saw", "a", "cat", "with", "3", "hats", "now")
    assert first.bracketed() == "(((The dog) barked) ((saw ((a cat) (with (3 hats)))) now))"
    assert bracketed(tree_from_actions(list(first.words), first.actions)) == first.bracketed()
    assert sents[1].words == ("Go",) and sents[1].actions == [
        0
    ]  # unary chain TOP-S-VP-VB: a one-word sentence
    assert sents[2].words == ("word",)
    kept = read_treebank(path, lowercase=True, replace_numbers=True, binarize="left")
    assert kept[0].words[-2:] == ("now", ".") and "N" in kept[0].words and kept[0].words[0] == "the"
    assert kept[2].words == (".",)  # (S (NP (-NONE- *)) (. .)) keeps its period without punctuation removal
    # S has 5 children with punctuation kept: left-branching binarization
    assert kept[0].bracketed() == "((((((the dog) barked) (saw ((a cat) (with (N hats))))) ,) now) .)"


@pytest.mark.parametrize(
    "bad,match",
    [
        ("(S (NP (DT the)", "unbalanced"),
        ("(S (NP the dog))", "mixes words"),
        ("(S ())", "empty brackets"),
        ("(S (NN dog)) extra", "after the end"),
    ],
)
def test_malformed_trees_are_errors_naming_the_tree(bad, match):
    with pytest.raises(ValueError, match=match):
        sentence_from_bracketed(bad, "file.mrg:3")


def test_tree_file_errors_name_file_and_line(tmp_path):
    path = tmp_path / "bad.mrg"
    path.write_text("(S (NN a))\nnot a tree\n")
    with pytest.raises(ValueError, match=r"bad.mrg:2: expected a bracketed tree"):
        read_treebank(path)
    path.write_text("(S (NN a)\n")
    with pytest.raises(ValueError, match="not closed"):
        read_treebank(path)


def test_plain_text_and_tree_files_for_evaluation(tmp_path):
    plain = tmp_path / "sents.txt"
    plain.write_text("the dog saw a cat\n\n  anna slept  \n")
    assert read_sentences(plain) == ["the dog saw a cat", "anna slept"]
    trees = tmp_path / "trees.txt"
    trees.write_text("(S (NP (DT the) (NN dog)) (VP (VBD slept)) (. .))\n")
    assert read_sentences(trees) == ["the dog slept ."]
    assert load_ptb(str(trees), remove_punctuation=True)["test"]["text"] == ["the dog slept"]
    assert load_ptb(str(plain))["test"]["text"] == ["the dog saw a cat", "anna slept"]
    with pytest.raises(ValueError, match="data_file"):
        load_ptb()


def test_generated_treebank_reads_back_with_ambiguity(tmp_path):
    trees = generate_treebank(SyntheticConfig(num_sentences=300), seed=1)
    sents = [sentence_from_bracketed(t) for t in trees]
    assert all(3 <= len(s.words) <= 12 for s in sents) and generate_treebank(SyntheticConfig(300), 1) == trees
    write_treebank(sents, tmp_path / "unlabeled.txt")
    again = read_treebank(tmp_path / "unlabeled.txt")
    assert [s.tree for s in again] == [s.tree for s in sents]
    # real ambiguity: PP attachment to NP and to VP both occur
    assert any("(NP (NP" in t and "(PP" in t for t in trees) and any("(VP (VP" in t for t in trees)


def test_training_on_trees_improves_and_saves_a_loadable_checkpoint(tmp_path):
    sents = [
        sentence_from_bracketed(t) for t in generate_treebank(SyntheticConfig(num_sentences=160), seed=2)
    ]
    config = TrainConfig(dim=12, hidden_size=12, proposal_hidden_size=8, epochs=3, valid_samples=4)
    model, history = train_rnng(sents[20:], sents[:20], config, tmp_path / "ckpt", progress=False)
    assert history[0]["valid_joint_ppl"] > history[2]["valid_joint_ppl"]  # validation gold perplexity falls
    assert history[-1]["final"] and math.isfinite(history[-1]["valid_is_ppl"])
    loaded = RNNG.from_pretrained(str(tmp_path / "ckpt")).eval()
    x = loaded.tokenize(sents[0].text())
    z = torch.tensor([sents[0].actions])
    with torch.no_grad():
        assert torch.equal(loaded.log_joint(x, z), model.log_joint(x, z))
    record = json.loads((tmp_path / "ckpt" / "training.json").read_text())
    assert record["config"]["binarize"] == "right" and len(record["history"]) == 4


def test_train_cli(tmp_path):
    from lm_latent_eval.cli import main

    trees = tmp_path / "train.txt"
    trees.write_text("\n".join(generate_treebank(SyntheticConfig(num_sentences=40), seed=3)))
    assert (
        main(
            [
                "train",
                "rnng",
                "--train",
                str(trees),
                "--valid",
                str(trees),
                "--output",
                str(tmp_path / "out"),
                "--epochs",
                "1",
                "--dim",
                "8",
                "--hidden-size",
                "8",
                "--proposal-hidden-size",
                "8",
                "--remove-punctuation",
                "--valid-samples",
                "0",
                "--no-progress",
            ]
        )
        == 0
    )
    model = RNNG.from_pretrained(str(tmp_path / "out"))
    assert "." not in model.vocab and model.count_eos
