"""RNNG numbers pinned to the values of the implementation before the speed-up of issue 13 (commit 56d51c0).

log p(x, z) and log q_τ(z | x) (τ = 1 and 0.7) of fixed trees must stay within 1e-9 of the recorded values: the tiny
RNNG of ``rnng_tiny.py`` (every 97th enumerated tree of its 8-word sentence, with and without the sentence
end) and the bundled RNNG (6 trees of a 12-word test sentence, drawn from q at τ = 3 with seed 1, scored as one
batch). The sampler's random stream is pinned too: the drawn trees and their log q_3, and the log importance weights
of fixed (seed, document) streams, K = 6 on the tiny model and K = 1,000 on the bundled one (first weights and
sums, the sums within K · 1e-9). The float32 network makes log p depend on how trees are batched (by ~1e-6: matrix
products round differently for different batch sizes), so the pins score the same batches as when recorded.
"""

from __future__ import annotations

import pytest
import torch
from pins import pinned
from rnng_tiny import TEXT, tiny_rnng

from lm_latent_eval.estimators import importance_log_weights
from lm_latent_eval.models import load_model
from lm_latent_eval.models.corpora import read_documents
from lm_latent_eval.models.rnng.enumerate import enumerate_trees
from lm_latent_eval.paths import DATA_DIR

TOL = 1e-9

TINY = {
    True: {  # count_eos
        "log_joint": [
            -27.7808598279953,
            -27.76309633255005,
            -26.566413044929504,
            -25.273869812488556,
            -26.574130058288574,
        ],
        "logw": [
            -21.68924896862763,
            -19.884658057954493,
            -20.42894159701127,
            -21.63644670393723,
            -20.489733089473425,
            -21.131764580276194,
        ],
    },
    False: {
        "log_joint": [
            -24.969138979911804,
            -24.9510235786438,
            -23.75222957134247,
            -22.45907288789749,
            -23.758984565734863,
        ],
        "logw": [
            -18.877056290176093,
            -17.069297273423853,
            -17.615237583186808,
            -18.825232018497168,
            -17.67622839358109,
            -18.31886737492341,
        ],
    },
    "q1": [
        -6.109585355255424,
        -6.082065920564949,
        -6.052753101322471,
        -6.013319264385521,
        -6.102518390152275,
    ],
    "q07": [
        -6.130582992127081,
        -6.091269616177222,
        -6.049394134571692,
        -5.993060056259772,
        -6.120487395813605,
    ],
}
BUNDLED_TEXT = "a old garden watched lucy from a cat in the garden ."
BUNDLED = {
    "z": [
        "00011000001110001101111",
        "00011000001110001111011",
        "00011000001110001111011",
        "00011000001110001110111",
        "00011001000111000111011",
        "00011000001000111110111",
    ],
    "log_joint": [
        -38.8668016539159,
        -25.16433548553323,
        -25.16433548553323,
        -33.99006349335832,
        -25.446734091165126,
        -33.21739482843259,
    ],
    "q1": [
        -21.71738431203005,
        -0.07043454396364268,
        -0.07043454396364268,
        -7.728382084246846,
        -8.181339237567158,
        -11.302801105853291,
    ],
    "q07": [
        -30.941426408686652,
        -0.01721490661145708,
        -0.01721490661145708,
        -10.957139146723762,
        -11.604224336543098,
        -16.063450944819465,
    ],
    "lq3": [
        -7.9962007440419605,
        -0.780550662407439,
        -0.780550662407439,
        -3.333200160393279,
        -3.4841858781667163,
        -4.524673167595424,
    ],
    "logw1000_head": [-25.093900941569558, -25.093900941569558, -20.865647298453794, -25.093900941569558],
    "logw1000_sum": -24822.224556101253,
    "logw1000_t2_sum": -24220.78048291121,
    # sums of the K = 1,000 log weights (τ = 1, seed 0) of the first 10 test sentences (the benchmark's documents)
    "bench_sums": [
        -10527.589840430483,
        -6869.166355206829,
        -8108.948824393125,
        -24822.224556101253,
        -25126.52693364104,
        -10027.957516638015,
        -8458.507478499982,
        -7303.061243281078,
        -17520.3108136315,
        -18423.02321570277,
    ],
}


@pytest.fixture(scope="module")
def bundled():
    model, _ = load_model("rnng", None, device="cpu")
    return model


@pytest.mark.parametrize("count_eos", [True, False])
def test_tiny_rnng_log_p_log_q_and_log_weights_are_pinned(count_eos):
    model = tiny_rnng(count_eos=count_eos)
    x = model.tokenize(TEXT)
    z = enumerate_trees(8)[::97]
    with torch.no_grad():
        assert model.log_joint(x, z).tolist() == pinned(TINY[count_eos]["log_joint"], TOL)
        assert model.proposal.log_prob(x, z, 1.0).tolist() == pinned(TINY["q1"], TOL)
        assert model.proposal.log_prob(x, z, 0.7).tolist() == pinned(TINY["q07"], TOL)
    lw = importance_log_weights(model, x, num_samples=6, temperature=1.0, peek=True, seed=5, document="pin")
    assert lw.tolist() == pinned(TINY[count_eos]["logw"], TOL)


def test_bundled_rnng_trees_log_p_and_log_q_are_pinned(bundled):
    x = bundled.tokenize(BUNDLED_TEXT)
    z, log_q3 = bundled.proposal.sample(x, 6, temperature=3.0, generator=torch.Generator().manual_seed(1))
    assert ["".join(map(str, row)) for row in z.tolist()] == BUNDLED["z"]
    assert log_q3.tolist() == pinned(BUNDLED["lq3"], TOL)
    with torch.no_grad():
        assert bundled.log_joint(x, z).tolist() == pinned(BUNDLED["log_joint"], TOL)
        assert bundled.proposal.log_prob(x, z, 1.0).tolist() == pinned(BUNDLED["q1"], TOL)
        assert bundled.proposal.log_prob(x, z, 0.7).tolist() == pinned(BUNDLED["q07"], TOL)


def test_bundled_rnng_log_weights_of_fixed_seeds(bundled):
    K = 1000
    x = bundled.tokenize(BUNDLED_TEXT)
    lw = importance_log_weights(
        bundled, x, num_samples=K, temperature=1.0, peek=True, seed=0, document=BUNDLED_TEXT
    )
    assert lw[:4].tolist() == pinned(BUNDLED["logw1000_head"], TOL)
    assert lw.sum() == pinned(BUNDLED["logw1000_sum"], K * TOL)
    lw = importance_log_weights(
        bundled, x, num_samples=K, temperature=2.0, peek=True, seed=0, document=BUNDLED_TEXT
    )
    assert lw.sum() == pinned(BUNDLED["logw1000_t2_sum"], K * TOL)
    texts = read_documents(str(DATA_DIR / "ptb_tiny" / "test.txt"))[:10]
    sums = [
        importance_log_weights(
            bundled, bundled.tokenize(t), num_samples=K, temperature=1.0, peek=True, seed=0, document=t
        ).sum()
        for t in texts
    ]
    assert sums == pinned(BUNDLED["bench_sums"], K * TOL)
