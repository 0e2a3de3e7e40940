"""Full-size configurations of the paper's models, with random weights, and synthetic test sets of the real sizes.

Built by the benchmarks (``paper_workload.py``), never bundled: ``kglm()``, ``entitynlm()``, ``rnng()`` return a model
in eval mode on the requested device, ``kglm_corpus()``, ``conll2012_corpus()``, ``ptb_corpus()`` the documents (space
separated words drawn from the model's vocabulary, Zipf distributed, so every word is in the vocabulary). Random
weights give the speed of a trained model of the same sizes wherever the work does not depend on what is drawn; where
it does (KGLM's word head runs once per distinct (position, entity) pair among the particles), the benchmark counts
the pairs it met and reports them.

Sizes, and where they come from:

- KGLM (Logan et al., 2019): ``experiments/kglm.jsonnet`` and ``kglm-disc.jsonnet`` of the original code
  (rloganiv/kglm-model, branch acl-2020-updates): token embeddings 400, AWD-LSTM hidden 1150 × 3 layers, entity and
  relation embeddings 256, alias encoder LSTM 400 → 400, cutoff 30, tied weights; the proposal (kglm-disc) has the
  same encoder. Vocabulary 33,278 words (WikiText-2's, Merity et al., 2017; Linked WikiText-2 keeps its vocabulary).
  The knowledge graph is not available here: we use 41,058 entities and 1,291 relations (Linked WikiText-2's
  distinct entities and relations in its training split, Logan et al. 2019, Table 1, as we recall it), out-degrees
  log-normal (median 8, σ = 1.2, at most 1,000; assumed) and 1–3 aliases of 1–4 words per entity. Every one of
  these is a keyword argument.
- EntityNLM (Ji et al., 2017): ``experiments/entity_nlm_conll2012.jsonnet``: embeddings and LSTM 300, 1 layer,
  ``max_embeddings`` 100, ``max_mention_length`` 100, untied output; vocabulary 10,000 (``conll_2012_vocab.jsonnet``,
  ``max_vocab_size``), lower-cased. The original proposal (``entity_disc_conll2012.jsonnet``) has width 256; ours
  shares p's width (its heads read states of p's size), so q is 300 wide here.
- RNNG (URNNG, Kim et al., 2019; ``train.py`` of harvardnlp/urnng): word and stack-LSTM width 650, 2 layers, inference
  network 256; vocabulary 10,000 (PTB).

Test sets: Linked WikiText-2 test, 60 articles and 236,062 tokens (Logan et al., 2019, Table 1; lengths log-normal
with σ = 0.6, as ``gpu.py`` has always used); CoNLL-2012 English test, 348 documents (Pradhan et al., 2012) of
463.7 tokens on average (the OntoNotes mean document length quoted by Bamman et al., 2019), so 161,368 tokens
(lengths log-normal with σ = 0.8); PTB section 23, 2,416 sentences, 56,684 words.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import numpy as np
import torch

WT2_TEST_ARTICLES, WT2_TEST_TOKENS = 60, 236_062  # Linked WikiText-2 test split (Logan et al., 2019, Table 1)
# CoNLL-2012 English test documents; OntoNotes mean document length
CONLL_TEST_DOCUMENTS, CONLL_MEAN_LENGTH = 348, 463.7
CONLL_TEST_TOKENS = round(CONLL_TEST_DOCUMENTS * CONLL_MEAN_LENGTH)  # 161,368
PTB_TEST_SENTENCES, PTB_TEST_WORDS = 2_416, 56_684  # WSJ section 23
WT2_VOCAB, WT2_ENTITIES, WT2_RELATIONS = 33_278, 41_058, 1_291
CONLL_VOCAB, PTB_VOCAB = 10_000, 10_000
MENTION_RATE = 0.1  # share of Linked WikiText-2 tokens inside an entity mention (Logan et al., 2019)


def document_lengths(num_docs: int, total_tokens: int, sigma: float, seed: int = 0) -> list[int]:
    """``num_docs`` log-normal lengths (σ = ``sigma``, each ≥ 1) rescaled to sum to ``total_tokens`` exactly."""
    rng = np.random.default_rng(seed)
    raw = rng.lognormal(math.log(total_tokens / num_docs), sigma, num_docs)
    share = np.maximum(raw / raw.sum() * total_tokens, 1.0)
    lengths = np.floor(share).astype(int)
    # largest remainders first; a surplus comes off the longest documents
    short = total_tokens - int(lengths.sum())
    order = np.argsort(lengths - share) if short >= 0 else np.argsort(-lengths)
    lengths[order[: abs(short)]] += 1 if short >= 0 else -1
    return [int(n) for n in lengths]


def zipf_documents(words: Sequence[str], lengths: Sequence[int], seed: int = 0) -> list[str]:
    """Documents of the given lengths, words drawn with probability ∝ 1 / rank (rank = position in ``words``)."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, len(words) + 1)
    picks = rng.choice(len(words), size=sum(lengths), p=weights / weights.sum())
    docs, start = [], 0
    for n in lengths:
        docs.append(" ".join(words[i] for i in picks[start : start + n]))
        start += n
    return docs


