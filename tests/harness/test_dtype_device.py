"""``dtype=`` lowers the network's precision only: log-probabilities are still accumulated in float32/float64.

On a machine with CUDA the same backends also run with ``device=cuda`` and must agree with the CPU numbers.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("lm_eval")
from lm_eval.api.instance import Instance
from tiny_models import make_tiny_gpt2

from lm_latent_eval.harness.backends import LatentHMMEval, LatentLMEval

TEXTS = ["The busy teacher waited.", "Anna saw the old dog. The dog slept."]


def rolling(texts):
    return [Instance("loglikelihood_rolling", {}, (t,), i) for i, t in enumerate(texts)]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_hmm_in_low_precision_accumulates_in_float64(dtype):
    low = LatentHMMEval(estimator="exact", device="cpu", dtype=dtype)
    full = LatentHMMEval(estimator="exact", device="cpu")
    assert {p.dtype for p in low.model.parameters()} == {getattr(torch, dtype)}
    assert low.get_model_info()["dtype"] == dtype and full.get_model_info()["dtype"] == "float32"
    got, ref = (lm.loglikelihood_rolling(rolling(TEXTS), disable_tqdm=True) for lm in (low, full))
    # only the stored logits are rounded (relative 2^-8 for bfloat16); the forward algorithm itself runs in float64
    assert got == pytest.approx(ref, rel=0.05) and got != ref
    is_low = LatentHMMEval(estimator="is", num_samples=64, seed=2, device="cpu", dtype=dtype)
    is_low.loglikelihood_rolling(rolling(TEXTS[:1]), disable_tqdm=True)
    weights = is_low.exchange.peek(TEXTS[0]).log_weights
    assert weights.dtype == np.float64 and np.isfinite(weights).all()


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_causal_lm_in_low_precision_scores_in_float32(tmp_path, dtype):
    path = make_tiny_gpt2(tmp_path / "gpt2", n_positions=8)
    args = {"model": "causal", "pretrained": str(path), "estimator": "exact", "device": "cpu"}
    low, full = LatentLMEval(**args, dtype=dtype), LatentLMEval(**args)
    assert {p.dtype for p in low.model.model.parameters()} == {getattr(torch, dtype)}
    text = "the cat sat on the mat and the dog ran under the log"  # 12 tokens: two windows of context 8
    got, ref = (lm.loglikelihood_rolling(rolling([text]), disable_tqdm=True)[0] for lm in (low, full))
    assert isinstance(got, float) and got == pytest.approx(ref, rel=0.02)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("args", [{"estimator": "exact"}, {"num_samples": 256, "seed": 1}])
def test_cuda_hmm_matches_cpu(args):
    """Exact: equal to rounding. IS: cuda draws from a cuda generator (other samples), so equal within the noise."""
    cpu = LatentHMMEval(device="cpu", **args).loglikelihood_rolling(rolling(TEXTS), disable_tqdm=True)
    cuda_lm = LatentHMMEval(device="cuda", **args)
    assert next(cuda_lm.model.parameters()).device.type == "cuda"
    cuda = cuda_lm.loglikelihood_rolling(rolling(TEXTS), disable_tqdm=True)
    tol = 1e-9 if args.get("estimator") == "exact" else 0.5
    assert cuda == pytest.approx(cpu, abs=tol)
