"""KGLM numbers pinned to the values of the implementation before the vectorization of issue 13 (commit 869948a).

log p(x, z) and log q_τ(z | x) (peeking and not, τ = 1 and 0.7) of fixed configurations must stay within 1e-9 of
the recorded values: the tiny KGLM of ``kglm_tiny.py`` (both proposal variants; every 97th enumerated configuration
of a 4-token document) and the bundled KGLM (6 configurations of the first 63-token document of
``linked_tiny/test.jsonl``, stored sparsely as {position: (type, entity, parent)}). The log weights of fixed seeds
are pinned in ``test_log_weights_of_fixed_seeds``.

Tolerances: log q and the latent factors of log p are reproduced bit for bit by the vectorized code (1e-9). The
word term of log p copies alias tokens with one batched product over entities instead of one product per entity;
float32 rounding of those dot products moves log p by up to 2.5e-6 on the bundled document (the old code itself
moved log p by 3e-9 when scoring one configuration instead of nine), so log p is pinned at 1e-5. The proposal's
random stream changed in issue 13 (inverse-CDF draws from torch.rand(K, 4) per token instead of data-dependent
Gumbel and multinomial draws): the fixed-seed log weights are those of the new stream.
"""

from __future__ import annotations

import json

import pytest
import torch
from kglm_tiny import tiny_kglm
from pins import pinned

from lm_latent_eval.models import load_model
from lm_latent_eval.models.kglm.enumerate import enumerate_latents
from lm_latent_eval.models.kglm.latents import canonical_relation
from lm_latent_eval.paths import DATA_DIR

TOL = 1e-9
TOL_LOG_P = 1e-5  # float32 rounding of the batched alias-copy products (see the module docstring)
SETTINGS = [(True, 1.0), (False, 1.0), (True, 0.7), (False, 0.7)]