def model_documents(name: str, model, lengths: Sequence[int], seed: int = 1) -> list[str]:
    """``zipf_documents`` over the words of the ``name`` model's vocabulary after its special tokens (EntityNLM has
    two, KGLM and the RNNG three)."""
    return zipf_documents(model.vocab[2:] if name == "entitynlm" else model.vocab[3:], lengths, seed)


def word_list(size: int, specials: Sequence[str]) -> list[str]:
    """A vocabulary of ``size`` entries: the model's special tokens, then ``w0``, ``w1``, ...."""
    return [*specials, *(f"w{i}" for i in range(size - len(specials)))]


def _finish(model, device, dtype):
    if dtype is not None:
        model = model.to(dtype=dtype)
    return model.to(device).eval()


# --- KGLM ------------------------------------------------------------------------------------------------------------


def knowledge_graph(
    words: Sequence[str],
    num_entities: int = WT2_ENTITIES,
    num_relations: int = WT2_RELATIONS,
    median_degree: float = 8.0,
    degree_sigma: float = 1.2,
    max_degree: int = 1000,
    seed: int = 0,
):
    """A random KnowledgeGraph: log-normal out-degrees (median, σ, cap), uniform relations and tails, 1–3 aliases of
    1–4 words of ``words`` per entity."""
    from lm_latent_eval.models.kglm.graph import KnowledgeGraph

    rng = np.random.default_rng(seed)
    degrees = np.minimum(
        np.round(rng.lognormal(math.log(median_degree), degree_sigma, num_entities)), max_degree
    )
    edges = {}
    for e, d in enumerate(degrees.astype(int)):
        if d:
            rels, tails = rng.integers(num_relations, size=d), rng.integers(num_entities, size=d)
            edges[e] = list(zip(rels.tolist(), tails.tolist()))
    pick = random.Random(seed)
    aliases = {
        e: [pick.sample(words, pick.randint(1, 4)) for _ in range(pick.randint(1, 3))]
        for e in range(num_entities)
    }
    return KnowledgeGraph(
        [f"Q{e}" for e in range(num_entities)], [f"P{r}" for r in range(num_relations)], edges, aliases
    )


