"""The three request types of ``latent_masked`` on tiny random-weight checkpoints of LLaDA, Dream and BD3-LM in
their released layout (config.json whose ``auto_map`` names the authors' unmodified files, read from
``../shared/fixtures/masked-diffusion/`` and copied into the test's folder beside it; model.safetensors; a
tokenizer), loaded by the backend from the folder as a user loads them, each figure checked against a program
written here over the authors' forward called directly, read as the authors' samplers read it:

- LLaDA: ``logits = model(x).logits``, output i for position i, the mask id 126336 (here 3) at masked positions;
- Dream: the BOS token before the text and ``logits = torch.cat([logits[:, :1], logits[:, :-1]], 1)``
  (``generation_utils.py`` line 414): output i − 1 for position i;
- BD3-LM (``time_conditioning: false``, MDLM-like: one block, no cross attention): ``model(x, timesteps)``, whose
  forward replaces the time by zeros.

The mask row is left out of every softmax (the package's convention: a sampler never writes the mask).

The authors' code loads only under transformers 4.x (``hf.AUTHORS_TRANSFORMERS``, 4.46.3, works; under 5.x LLaDA's
and BD3-LM's classes lack ``all_tied_weights_keys`` and Dream's generation config fails): under transformers 5 the
request tests skip, saying so, and the loading tests check the one-line error instead; ``.ci/run`` runs this module
a second time with transformers 4.46.3 on ``PYTHONPATH``.
"""

from __future__ import annotations

import functools
import itertools
import math
import warnings
from pathlib import Path

import pytest
import torch
import transformers
from lm_eval.api.instance import Instance
from test_masked_authors import bd3lm_folder, dream_folder, llada_folder, random_network

from lm_latent_eval.errors import InputError, UnsupportedError
from lm_latent_eval.estimators.seeding import document_generator
from lm_latent_eval.harness.backends import LatentMaskedEval
from lm_latent_eval.harness.generation import GENERATION_STREAM
from lm_latent_eval.models.masked.hf import AUTHORS_TRANSFORMERS

FAMILIES = ["llada", "dream", "bd3lm"]
FOLDERS = {"llada": llada_folder, "dream": dream_folder, "bd3lm": bd3lm_folder}
MASK, BOS = 3, 2  # the tiny checkpoints' mask id (config.json's mask_token_id) and Dream's BOS token
TEXTS = ["the cat sat", "anna saw a dog", "a mat .", "the dog sat on .", "cat"]
PAIRS = [("the cat", " sat on"), ("anna saw", " a dog ."), ("the", " mat"), ("a dog sat", " on the mat")]
UNDER_5 = transformers.__version__.split(".")[0] != "4"
# BD3-LM's code computes its time embedding in float32 whatever the weights' dtype: it runs in float32, and the
# backend's batches of rows round differently from the program's one row at a time (measured: 3.5e-6)
DTYPE = {"llada": torch.float64, "dream": torch.float64, "bd3lm": torch.float32}
TOLERANCE = {"llada": 1e-10, "dream": 1e-10, "bd3lm": 1e-5}
# the random weights' std: BD3-LM's adaLN makes N(0, 0.5²) weights put 0.97 on one row, mostly beyond the words
STD = {"llada": 0.5, "dream": 0.5, "bd3lm": 0.3}


@pytest.fixture(scope="module", params=FAMILIES)
def checkpoint(request, tmp_path_factory, offline) -> tuple[str, Path]:
    """(family, a folder in the released layout with random weights in model.safetensors, float32)."""
    from safetensors.torch import save_file

    family = request.param
    folder = FOLDERS[family](tmp_path_factory.mktemp(family) / family)
    network = random_network(folder, seed=FAMILIES.index(family), std=STD[family])
    tensors = {name: tensor.contiguous() for name, tensor in network.state_dict().items()}
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    return family, folder