TINY_PLAIN = {
    "idx": [0, 97, 194, 291, 388, 485, 582, 679, 776],
    "log_joint": [
        -10.306442458848665,
        -18.10726550174997,
        -23.35847056944224,
        -23.514910489944228,
        -21.60933669312645,
        -23.922763448023737,
        -20.762079385824393,
        -24.6913309113875,
        -20.048727730546943,
    ],
    (True, 1.0): [
        -1.1054756251221822,
        -7.401718343541544,
        -14.138951751468237,
        -13.99003843572337,
        -12.849880523944478,
        -12.499122213318731,
        -10.126046488306635,
        -12.567829076539315,
        -9.9259567089126,
    ],
    (False, 1.0): [
        -1.22269621405837,
        -7.1362966225486435,
        -14.285154599651587,
        -13.724787341681346,
        -12.413609832552186,
        -12.22735997060241,
        -9.734595338510692,
        -12.496058719412531,
        -9.655038679429506,
    ],
    (True, 0.7): [
        -0.7150883402636975,
        -8.631677025949966,
        -17.01770879947745,
        -16.4695511192016,
        -15.262205872382435,
        -14.78625105728564,
        -11.807509847584276,
        -14.728018369200996,
        -11.900164673434642,
    ],
    (False, 0.7): [
        -0.8318284886212044,
        -8.222786496253184,
        -17.11693999960532,
        -15.990012530473074,
        -14.550169316646306,
        -14.303197281787384,
        -11.169970402657995,
        -14.522443971624673,
        -11.408097804692297,
    ],
    "logw": [
        -9.083746244790294,
        -8.291641471249335,
        -10.922885499679433,
        -8.84119040467263,
        -10.195065921636452,
        -9.083746244790294,
    ],
}
TINY_FEATURES = {
    "idx": [0, 97, 194, 291, 388, 485, 582, 679, 776],
    "log_joint": [
        -16.52705541242257,
        -19.085987892396297,
        -23.222296530468537,
        -22.122439720554063,
        -18.2374572037931,
        -27.643947466332335,
        -23.04040913059677,
        -22.4481233832903,
        -20.880584596032797,
    ],
    (True, 1.0): [
        -2.846099738852245,
        -6.788478533416705,
        -12.873805675392642,
        -11.231670220358048,
        -8.391202374306083,
        -14.799869175867721,
        -10.908836624965915,
        -10.345446692827998,
        -8.275329711416987,
    ],
    (False, 1.0): [
        -6.765048171504745,
        -5.908131638672343,
        -12.749768686841465,
        -11.27154161308458,
        -7.89707370026386,
        -15.46058899216203,
        -11.723185440416179,
        -9.75125338408727,
        -9.156248794900428,
    ],
    (True, 0.7): [
        -2.8859366448393615,
        -7.623054422856406,
        -15.566556368577729,
        -12.87571277782888,
        -9.208792956006132,
        -18.26305021722428,
        -13.091546687083248,
        -11.903375057770727,
        -9.958884917631337,
    ],
    (False, 0.7): [
        -8.939254197068271,
        -6.738828022955426,
        -16.288243521715593,
        -13.743036982542531,
        -9.222720300590261,
        -19.98507473279512,
        -14.934927160749629,
        -11.858449145310455,
        -11.872129984199994,
    ],
    "logw": [
        -17.020354905413345,
        -13.947759604766889,
        -16.07679134785356,
        -16.260902313678,
        -17.020354905413345,
        -10.026616912396353,
    ],
}
BUNDLED = {
    "T": 63,
    "z": [
        {
            0: (1, 28, -1),
            8: (2, 30, 28),
            15: (1, 20, -1),
            16: (3, 20, -1),
            21: (1, 3, -1),
            22: (3, 3, -1),
            29: (2, 30, 28),
            30: (3, 30, 28),
            35: (2, 20, 20),
            36: (3, 20, 20),
            41: (2, 50, 30),
            46: (2, 20, 20),
            47: (3, 20, 20),
            52: (2, 17, 3),
            58: (2, 24, 50),
            59: (3, 24, 50),
        },
        {
            0: (1, 28, -1),
            8: (1, 30, -1),
            15: (1, 20, -1),
            16: (3, 20, -1),
            21: (1, 3, -1),
            22: (3, 3, -1),
            29: (2, 30, 28),
            30: (3, 30, 28),
            35: (1, 46, -1),
            36: (3, 46, -1),
            41: (2, 50, 30),
            46: (2, 20, 20),
            47: (3, 20, 20),
            52: (2, 17, 3),
            58: (2, 8, 46),
            59: (3, 8, 46),
        },
        {
            0: (1, 28, -1),
            8: (2, 30, 28),
            14: (1, 45, -1),
            15: (3, 45, -1),
            16: (3, 45, -1),
            21: (1, 3, -1),
            22: (3, 3, -1),
            29: (2, 30, 3),
            30: (3, 30, 3),
            35: (1, 46, -1),
            36: (3, 46, -1),
            41: (2, 50, 46),
            46: (1, 9, -1),
            47: (3, 9, -1),
            52: (2, 17, 3),
            58: (2, 8, 46),
            59: (3, 8, 46),
        },
        {
            0: (1, 28, -1),
            8: (2, 30, 28),
            15: (1, 20, -1),
            16: (3, 20, -1),
            21: (1, 3, -1),
            22: (3, 3, -1),
            29: (2, 30, 30),
            30: (3, 30, 30),
            35: (2, 20, 20),
            36: (3, 20, 20),
            41: (2, 50, 30),
            46: (1, 9, -1),
            47: (3, 9, -1),
            52: (2, 17, 3),
            58: (2, 50, 50),
            59: (3, 50, 50),
        },
        {
            0: (1, 28, -1),
            8: (2, 30, 28),
            15: (1, 20, -1),
            16: (3, 20, -1),
            21: (2, 3, 30),
            22: (3, 3, 30),
            29: (2, 30, 3),
            30: (3, 30, 3),
            35: (1, 46, -1),
            36: (3, 46, -1),
            41: (2, 50, 46),
            46: (1, 9, -1),
            47: (3, 9, -1),
            52: (2, 17, 3),
            58: (2, 8, 46),
            59: (3, 8, 46),
        },
        {
            0: (1, 28, -1),
            8: (2, 30, 28),
            14: (1, 20, -1),
            15: (3, 20, -1),
            16: (3, 20, -1),
            21: (1, 3, -1),
            22: (3, 3, -1),
            29: (2, 30, 30),
            30: (3, 30, 30),
            35: (1, 46, -1),
            36: (3, 46, -1),
            41: (2, 50, 30),
            46: (2, 20, 20),
            47: (3, 20, 20),
            52: (2, 17, 3),
            58: (2, 8, 46),
            59: (3, 8, 46),
        },
    ],
    "log_joint": [
        -244.38804671851005,
        -188.68178396607368,
        -197.02193940320433,
        -227.89368594831348,
        -161.47337261541907,
        -181.8704146196211,
    ],
    (True, 1.0): [
        -7.549522949767961,
        -8.576720547594649,
        -8.822704586847651,
        -6.829091825462196,
        -5.39746812686339,
        -9.233236616330991,
    ],
    (False, 1.0): [
        -49.96383910284069,
        -57.75197085078328,
        -45.408507922225695,
        -52.1863300730545,
        -48.23409898325423,
        -52.74662256374608,
    ],
    (True, 0.7): [
        -6.9878736427706,
        -9.268190441059275,
        -9.309797773752305,
        -6.16100972733588,
        -5.346594028634046,
        -9.224759739090509,
    ],
    (False, 0.7): [
        -58.42416277957877,
        -68.20268956356959,
        -50.42755940675715,
        -60.1795053564445,
        -55.58320930654224,
        -61.33999801234811,
    ],
    "logw_peek": [
        -233.30198160464002,
        -213.41668390425275,
        -233.2040058070799,
        -178.9106863873453,
        -209.06223577915978,
        -166.42834951864282,
    ],
    "logw_nopeek": [
        -354.77723191209714,
        -385.6943380618395,
        -412.0387319599327,
        -368.79059670910993,
        -330.83648368617804,
        -365.82457347656197,
    ],
}


