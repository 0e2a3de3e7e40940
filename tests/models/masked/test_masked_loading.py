"""A Hugging Face masked LM is read in the requested dtype onto the requested device by ``from_pretrained`` itself
(``hf.loading_options``), never as a float32 network cast afterwards; without accelerate it is moved after loading.
The host memory this saves on a 1 GB checkpoint is ``bench/masked_loading.py``'s."""

from __future__ import annotations

import pytest
import torch
from tiny_models import make_tiny_bert

from lm_latent_eval.harness.model_args import model_options
from lm_latent_eval.models import load_model, places_while_loading
from lm_latent_eval.models.masked import hf
from lm_latent_eval.models.masked.diffusion import MaskedDiffusionLM


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        yield make_tiny_bert(tmp_path_factory.mktemp("bert"))


class Spy:
    """Stands for ``AutoModelForMaskedLM``: records the keyword arguments of ``from_pretrained`` and the dtypes of
    the network it returned, as transformers returned it (before anything else touched it)."""

    def __init__(self, real):
        self.real, self.kwargs, self.dtypes = real, None, None

    def from_pretrained(self, path, **kwargs):
        network = self.real.from_pretrained(path, **kwargs)
        self.kwargs, self.dtypes = kwargs, {p.dtype for p in network.parameters()}
        return network


@pytest.fixture
def spy(monkeypatch):
    recorder = Spy(hf.AutoModelForMaskedLM)
    monkeypatch.setattr(hf, "AutoModelForMaskedLM", recorder)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return recorder


def test_the_network_is_read_in_bfloat16_by_from_pretrained_itself(bert_dir, spy):
    model, _ = load_model("masked", pretrained=str(bert_dir), dtype=torch.bfloat16, device="cpu")
    keyword = "dtype" if hf.Version(hf.transformers.__version__) >= hf.DTYPE_KEYWORD_SINCE else "torch_dtype"
    assert spy.kwargs[keyword] is torch.bfloat16
    assert spy.kwargs["device_map"] == {"": "cpu"}
    # transformers handed back a bfloat16 network: there was no float32 copy to cast
    assert spy.dtypes == {torch.bfloat16}
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    x = model.tokenize("the cat sat")
    assert model.log_marginal(x) < 0


def test_without_a_dtype_nothing_is_asked_of_from_pretrained(bert_dir, spy):
    model, _ = load_model("masked", pretrained=str(bert_dir), device="cpu")
    assert "dtype" not in spy.kwargs and "torch_dtype" not in spy.kwargs
    assert spy.dtypes == {torch.float32} == {p.dtype for p in model.parameters()}


def test_without_accelerate_the_network_is_moved_after_loading(bert_dir, spy, monkeypatch):
    monkeypatch.setattr(hf.importlib.util, "find_spec", lambda name: None)
    moved = []
    monkeypatch.setattr(torch.nn.Module, "to", lambda self, *a, **k: moved.append((a, k)) or self)
    hf.load_network(str(bert_dir), False, torch.bfloat16, "cpu")
    assert "device_map" not in spy.kwargs and "low_cpu_mem_usage" not in spy.kwargs
    assert spy.dtypes == {torch.bfloat16} and moved == [(("cpu",), {})]


@pytest.mark.parametrize(
    "version, keyword",
    [("4.46.3", "torch_dtype"), ("4.55.4", "torch_dtype"), ("4.56.0", "dtype"), ("5.24.0", "dtype")],
)
def test_the_dtype_goes_under_the_name_the_installed_transformers_reads(version, keyword):
    options = hf.loading_options(torch.float16, "cuda:1", version=version, accelerate=True)
    assert options[keyword] is torch.float16 and options["device_map"] == {"": "cuda:1"}
    assert ("low_cpu_mem_usage" in options) == version.startswith("4.")


def test_a_class_naming_dtype_and_device_gets_them_and_they_are_no_model_args_of_its_own():
    assert places_while_loading(MaskedDiffusionLM)

    class Own:
        @classmethod
        def from_pretrained(cls, path, dtype=None, device=None, width: int = 3): ...

    assert places_while_loading(Own)
    assert [arg.name for arg in model_options(Own)] == ["width"]