def kglm(
    device="cpu",
    dtype=None,
    vocab_size: int = WT2_VOCAB,
    num_entities: int = WT2_ENTITIES,
    num_relations: int = WT2_RELATIONS,
    mention_rate: float = MENTION_RATE,
    seed: int = 0,
    **graph_options,
):
    """The paper's KGLM (400 / 1150 × 3, entities and relations 256, cutoff 30) with random weights over a random graph.

    The mention-type biases of p and q are set so that about ``mention_rate`` of the tokens start or continue a
    mention (new 40%, related 40%, continuing 20% of them), as in Linked WikiText-2; every other weight is PyTorch's
    default initialisation (seed ``seed``)."""
    from lm_latent_eval.models.kglm import KGLM
    from lm_latent_eval.models.kglm.model import BOS, PAD, UNK

    torch.manual_seed(seed)
    words = word_list(vocab_size, (PAD, UNK, BOS))
    graph = knowledge_graph(words[3:], num_entities, num_relations, seed=seed, **graph_options)
    model = KGLM(words, graph, token_dim=400, entity_dim=256, hidden_size=1150, num_layers=3, cutoff=30)
    shares = torch.tensor(
        [1 - mention_rate, 0.4 * mention_rate, 0.4 * mention_rate, 0.2 * mention_rate]
    ).log()
    with torch.no_grad():
        for layer in (model.mention_type, model.proposal.mention_type):
            layer.bias.copy_(shares)
    return _finish(model, device, dtype)


def kglm_corpus(model, num_docs: int = WT2_TEST_ARTICLES, seed: int = 0) -> list[str]:
    """A synthetic Linked-WikiText-2-test-sized corpus (60 articles, 236,062 tokens) over ``model``'s vocabulary."""
    return zipf_documents(
        model.vocab[3:], document_lengths(WT2_TEST_ARTICLES, WT2_TEST_TOKENS, 0.6, seed)[:num_docs], seed
    )


# --- EntityNLM -------------------------------------------------------------------------------------------------------


def entitynlm(device="cpu", dtype=None, vocab_size: int = CONLL_VOCAB, seed: int = 0):
    """The paper's EntityNLM (d = 300, 1 layer, 100 entity slots, mentions of ≤ 100 tokens, untied) with random weights."""
    from lm_latent_eval.models.entitynlm import EntityNLM
    from lm_latent_eval.models.entitynlm.model import BOS, UNK

    torch.manual_seed(seed)
    model = EntityNLM(
        word_list(vocab_size, (UNK, BOS)),
        dim=300,
        hidden_size=300,
        num_layers=1,
        max_entities=100,
        max_mention_length=100,
        tie_weights=False,
    )
    return _finish(model, device, dtype)


def conll2012_corpus(model, num_docs: int = CONLL_TEST_DOCUMENTS, seed: int = 0) -> list[str]:
    """A synthetic CoNLL-2012-test-sized corpus (348 documents, 161,368 tokens) over ``model``'s vocabulary."""
    lengths = document_lengths(CONLL_TEST_DOCUMENTS, CONLL_TEST_TOKENS, 0.8, seed)
    return zipf_documents(model.vocab[2:], lengths[:num_docs], seed)


# --- RNNG ------------------------------------------------------------------------------------------------------------


def rnng(device="cpu", dtype=None, vocab_size: int = PTB_VOCAB, seed: int = 0):
    """URNNG's RNNG (650-wide words and 2 × 650 stack LSTM, inference network 256) with random weights."""
    from lm_latent_eval.models.rnng import RNNG
    from lm_latent_eval.models.rnng.model import SPECIAL

    torch.manual_seed(seed)
    model = RNNG(
        word_list(vocab_size, SPECIAL),
        dim=650,
        hidden_size=650,
        num_layers=2,
        proposal_dim=256,
        proposal_hidden_size=256,
    )
    return _finish(model, device, dtype)


def ptb_corpus(model, num_docs: int = PTB_TEST_SENTENCES, seed: int = 0) -> list[str]:
    """A synthetic PTB-test-sized set of sentences (2,416, 56,684 words in all) over ``model``'s vocabulary."""
    lengths = document_lengths(PTB_TEST_SENTENCES, PTB_TEST_WORDS, 0.5, seed)
    return zipf_documents(model.vocab[3:], lengths[:num_docs], seed)


BUILDERS = {
    "kglm": (kglm, kglm_corpus),
    "entitynlm": (entitynlm, conll2012_corpus),
    "rnng": (rnng, ptb_corpus),
}


def num_parameters(model) -> int:
    """Distinct parameters of p and q."""
    return sum(p.numel() for p in model.parameters())