def _bundled_document() -> str:
    record = json.loads((DATA_DIR / "linked_tiny" / "test.jsonl").read_text(encoding="utf-8").splitlines()[0])
    return " ".join(t for t in record["tokens"] if t != "@@START@@")


def _dense(model, sparse: list[dict], T: int) -> dict:
    """{position: (type, entity, parent)} per configuration -> dict of LongTensor [K, T]."""
    z = {
        key: torch.full((len(sparse), T), fill, dtype=torch.long)
        for key, fill in (("mention_type", 0), ("entity", -1), ("parent", -1))
    }
    for k, marks in enumerate(sparse):
        for t, (typ, ent, par) in marks.items():
            z["mention_type"][k, t], z["entity"][k, t], z["parent"][k, t] = typ, ent, par
    z["relation"] = canonical_relation(model.tables, z["parent"], z["entity"])
    return z


@pytest.fixture(scope="module")
def bundled():
    model, _ = load_model("kglm", None, device="cpu")
    return model


def _check(model, x, z, pins):
    with torch.no_grad():
        assert model.log_joint(x, z).tolist() == pinned(pins["log_joint"], TOL_LOG_P)
        for peek, tau in SETTINGS:
            got = model.proposal.log_prob(x, z, tau, peek).tolist()
            assert got == pinned(pins[(peek, tau)], TOL), (peek, tau)


@pytest.mark.parametrize("features", [False, True], ids=["plain-q", "q-with-nopeek-heads-and-alias-features"])
def test_tiny_kglm_log_p_and_log_q_are_pinned(features):
    model = tiny_kglm(proposal_features=features)
    pins = TINY_FEATURES if features else TINY_PLAIN
    x = model.tokenize("Ada Lovelace born London")
    z = enumerate_latents(model, 4)
    _check(model, x, {k: v[pins["idx"]] for k, v in z.items()}, pins)


def test_bundled_kglm_log_p_and_log_q_are_pinned(bundled):
    x = bundled.tokenize(_bundled_document())
    assert x.numel() == BUNDLED["T"]
    _check(bundled, x, _dense(bundled, BUNDLED["z"], BUNDLED["T"]), BUNDLED)


def test_log_weights_of_fixed_seeds(bundled):
    """importance_log_weights of fixed (seed, document) streams."""
    from lm_latent_eval.estimators import importance_log_weights

    for features, pins in ((False, TINY_PLAIN), (True, TINY_FEATURES)):
        model = tiny_kglm(proposal_features=features)
        lw = importance_log_weights(
            model,
            model.tokenize("Ada Lovelace born London"),
            num_samples=6,
            temperature=1.0,
            peek=False,
            seed=5,
            document="pin",
        )
        assert lw.tolist() == pinned(pins["logw"], TOL_LOG_P)
    text = _bundled_document()
    x = bundled.tokenize(text)
    assert importance_log_weights(
        bundled, x, num_samples=6, temperature=1.0, peek=True, seed=0, document=text
    ).tolist() == pinned(BUNDLED["logw_peek"], TOL_LOG_P)
    assert importance_log_weights(
        bundled, x, num_samples=6, temperature=0.7, peek=False, seed=0, document=text
    ).tolist() == pinned(BUNDLED["logw_nopeek"], TOL_LOG_P)
