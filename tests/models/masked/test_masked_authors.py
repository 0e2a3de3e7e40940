"""``latent_masked`` against the masked-diffusion families' own modeling code (the unmodified files of
``../shared/fixtures/masked-diffusion/``, read from there, never copied into the project; each test skips cleanly
where they are absent): tiny random-weight networks built from the authors' classes, each checked against an
independent dynamic program over the authors' forward read the way the authors' sampler reads it.

Under transformers 5 Dream's own ``from_pretrained`` / ``save_pretrained`` fail inside its code (its generation
config and its list-valued ``_tied_weights_keys``), so the tiny Dream network is built with ``from_config`` through
the config's ``auto_map`` and handed to ``HFMaskedLM``; loading its folder is checked to fail with one clean line.
Its config asks for RoPE ``linear`` with factor 1 (the same frequencies as ``default``, which transformers 5 no longer
registers)."""

from __future__ import annotations

import functools
import json
import math
import shutil
import warnings
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from lm_latent_eval.errors import InputError, UnsupportedError
from lm_latent_eval.harness.backends import LatentMaskedEval
from lm_latent_eval.models.masked.hf import HFMaskedLM

FIXTURES = Path(__file__).resolve().parents[3] / ".." / "shared" / "fixtures" / "masked-diffusion"
if not FIXTURES.is_dir():
    FIXTURES = Path("/work/shared/fixtures/masked-diffusion")
WORDS = ["the", "cat", "dog", "sat", "on", "mat", "anna", "saw", "a", "."]
# <unk> 0, <|endoftext|> 1, <|beginoftext|> 2, <|mask|> 3, the words 4..13
SPECIALS = ["<unk>", "<|endoftext|>", "<|beginoftext|>", "<|mask|>"]
TEXTS = ["the cat sat", "anna saw a dog", "a mat .", "the dog sat on"]


def need(family: str) -> Path:
    folder = FIXTURES / family
    if not folder.is_dir():
        pytest.skip(f"the authors' {family} code is not in {FIXTURES} (../shared/fixtures/masked-diffusion)")
    return folder