@pytest.fixture(scope="module")
def loaded(checkpoint):
    """(family, the backend over the folder in ``DTYPE``, the authors' network loaded on its own from the folder by
    its own ``from_pretrained`` in the same dtype)."""
    family, folder = checkpoint
    if UNDER_5:
        pytest.skip(
            f"the authors' {family} code loads only under transformers 4.x ({AUTHORS_TRANSFORMERS} works; "
            f"{transformers.__version__} is installed): .ci/run runs this module again under "
            f"transformers=={AUTHORS_TRANSFORMERS}"
        )
    from transformers import AutoModel

    lm = LatentMaskedEval(pretrained=str(folder), trust_remote_code=True, device="cpu", dtype=str(DTYPE[family]).removeprefix("torch."),
                          estimator="exact", seed=5)  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        network = AutoModel.from_pretrained(folder, trust_remote_code=True, torch_dtype=DTYPE[family]).eval()
    return family, lm, network


@torch.no_grad()
def authors_log_probs(family: str, network, ids: list[int]) -> torch.Tensor:
    """log p_θ(v | ids) [len(ids), V] in float64 at every position of ``ids`` (the mask id at masked positions), the
    forward called and read as the family's sampler reads it, the mask row left out."""
    if family == "dream":
        logits = network(torch.tensor([[BOS, *ids]])).logits
        logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)[0, 1:]
    elif family == "bd3lm":
        logits = network(input_ids=torch.tensor([ids]), timesteps=torch.zeros(1)).logits[0]
    else:
        logits = network(torch.tensor([ids])).logits[0]
    logits = logits.double().clone()
    logits[:, MASK] = -math.inf
    return torch.log_softmax(logits, -1)


def program(family: str, network, context: list[int], x: list[int]) -> float:
    """log p(x | context revealed) under uniform reveal orders of x's positions, by the dynamic program over the
    revealed sets S: f(S) = log Σ_{i ∉ S} (1 / (T − |S|)) p_θ(x_i | context, x at S, masks elsewhere) e^{f(S ∪ {i})},
    f(all) = 0; ``context`` empty: log p(x)."""
    T = len(x)

    @functools.cache
    def rest(revealed: frozenset) -> float:
        if len(revealed) == T:
            return 0.0
        ids = [*context, *(x[i] if i in revealed else MASK for i in range(T))]
        log_p = authors_log_probs(family, network, ids)[len(context) :]
        terms = [
            -math.log(T - len(revealed)) + float(log_p[i, x[i]]) + rest(revealed | {i})
            for i in range(T)
            if i not in revealed
        ]
        return float(torch.logsumexp(torch.tensor(terms, dtype=torch.float64), 0))

    return rest(frozenset())


def ids_of(lm, text: str) -> list[int]:
    return lm.model.tokenizer(text, add_special_tokens=False)["input_ids"]


def loglikelihood(lm, pairs) -> list[float]:
    requests = [Instance("loglikelihood", {}, pair, i) for i, pair in enumerate(pairs)]
    return [value for value, _ in lm.loglikelihood(requests, True)]


def generate(lm, context: str, until: list[str], max_gen_toks: int = 4) -> str:
    request = Instance("generate_until", {}, (context, {"until": until, "max_gen_toks": max_gen_toks}), 0)
    return lm.generate_until([request], True)[0]


def test_each_checkpoint_is_read_with_its_family_conventions(loaded):
    family, lm, network = loaded
    model = lm.model
    assert type(model.predictor).__name__ == type(network).__name__ == {
        "llada": "LLaDAModelLM", "dream": "DreamModel", "bd3lm": "BD3LM"}[family]  # fmt: skip
    assert model.mask_id == MASK and {p.dtype for p in model.parameters()} == {DTYPE[family]}
    assert model.shifted == (family == "dream")
    assert model.special_before.tolist() == ([BOS] if family == "dream" else [])
    assert model.time_argument == ("timesteps" if family == "bd3lm" else None)
    assert model.max_length == {"llada": 24, "dream": 23, "bd3lm": 8}[family]


def test_loglikelihood_rolling_is_the_program_over_the_authors_forward(loaded):
    """The exact log p(x) of each text (every order of its positions) equals the program over the authors' forward;
    for Dream the unshifted reading is another number."""
    family, lm, network = loaded
    requests = [Instance("loglikelihood_rolling", {}, (text,), i) for i, text in enumerate(TEXTS)]
    found = lm.loglikelihood_rolling(requests, True)
    expected = [program(family, network, [], ids_of(lm, text)) for text in TEXTS]
    assert max(abs(f - e) for f, e in zip(found, expected)) < TOLERANCE[family], (found, expected)
    assert all(value < 0 for value in found)
    if family == "dream":
        unshifted = [
            program("llada", network, [], ids_of(lm, text)) for text in TEXTS
        ]  # Dream read unshifted
        assert max(abs(f - u) for f, u in zip(found, unshifted)) > 0.1


