"""The whitespace word vocabulary shared by KGLM, EntityNLM and RNNG (lm_latent_eval/models/vocabulary.py)."""

from __future__ import annotations

import json

import pytest

from lm_latent_eval.models import load_model
from lm_latent_eval.models.vocabulary import WordVocabulary, build_word_list


def test_word_list_puts_specials_first_then_frequent_words():
    docs = [["b", "a", "b", "<s>"], ["c", "a", "b"]]
    assert build_word_list(docs, ("<unk>", "<s>")) == ["<unk>", "<s>", "b", "a", "c"]
    assert build_word_list(docs, ("<unk>",), min_count=2) == ["<unk>", "b", "a"]
    assert build_word_list(docs, ("<unk>", "<s>"), max_size=3) == ["<unk>", "<s>", "b"]


def test_ids_unknown_reserved_lowercase_and_extended_words():
    vocab = WordVocabulary(
        ["<unk>", "<s>", "</s>", "the", "dog"],
        "<unk>",
        specials=("<s>", "</s>"),
        lowercase=True,
        reserved=("<s>", "</s>"),
        extended_words=["Lovelace", "dog"],
    )
    assert len(vocab) == 5 and vocab.num_ids == 6 and vocab.extended_words == ["Lovelace"]
    # lowercase: "Lovelace" is looked up as "lovelace", which no list holds
    assert vocab.tokenize("The DOG </s> <S> zebra Lovelace") == [3, 4, 0, 0, 0, 0]
    assert vocab.tokenize("") == [] and vocab.detokenize([3, 4, 5, 2], skip=[2]) == "the dog Lovelace"
    kept = WordVocabulary(["@@UNKNOWN@@", "@@START@@", "Ada"], "@@UNKNOWN@@", extended_words=["King"])
    assert kept.tokenize("Ada King @@START@@ ada") == [2, 3, 1, 0]
    with pytest.raises(TypeError):
        kept.tokenize(None)


def test_invalid_word_lists_are_refused():
    with pytest.raises(ValueError, match="containing '<unk>', '<s>'"):
        WordVocabulary(["<unk>", "a"], "<unk>", specials=("<s>",))
    with pytest.raises(ValueError, match="duplicate"):
        WordVocabulary(["<unk>", "a", "a"], "<unk>")


@pytest.mark.parametrize(
    ("name", "unknown"), [("kglm", "@@UNKNOWN@@"), ("entitynlm", "@@UNKNOWN@@"), ("rnng", "<unk>")]
)
def test_bundled_checkpoints_keep_their_ids(name, unknown):
    """The word list of config.json gives the ids, in order; unknown words get the unknown word's id."""
    model, path = load_model(name)
    words = json.loads((path / "config.json").read_text())["vocab"]
    assert model.vocabulary.words == words == model.vocab and model.unk_id == words.index(unknown)
    assert model.word_to_id == {w: i for i, w in enumerate(words)}
    text = " ".join(words[3:12]) + " never-seen-word"
    assert model.tokenize(text).tolist()[:10] == [*range(3, 12), model.unk_id]