def word_tokenizer(path: Path, bos: bool = True, mask: bool = True):
    """A word-level tokenizer over ``SPECIALS`` + ``WORDS`` that puts no special tokens around a text."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(
        models.WordLevel({w: i for i, w in enumerate([*SPECIALS, *WORDS])}, unk_token="<unk>")
    )
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token="<unk>",
        eos_token="<|endoftext|>",
        bos_token="<|beginoftext|>" if bos else None,
        mask_token="<|mask|>" if mask else None,
    )
    tokenizer.save_pretrained(path)
    return tokenizer


def dream_folder(path: Path) -> Path:
    """Dream's released layout, sizes shrunk: config.json (``auto_map`` naming Dream's files, ``mask_token_id``,
    ``bos_token_id``), the files beside it, generation_config.json, a tokenizer; no weights."""
    source = need("dream")
    path.mkdir(parents=True, exist_ok=True)
    for name in ["configuration_dream.py", "modeling_dream.py", "generation_utils.py"]:
        shutil.copy(source / name, path / name)
    config = {
        "model_type": "Dream",
        "architectures": ["DreamModel"],
        "auto_map": {
            "AutoConfig": "configuration_dream.DreamConfig",
            "AutoModel": "modeling_dream.DreamModel",
        },
        "vocab_size": len(SPECIALS) + len(WORDS) + 2,  # wider than the tokenizer, as Dream's output layer is
        "hidden_size": 16,
        "intermediate_size": 32,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "max_position_embeddings": 24,
        "mask_token_id": 3,
        "pad_token_id": 1,
        "bos_token_id": 2,
        "eos_token_id": 1,
        "rope_scaling": {"rope_type": "linear", "factor": 1.0},
    }
    (path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    (path / "generation_config.json").write_text(json.dumps({"mask_token_id": 3, "bos_token_id": 2}))
    word_tokenizer(path)
    return path


@pytest.fixture(scope="module")
def dream(tmp_path_factory, offline):
    """(folder, the authors' DreamModel with random weights in float64, the tokenizer)."""
    from transformers import AutoConfig, AutoModel

    folder = dream_folder(tmp_path_factory.mktemp("dream"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # transformers 5's deprecation notices about Dream's RoPE fields
        config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
        torch.manual_seed(0)
        network = AutoModel.from_config(config, trust_remote_code=True)
    for parameter in network.parameters():  # std 0.02 leaves every conditional near uniform: widen them
        torch.nn.init.normal_(parameter, std=0.5)
    return folder, network.double().eval(), AutoTokenizer.from_pretrained(folder)


@torch.no_grad()
def dream_dp(network, x: list[int], shifted: bool, bos: int = 2, mask: int = 3) -> float:
    """log p(x) under uniform orders by a dynamic program over revealed sets, written from Dream's sampler: the
    input is BOS then the text with the mask id at unrevealed positions, ``logits = cat([logits[:, :1],
    logits[:, :-1]])`` (``shifted``) so text position i reads output i of the text (output of its predecessor), the
    mask row left out of the softmax."""
    T = len(x)

    @functools.cache
    def rest(revealed: frozenset) -> float:
        if len(revealed) == T:
            return 0.0
        ids = torch.tensor([[bos, *[x[i] if i in revealed else mask for i in range(T)]]])
        logits = network(ids).logits
        if shifted:
            logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
        logits = logits[0, 1:].double()
        logits[:, mask] = -math.inf
        log_p = torch.log_softmax(logits, -1)
        terms = [
            -math.log(T - len(revealed)) + float(log_p[i, x[i]]) + rest(revealed | {i})
            for i in range(T)
            if i not in revealed
        ]
        return float(torch.logsumexp(torch.tensor(terms, dtype=torch.float64), 0))

    return rest(frozenset())


def test_dream_is_read_shifted_as_its_sampler_reads_it(dream):
    """The exact log p equals the program over Dream's forward read shifted, and differs from the unshifted
    reading (what the package computed before it read Dream's config)."""
    _, network, tokenizer = dream
    model = HFMaskedLM(network, tokenizer)
    assert model.shifted and model.mask_id == 3
    assert model.special_before.tolist() == [2]  # the leading BOS token, never masked, never scored
    assert model.max_length == 24 - 1
    unshifted = HFMaskedLM(network, tokenizer, shifted_outputs="false")
    assert not unshifted.shifted and unshifted.special_before.numel() == 0
    gaps = []
    for text in TEXTS:
        x = model.tokenize(text)
        exact = model.log_marginal(x)
        assert exact == pytest.approx(dream_dp(network, x.tolist(), shifted=True), abs=1e-10), text
        gaps.append(abs(exact - dream_dp(network, x.tolist(), shifted=False)))
    assert max(gaps) > 0.1, gaps


def test_dream_shifted_conditional_sums_to_one_and_order_scores_agree(dream):
    """log p(x, σ) by hand for one order, and a one-token conditional normalised, under the shifted reading."""
    _, network, tokenizer = dream
    model = HFMaskedLM(network, tokenizer, shifted_outputs=True)
    view = model.conditional_model("the cat")
    every = [view.log_marginal(torch.tensor([v])) for v in range(model.vocab_size) if v != model.mask_id]
    assert float(torch.logsumexp(torch.tensor(every, dtype=torch.float64), 0)) == pytest.approx(
        0.0, abs=1e-12
    )
    x, order = model.tokenize("anna saw a"), [2, 0, 1]
    ids, total = [3, 3, 3], -math.log(6)
    with torch.no_grad():
        for i in order:
            logits = (
                network(torch.tensor([[2, *ids]])).logits[0, i].double()
            )  # output i predicts text position i
            logits[3] = -math.inf
            total += float(torch.log_softmax(logits, -1)[x[i]])
            ids[i] = int(x[i])
    assert float(model.log_joint(x, torch.tensor([order]))) == pytest.approx(total, abs=1e-10)


def test_the_shift_rule_and_its_override(dream):
    _, network, tokenizer = dream
    with pytest.raises(InputError, match="shifted_outputs must be one of"):
        HFMaskedLM(network, tokenizer, shifted_outputs="maybe")
    tokenizer_without_bos = word_tokenizer(Path(dream[0]) / "no_bos", bos=False)
    model = HFMaskedLM(network, tokenizer_without_bos)  # the config's bos_token_id
    assert model.special_before.tolist() == [2]


def test_loading_dream_under_transformers_5_fails_in_one_clean_line(dream, offline):
    import transformers

    if transformers.__version__.startswith("4."):
        pytest.skip("Dream's own code loads under transformers 4")
    with pytest.raises(InputError, match=r"own modeling code failed.*transformers==4\.46\.3") as caught:
        LatentMaskedEval(pretrained=str(dream[0]), trust_remote_code=True, device="cpu")
    assert "\n" not in str(caught.value) and "AutoModelForMaskedLM" not in str(caught.value)


def test_the_mask_id_comes_from_the_config_and_an_explicit_one_wins(dream):
    """Dream's and LLaDA's configs name ``mask_token_id``; before, a tokenizer without a mask token was refused."""
    folder, network, _ = dream
    no_mask = word_tokenizer(Path(folder) / "no_mask", mask=False)
    assert HFMaskedLM(network, no_mask).mask_id == 3  # config.json's mask_token_id
    assert HFMaskedLM(network, no_mask, mask_token=15).mask_id == 15  # an explicit mask_token wins
    with pytest.raises(InputError, match=r"mask id 999 .*output layer of 16 rows") as caught:
        HFMaskedLM(network, no_mask, mask_token=999)
    assert "\n" not in str(caught.value)


def bd3lm_folder(path: Path, time_conditioning: bool = False) -> Path:
    """BD3-LM's released layout, sizes shrunk: one block over 8 positions (cross_attn off: MDLM-like, every position
    sees every other), adaLN on (the layer that reads the time), SDPA attention; the code files beside config.json;
    a tokenizer; no weights."""
    pytest.importorskip("einops", reason="BD3-LM's code imports einops")
    source = need("bd3lm")
    path.mkdir(parents=True, exist_ok=True)
    for name in ["configuration_bd3lm.py", "modeling_bd3lm.py"]:
        shutil.copy(source / name, path / name)
    config = {
        "model_type": "bd3lm",
        "architectures": ["BD3LM"],
        "auto_map": {"AutoConfig": "configuration_bd3lm.BD3LMConfig", "AutoModel": "modeling_bd3lm.BD3LM"},
        "block_size": 8,
        "vocab_size": 16,
        "model_length": 8,
        "cross_attn": False,
        "adaln": True,
        "attn_backend": "sdpa",
        "hidden_dim": 16,
        "cond_dim": 8,
        "n_blocks": 1,
        "n_heads": 2,
        "dropout": 0.0,
        "time_conditioning": time_conditioning,
        "var_min": False,
    }
    (path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    word_tokenizer(path)
    return path


def llada_folder(path: Path) -> Path:
    """LLaDA's released layout (GSAI-ML/LLaDA-8B-Base's config.json fields), sizes shrunk: a LLaMA-style block,
    RoPE, RMSNorm, SwiGLU, no weight tying, ``mask_token_id`` in the config, an output layer wider than the
    tokenizer; the code files beside it; a tokenizer that puts no special tokens around a text; no weights."""
    source = need("llada")
    path.mkdir(parents=True, exist_ok=True)
    for name in ["configuration_llada.py", "modeling_llada.py"]:
        shutil.copy(source / name, path / name)
    config = {
        "model_type": "llada",
        "architectures": ["LLaDAModelLM"],
        "auto_map": {
            "AutoConfig": "configuration_llada.LLaDAConfig",
            "AutoModel": "modeling_llada.LLaDAModelLM",
            "AutoModelForCausalLM": "modeling_llada.LLaDAModelLM",
        },
        "activation_type": "silu",
        "block_type": "llama",
        "d_model": 16,
        "n_heads": 2,
        "n_kv_heads": 2,
        "n_layers": 1,
        "mlp_hidden_size": 32,
        "mlp_ratio": 2,
        "layer_norm_type": "rms",
        "rms_norm_eps": 1e-5,
        "rope": True,
        "rope_theta": 500000.0,
        "max_sequence_length": 24,
        "vocab_size": len(SPECIALS) + len(WORDS) + 2,
        "embedding_size": len(SPECIALS) + len(WORDS) + 2,
        "weight_tying": False,
        "mask_token_id": 3,
        "eos_token_id": 1,
        "pad_token_id": 1,
        "attention_dropout": 0.0,
        "residual_dropout": 0.0,
        "embedding_dropout": 0.0,
        "include_bias": False,
        "include_qkv_bias": False,
        "init_device": "cpu",
        "init_fn": "mitchell",
        "flash_attention": False,
        "alibi": False,
        "scale_logits": False,
        "input_emb_norm": False,
        "use_cache": False,
    }
    (path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    word_tokenizer(path, bos=False)
    return path


def random_network(folder: Path, seed: int, std: float = 0.5):
    """The authors' class named by the folder's ``auto_map`` (``AutoModel.from_config``), its parameters drawn
    from N(0, std²): the initial std 0.02 (and BD3-LM's zero output layer) leaves every conditional near uniform."""
    from transformers import AutoConfig, AutoModel

    with warnings.catch_warnings():
        warnings.simplefilter(
            "ignore"
        )  # transformers 5's deprecation notices about the authors' config fields
        config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
        network = AutoModel.from_config(config, trust_remote_code=True)
    torch.manual_seed(seed)
    for parameter in network.parameters():
        torch.nn.init.normal_(parameter, std=std)
    return network.eval()


def bd3lm_network(time_conditioning: bool):
    """The authors' BD3LM class with random weights (``bd3lm_folder``) and its folder."""
    import tempfile

    folder = bd3lm_folder(Path(tempfile.mkdtemp(prefix="bd3lm")), time_conditioning)
    return folder, random_network(folder, seed=1)


def test_a_network_that_takes_the_diffusion_time_gets_zeros_where_its_config_ignores_it(dream, offline):
    """BD3-LM's forward takes ``timesteps`` (a raw TypeError before); with ``time_conditioning: false`` its own forward
    replaces the value by zeros, so zeros are what its sampler's network computes at any step: the exact value equals
    the program over its forward given zeros, and the output does not move with the time passed."""
    folder, network = bd3lm_network(time_conditioning=False)
    model = HFMaskedLM(network, AutoTokenizer.from_pretrained(folder))
    assert model.time_argument == "timesteps" and not model.shifted and model.mask_id == 3
    x = model.tokenize("the cat sat")
    with torch.no_grad():
        ids = torch.tensor([[4, 3, 7]])
        zero = network(input_ids=ids, timesteps=torch.zeros(1)).logits
        assert torch.equal(zero, network(input_ids=ids, timesteps=torch.full((1,), 0.7)).logits)

    @functools.cache
    def rest(revealed: frozenset) -> float:
        if len(revealed) == 3:
            return 0.0
        ids = torch.tensor([[int(x[i]) if i in revealed else 3 for i in range(3)]])
        logits = network(input_ids=ids, timesteps=torch.zeros(1)).logits[0].double()
        logits[:, 3] = -math.inf
        log_p = torch.log_softmax(logits, -1)
        terms = [-math.log(3 - len(revealed)) + float(log_p[i, x[i]]) + rest(revealed | {i}) for i in range(3)
                 if i not in revealed]  # fmt: skip
        return float(torch.logsumexp(torch.tensor(terms, dtype=torch.float64), 0))

    with torch.no_grad():
        # float32 network: rows batched differently round differently
        assert model.log_marginal(x) == pytest.approx(rest(frozenset()), abs=2e-5)


def test_a_time_conditioned_network_is_refused_in_one_line():
    folder, network = bd3lm_network(time_conditioning=True)
    with pytest.raises(UnsupportedError, match="takes the diffusion time"):
        HFMaskedLM(network, AutoTokenizer.from_pretrained(folder))


def test_texts_read_in_windows_get_a_one_line_notice_once(dream):
    _, network, tokenizer = dream
    model = HFMaskedLM(network, tokenizer)
    text = " ".join(["the cat sat on a mat ."] * 4)  # 28 tokens, the network reads 23 after the BOS
    with pytest.warns(UserWarning, match=r"a text of 28 tokens is longer than the 23 positions"):
        model.check_text(model.tokenize(text))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.conditional_model("anna").check_text(model.tokenize(text))  # once per model, its views included


def test_torch_dtype_gets_did_you_mean_dtype():
    from lm_latent_eval.harness.model_args import ModelArgsError, parse_backend_args

    with pytest.raises(ModelArgsError, match="did you mean torch_dtype → dtype"):
        parse_backend_args("LatentMaskedEval", "masked", {"torch_dtype": "bfloat16"})