def test_loglikelihood_is_the_program_over_the_continuation_given_the_context(loaded):
    """log p(continuation | context revealed), the continuation's positions marginalized over their orders, equals
    the program over the authors' forward with the context's ids before the continuation; it is not the difference
    of two joints log p(ctx ⊕ cont) − log p(ctx) (a masked LM's p(ctx) reads a text of another length)."""
    family, lm, network = loaded
    found = loglikelihood(lm, PAIRS)
    expected = [program(family, network, ids_of(lm, c), ids_of(lm, x)) for c, x in PAIRS]
    assert max(abs(f - e) for f, e in zip(found, expected)) < TOLERANCE[family], (found, expected)
    joints = [
        program(family, network, [], ids_of(lm, c + x)) - program(family, network, [], ids_of(lm, c))
        for c, x in PAIRS
    ]
    assert max(abs(f - j) for f, j in zip(found, joints)) > 0.1


def test_the_chain_rule_holds_between_requests_along_the_left_to_right_order(loaded):
    """Under DUEL's ``left_to_right`` policy the continuation's positions are revealed in text order, so
    loglikelihood(ctx, c₀ ⊕ rest) = log p_θ(c₀ | ctx, |c| masks) + loglikelihood(ctx ⊕ c₀, rest): the same network
    inputs after the first step. (Under uniform orders no such identity links requests: a masked LM's input length
    is the text's.)"""
    family, lm, network = loaded
    ordered = LatentMaskedEval(pretrained=lm.args.pretrained, trust_remote_code=True, device="cpu",
                               dtype=str(DTYPE[family]).removeprefix("torch."), policy="left_to_right")  # fmt: skip
    assert ordered.settings.estimator == "exact"  # auto: the one order of a deterministic policy
    gaps = []
    for context, first, rest in [
        ("the cat", " sat", " on a mat"),
        ("anna", " saw", " a dog ."),
        ("a", " dog", " sat"),
    ]:
        whole, tail = loglikelihood(ordered, [(context, first + rest), (context + first, rest)])
        masks = [MASK] * len(ids_of(lm, first + rest))
        head = authors_log_probs(family, network, [*ids_of(lm, context), *masks])[len(ids_of(lm, context))]
        gaps.append(abs(whole - (float(head[ids_of(lm, first)[0]]) + tail)))
    assert max(gaps) < TOLERANCE[family], gaps


def test_a_one_token_conditional_sums_to_one_over_the_non_mask_rows(loaded):
    """Σ_v p(v | context) = 1 over the output layer's rows but the mask (16 − 1 here, two of them beyond the
    tokenizer), each row the authors' softmax entry; loglikelihood of each word is its row."""
    family, lm, network = loaded
    model = lm.model
    for context in ["the cat", "anna saw a", "dog"]:
        view = model.conditional_model(context)
        rows = [v for v in range(model.vocab_size) if v != MASK]
        assert len(rows) == 15
        every = torch.tensor([view.log_marginal(torch.tensor([v])) for v in rows], dtype=torch.float64)
        assert abs(float(torch.logsumexp(every, 0))) < 1e-12, context
        authors = authors_log_probs(family, network, [*ids_of(lm, context), MASK])[-1]
        assert float((every - authors[rows]).abs().max()) < TOLERANCE[family]
        words = ["the", "cat", "sat", "on", "mat", "anna", "saw", "a", "dog", "."]
        values = loglikelihood(lm, [(context, " " + w) for w in words])
        assert (
            max(abs(v - float(authors[ids_of(lm, w)[0]])) for v, w in zip(values, words)) < TOLERANCE[family]
        )


