"""``latent_masked`` on a masked-diffusion checkpoint with its own modeling code (LLaDA-, Dream-style): config.json's
``auto_map`` names a ``configuration_*.py`` and a ``modeling_*.py`` in the folder, loaded through ``AutoModel`` with
``trust_remote_code=True``; its forward returns logits at every position (no masked-LM head), its tokenizer puts no
special tokens around a text, and the mask id comes from the tokenizer or from model_args ``mask_token``. Everything is
built here, in the test's folder: nothing is downloaded."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from lm_eval.api.instance import Instance

from lm_latent_eval.errors import UserError
from lm_latent_eval.harness.backends import LatentMaskedEval
from lm_latent_eval.models.masked.exact import brute_force_log_marginal
from lm_latent_eval.models.masked.hf import HFMaskedLM

CONFIGURATION = """
from transformers import PretrainedConfig


class TinyDiffConfig(PretrainedConfig):
    model_type = "tinydiff"

    def __init__(self, vocab_size=32, hidden_size=16, max_sequence_length=24, **kwargs):
        self.vocab_size, self.hidden_size, self.max_sequence_length = vocab_size, hidden_size, max_sequence_length
        super().__init__(**kwargs)
"""

MODELING = '''
import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import CausalLMOutput

from .configuration_tinydiff import TinyDiffConfig


class TinyDiffModel(PreTrainedModel):
    """Logits at every position from a bidirectional mix of the whole input (no [MASK]-specific head)."""

    config_class = TinyDiffConfig

    def __init__(self, config):
        super().__init__(config)
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.position = nn.Embedding(config.max_sequence_length, config.hidden_size)
        self.mix = nn.Linear(config.hidden_size, config.hidden_size)
        self.out = nn.Linear(config.hidden_size, config.vocab_size)
        self.post_init()

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=1.0)

    def forward(self, input_ids, attention_mask=None, **kwargs):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        h = self.embed(input_ids) + self.position(positions)[None]
        h = torch.tanh(h + self.mix(h.mean(1, keepdim=True)))
        return CausalLMOutput(logits=self.out(h))
'''

WORDS = ["the", "cat", "dog", "sat", "on", "mat", "anna", "saw", "a", "."]


def make_tiny_diffusion(path: Path, mask_token: str | None = "<|mdm_mask|>", seed: int = 0) -> Path:
    """A checkpoint folder: the modeling and configuration files, config.json with ``auto_map``, random weights
    (model.safetensors) and a word-level tokenizer over <unk>, <|endoftext|>, the mask token (if any) + ``WORDS``,
    with no special tokens around a text."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoConfig, AutoModel, PreTrainedTokenizerFast

    path.mkdir(parents=True, exist_ok=True)
    (path / "configuration_tinydiff.py").write_text(CONFIGURATION, encoding="utf-8")
    (path / "modeling_tinydiff.py").write_text(MODELING, encoding="utf-8")
    specials = ["<unk>", "<|endoftext|>", *([mask_token] if mask_token else []), "<|unused|>"]
    vocab = {w: i for i, w in enumerate([*specials, *WORDS])}
    config = {
        "model_type": "tinydiff",
        "architectures": ["TinyDiffModel"],
        "auto_map": {
            "AutoConfig": "configuration_tinydiff.TinyDiffConfig",
            "AutoModel": "modeling_tinydiff.TinyDiffModel",
        },
        # wider than the tokenizer's vocabulary, as LLaDA's and Dream's output layers are
        "vocab_size": len(vocab) + 3,
        "hidden_size": 16,
        "max_sequence_length": 24,
    }
    (path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    torch.manual_seed(seed)
    network = AutoModel.from_config(
        AutoConfig.from_pretrained(path, trust_remote_code=True), trust_remote_code=True
    )
    network.eval().save_pretrained(path)
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace()])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="<unk>", eos_token="<|endoftext|>", mask_token=mask_token
    )
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def diffusion_dir(tmp_path_factory, offline):
    return make_tiny_diffusion(tmp_path_factory.mktemp("tinydiff_mask"))


@pytest.fixture(scope="module")
def no_mask_dir(tmp_path_factory, offline):
    """LLaDA-style: the tokenizer has no mask token; model_args mask_token names the id the model reads."""
    return make_tiny_diffusion(tmp_path_factory.mktemp("tinydiff_nomask"), mask_token=None)


def one_token_total(lm, context: str) -> float:
    """log Σ_v p(v | context) over the network's ids but the mask, in float64."""
    view = lm.model.conditional_model(context)
    every = [
        view.log_marginal(torch.tensor([v])) for v in range(lm.model.vocab_size) if v != lm.model.mask_id
    ]
    return float(torch.logsumexp(torch.tensor(every, dtype=torch.float64), 0))


