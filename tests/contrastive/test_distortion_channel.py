"""The contrastive-entropy noisy channel: word counts preserved, requested rates hit, seeded per sentence."""

import math

import numpy as np
import pytest
from scipy import stats

from lm_latent_eval.contrastive.channel import (
    KEEP,
    REPLACE,
    SWAP,
    corpus_vocabulary,
    distort,
    distort_words,
    distortion_set,
    normalize_whitespace,
    sentence_rng,
    split_sentences,
)

VOCAB = [f"v{i}" for i in range(50)]  # disjoint from the sentence words, so replacements are visible


def sentence(n, tag=""):
    return [f"w{tag}{i}" for i in range(n)]


@pytest.mark.parametrize("level", [0.0, 0.1, 0.3, 0.5, 1.0])
def test_word_count_is_preserved(level):
    rng = np.random.default_rng(0)
    for n in [0, 1, 2, 3, 7, 25]:
        for _ in range(20):
            out = distort_words(sentence(n), level, VOCAB, rng)
            assert len(out.words) == n == len(out.operations) == len(out.partners)


def test_level_zero_is_the_identity_and_level_one_touches_every_word():
    texts = ["the  cat sat\ton the mat", "a dog", "x", ""]
    assert distort(texts, 0.0, seed=3) == [normalize_whitespace(t) for t in texts]
    out = distort_words(sentence(200), 1.0, VOCAB, np.random.default_rng(1))
    assert not (out.operations == KEEP).any()


def _pooled_operations(level, n_sentences=400, n_words=25, seed=0):
    ops, outputs = [], []
    for s in range(n_sentences):
        words = sentence(n_words, tag=f"{s}_")
        d = distort_words(words, level, VOCAB, sentence_rng(" ".join(words), level, seed))
        ops.append(d.operations)
        outputs.append((words, d))
    return np.concatenate(ops), outputs


@pytest.mark.parametrize("level", [0.1, 0.3, 0.5])
def test_operation_rates_match_the_level(level):
    ops, outputs = _pooled_operations(level)  # 10,000 positions
    n = ops.size
    for op, p in [(KEEP, 1 - level), (REPLACE, level / 2), (SWAP, level / 2)]:
        share = float((ops == op).mean())
        assert abs(share - p) < 5 * math.sqrt(p * (1 - p) / n), (op, share, p)
    for words, d in outputs:
        out = d.words
        replaced = d.operations == REPLACE
        # exactly the replaced positions hold vocabulary words; the others hold sentence words, none duplicated
        assert [w.startswith("v") for w in out] == replaced.tolist()
        kept = [w for w in out if not w.startswith("v")]
        assert len(set(kept)) == len(kept) and set(kept) <= set(words)
        swaps = np.flatnonzero(d.operations == SWAP)
        assert (d.partners[swaps] != swaps).all() and (d.partners[swaps] >= 0).all()
        assert (d.partners[d.operations != SWAP] == -1).all()
        if not replaced.any():
            assert sorted(out) == sorted(words)  # swaps only permute


@pytest.mark.parametrize("level", [0.2, 0.6])
def test_swap_rate_is_visible_on_two_word_sentences(level):
    # a two-word sentence comes out reversed iff exactly one of its words drew a swap and none a replacement
    n = 10000
    reversed_count = 0
    for s in range(n):
        words = [f"a{s}", f"b{s}"]
        out = distort([" ".join(words)], level, seed=7, vocabulary=VOCAB)[0].split()
        reversed_count += out == words[::-1]
    p = 2 * (level / 2) * (1 - level)
    assert abs(reversed_count / n - p) < 5 * math.sqrt(p * (1 - p) / n)


def test_replacements_are_uniform_over_the_vocabulary():
    vocab = [f"v{i}" for i in range(8)]
    rng = np.random.default_rng(5)
    counts = {v: 0 for v in vocab}
    for _ in range(400):
        for w in distort_words(sentence(30), 1.0, vocab, rng).words:
            if w in counts:
                counts[w] += 1
    assert sum(counts.values()) > 4000
    assert stats.chisquare(list(counts.values())).pvalue > 1e-4


def test_randomness_depends_only_on_seed_level_repeat_and_sentence():
    texts = [f"sentence number {i} has some words in it" for i in range(30)]
    vocab = corpus_vocabulary(texts)
    forward = distort(texts, 0.5, seed=11, vocabulary=vocab)
    backward = distort(texts[::-1], 0.5, seed=11, vocabulary=vocab)
    assert forward == backward[::-1]
    assert forward == distort(texts, 0.5, seed=11, vocabulary=vocab)
    assert forward != distort(texts, 0.5, seed=12, vocabulary=vocab)
    assert forward != distort(texts, 0.5, seed=11, repeat=1, vocabulary=vocab)
    sets = distortion_set(texts, levels=(0.1, 0.5), num_distortions=3, seed=11, vocabulary=vocab)
    assert sets[0.5][0] == forward and len(sets[0.1]) == 3
    assert len({tuple(c) for c in sets[0.5]}) == 3  # the passes are independent draws


def test_default_vocabulary_is_the_corpus_word_types():
    texts = ["a b", "b c d"]
    assert corpus_vocabulary(texts) == ["a", "b", "c", "d"]
    out = distort(texts * 50, 1.0, seed=0)
    assert {w for t in out for w in t.split()} <= {"a", "b", "c", "d"}


def test_split_sentences():
    assert split_sentences("The dog ran. A cat  slept!  Why?") == ["The dog ran.", "A cat slept!", "Why?"]
    assert split_sentences(" = Heading = ") == [] and split_sentences("  ") == []


def test_bad_input_is_rejected():
    with pytest.raises(ValueError, match="distortion level"):
        distort(["a b"], 1.5)
    with pytest.raises(ValueError, match="distortion level"):
        distort(["a b"], True)
    with pytest.raises(TypeError, match="list of sentences"):
        distort("a b", 0.1)
    with pytest.raises(ValueError, match="num_distortions"):
        distortion_set(["a b"], num_distortions=0)
    with pytest.raises(ValueError, match="distinct"):
        distortion_set(["a b"], levels=(0.1, 0.1))
    with pytest.raises(ValueError, match="vocabulary is empty"):
        distort(["a b c d e f g h"], 1.0, vocabulary=[])