def authors_sampler(family: str, network, lm, context: str, length: int, seed: int) -> str:
    """The package's sampler written over the authors' forward: after the context, ``length`` masked positions; each
    step a position uniformly among the masked ones, then its token from p_θ(· | current ids) without the mask row,
    both from generate_until's random stream of (seed, context)."""
    generator = document_generator(seed, context, GENERATION_STREAM)
    context_ids = ids_of(lm, context)
    ids, masked = [*context_ids, *[MASK] * length], list(range(length))
    for _ in range(length):
        log_p = authors_log_probs(family, network, ids)[len(context_ids) :]
        weights = torch.tensor([1.0 / len(masked) if i in masked else 0.0 for i in range(length)])
        i = int(torch.multinomial(weights.double(), 1, generator=generator))
        ids[len(context_ids) + i] = int(torch.multinomial(log_p[i].exp(), 1, generator=generator)[0])
        masked.remove(i)
    head, whole = (lm.model.tokenizer.decode(t) for t in (context_ids, ids))
    return whole[len(head) :]  # the decoded text past the decoded context


def test_generate_until_runs_the_sampler_over_the_authors_forward_and_honours_the_stop_strings(loaded):
    family, lm, network = loaded
    context = "the cat"
    text = generate(lm, context, ["\n"])
    assert text == authors_sampler(family, network, lm, context, 4, seed=5)
    assert generate(lm, context, ["\n"]) == text  # the same seed: the same text
    other = LatentMaskedEval(pretrained=lm.args.pretrained, trust_remote_code=True, device="cpu",
                             dtype=str(DTYPE[family]).removeprefix("torch."), seed=6)  # fmt: skip
    assert generate(other, context, ["\n"]) == authors_sampler(family, network, lm, context, 4, seed=6)
    words = text.split()
    assert len(words) >= 2, text  # words of the tokenizer, not only the rows beyond it (decoded to nothing)
    # a stop string: the text cut before its first occurrence
    cut = generate(lm, context, [words[1]])
    assert cut == text[: text.find(words[1])] and words[1] not in cut
    assert generate(lm, context, ["zzz", text[3:6]]) == text[: text.find(text[3:6])]


def test_a_text_longer_than_the_network_the_elbo_refuses_and_the_exact_program_reads_in_windows(loaded):
    """A text 2 tokens longer than the network reads: ``estimator=elbo`` refuses it in one line (docs/estimators.md);
    on BD3-LM (8 positions, windows of 4: the program's reach) the exact value is the product over the windows,
    each window's orders summed with the window before it revealed (windows.py), by the program over the authors'
    forward; one notice says the text is read in windows."""
    family, lm, network = loaded
    words = ["the", "cat", "sat", "on", "a", "mat", ".", "anna", "saw", "a", "dog", "."]
    text = " ".join((words * 3)[: lm.model.max_length + 2])
    elbo = LatentMaskedEval(
        pretrained=lm.args.pretrained, trust_remote_code=True, device="cpu", estimator="elbo"
    )
    with pytest.raises(UnsupportedError, match="the ELBO is written for one window") as caught:
        elbo.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (text,), 0)], True)
    assert "\n" not in str(caught.value)
    if family != "bd3lm":  # windows of 12: 2^12 revealed sets per window, beyond a fast test's program
        return
    with pytest.warns(UserWarning, match="a text of 10 tokens is longer than the 8 positions"):
        [value] = lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (text,), 0)], True)
    x = ids_of(lm, text)
    windows = [x[0:4], x[4:8], x[8:10]]
    expected = program(family, network, [], windows[0]) + sum(
        program(family, network, before, window) for before, window in itertools.pairwise(windows)
    )
    assert abs(value - expected) < TOLERANCE[family]


@pytest.mark.skipif(not UNDER_5, reason="the authors' code loads under transformers 4.x: no error to check")
def test_under_transformers_5_loading_fails_in_one_line_naming_the_version_that_works(checkpoint):
    """LLaDA's and BD3-LM's classes lack ``all_tied_weights_keys`` (transformers raises it on their network object),
    Dream's generation config fails inside its code: one InputError line naming transformers==4.46.3, never the
    package's ``AutoModelForMaskedLM`` attempt."""
    _, folder = checkpoint
    with pytest.raises(
        InputError, match=rf"own modeling code failed.*transformers=={AUTHORS_TRANSFORMERS}"
    ) as caught:
        LatentMaskedEval(pretrained=str(folder), trust_remote_code=True, device="cpu")
    assert "\n" not in str(caught.value) and "AutoModelForMaskedLM" not in str(caught.value)