def test_the_checkpoint_with_its_own_modeling_code_loads_through_automodel(diffusion_dir):
    lm = LatentMaskedEval(
        pretrained=str(diffusion_dir), trust_remote_code=True, estimator="exact", device="cpu"
    )
    model = lm.model
    assert isinstance(model, HFMaskedLM)
    assert type(model.predictor).__name__ == "TinyDiffModel"  # the folder's class, through AutoModel
    assert model.mask_id == model.tokenizer.mask_token_id == 2
    assert model.special_before.numel() == model.special_after.numel() == 0
    assert model.vocab_size == len(model.tokenizer) + 3  # the output layer's rows
    assert model.max_length == 24  # config.max_sequence_length, as LLaDA names it
    assert model.tokenize("the cat sat .").tolist() == [4, 5, 7, 13]
    assert lm.get_model_info()["model_options"]["trust_remote_code"] is True


def test_without_trust_remote_code_the_refusal_names_the_model_arg(diffusion_dir):
    with pytest.raises(UserError, match="trust_remote_code=True"):
        LatentMaskedEval(pretrained=str(diffusion_dir), device="cpu")


@torch.no_grad()
def test_log_joint_is_the_product_of_the_networks_conditionals(diffusion_dir):
    """log p(x, σ) by hand: the unrevealed positions set to the mask id, softmax over the ids but the mask."""
    model = LatentMaskedEval(pretrained=str(diffusion_dir), trust_remote_code=True, device="cpu").model
    x, order = model.tokenize("the cat sat"), torch.tensor([1, 2, 0])
    ids, total = torch.full((3,), 2), -math.log(6)
    for position in order.tolist():
        logits = model.predictor(input_ids=ids[None]).logits[0, position].double()
        logits[2] = -math.inf
        total += float(torch.log_softmax(logits, -1)[x[position]])
        ids[position] = x[position]
    assert float(model.log_joint(x, order[None])) == pytest.approx(total, abs=1e-5)
    assert model.log_marginal(x) == pytest.approx(brute_force_log_marginal(model, x), abs=1e-12)


@pytest.mark.parametrize("which", ["tokenizer's mask", "mask_token model_arg"])
def test_the_three_request_types_run_and_a_one_token_conditional_sums_to_one(
    which, diffusion_dir, no_mask_dir
):
    if which == "tokenizer's mask":
        args = {"pretrained": str(diffusion_dir)}
    else:
        # lm-eval parses digits to an int; the id of <|unused|> in the folder without a mask token
        args = {"pretrained": str(no_mask_dir), "mask_token": 2}
    lm = LatentMaskedEval(trust_remote_code=True, estimator="exact", device="cpu", seed=1, **args)
    assert lm.model.mask_id == 2
    for context in ["the cat", "anna saw a"]:
        assert abs(one_token_total(lm, context)) < 1e-12, context
    pairs = [("the cat", " sat"), ("the cat", " sat on the mat ."), ("anna saw", " a dog .")]
    values = [
        v
        for v, _ in lm.loglikelihood([Instance("loglikelihood", {}, p, i) for i, p in enumerate(pairs)], True)
    ]
    for (ctx, cont), value in zip(pairs, values):
        view = lm.model.conditional_model(ctx)
        assert value == pytest.approx(view.log_marginal(view.tokenize(ctx + cont)), abs=1e-12)
    [rolling] = lm.loglikelihood_rolling(
        [Instance("loglikelihood_rolling", {}, ("the dog sat on a mat .",), 0)], True
    )
    assert rolling == pytest.approx(
        lm.model.log_marginal(lm.model.tokenize("the dog sat on a mat .")), abs=1e-12
    )
    for gen_kwargs in [{"do_sample": True}, {"do_sample": False}]:
        request = Instance(
            "generate_until", {}, ("the cat", {"until": ["\n"], "max_gen_toks": 3} | gen_kwargs), 0
        )
        [text] = lm.generate_until([request], True)
        assert lm.generate_until([request], True) == [text]  # seeded by (seed, context)
        # 3 ids drawn; those past the tokenizer's vocabulary (the output layer's 3 extra rows) decode to nothing
        assert text == "" or (text.startswith(" ") and 1 <= len(lm.model.tokenize(text)) <= 3)
        assert lm.model.mask_id not in lm.model.tokenize("the cat" + text).tolist()


def test_without_a_mask_token_the_refusal_asks_for_the_model_arg(no_mask_dir):
    with pytest.raises(UserError, match="mask_token="):
        LatentMaskedEval(pretrained=str(no_mask_dir), trust_remote_code=True, device="cpu")
