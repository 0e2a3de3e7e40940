"""``lm-latent-eval train lda`` (Gibbs sampling) and MALLET's left-to-right evaluator against the exact value."""

from __future__ import annotations

import json
import math
import re

import pytest
import torch
from lda_tiny import TEXT, tiny_lda

from lm_latent_eval.cli import main
from lm_latent_eval.models import load_model
from lm_latent_eval.models.lda import peers
from lm_latent_eval.models.lda.exact import all_assignments


def planted_corpus(num_docs: int = 60, seed: int = 0) -> list[str]:
    """Documents of a two-topic LDA whose topics use disjoint words (fruit, animals)."""
    gen = torch.Generator().manual_seed(seed)
    topics = [["apple", "pear", "cherry", "plum"], ["cat", "dog", "horse", "mouse"]]
    docs = []
    for _ in range(num_docs):
        theta = torch.distributions.Dirichlet(torch.tensor([0.3, 0.3])).sample()
        z = torch.multinomial(theta, 20, replacement=True, generator=gen)
        docs.append(" ".join(topics[k][int(torch.randint(4, (), generator=gen))] for k in z.tolist()))
    return docs


def test_train_cli_recovers_planted_topics(tmp_path, capsys):
    torch.manual_seed(0)
    data = tmp_path / "docs.txt"
    data.write_text("\n".join(planted_corpus()) + "\n")
    out = tmp_path / "lda"
    args = [
        "train",
        "lda",
        "--train",
        str(data),
        "--output",
        str(out),
        "--num-topics",
        "2",
        "--iterations",
        "60",
    ]
    assert main([*args, "--average-last", "20", "--min-df", "1", "--no-progress"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["output"] == str(out)
    model, _ = load_model("lda", out)
    top = [{model.vocab[i] for i in model.phi[k].topk(4).indices.tolist()} for k in range(2)]
    assert sorted(map(sorted, top)) == [["apple", "cherry", "pear", "plum"], ["cat", "dog", "horse", "mouse"]]
    assert json.loads((out / "training.json").read_text())["config"]["num_topics"] == 2
    assert torch.allclose(model.pseudocounts / model.pseudocounts.sum(1, keepdim=True), model.phi)


def test_train_cli_errors_are_one_line(tmp_path):
    with pytest.raises(SystemExit, match="exactly one of --train FILE and --bundled"):
        main(["train", "lda", "--output", str(tmp_path / "x")])
    with pytest.raises(SystemExit, match="no such file"):
        main(["train", "lda", "--train", str(tmp_path / "missing.txt"), "--output", str(tmp_path / "x")])


def test_left_to_right_is_biased_and_does_not_converge():
    """MALLET's estimator without resampling converges, as particles grow, to Σ_t log E_q[p(x_t | x_<t, z_<t)]
    (q: its own left-to-right draws, listed exactly here), which is not log p(x); at one token it is exact."""
    model = tiny_lda(lookahead="none")
    x = model.tokenize(TEXT)
    alpha, phi = model.alpha, model.phi
    limit = 0.0
    for t in range(x.numel()):  # E_q over z_<t of p(x_t | ·), by listing z_<t with its q (peek, τ = 1)
        z = all_assignments(t, 3)
        log_q = model.proposal.log_prob(x[:t], z) if t else torch.zeros(1, dtype=torch.float64)
        counts = (
            torch.nn.functional.one_hot(z, 3).sum(1).double() if t else torch.zeros(1, 3, dtype=torch.float64)
        )
        predictive = ((counts + alpha) * phi[:, x[t]]).sum(1) / (t + alpha.sum())
        limit += math.log(float((log_q.exp() * predictive).sum()))
    exact = model.log_marginal(x)
    assert abs(limit - exact) > 0.01
    estimate = peers.left_to_right(model, x, 200_000, torch.Generator().manual_seed(0))
    assert estimate == pytest.approx(limit, abs=0.01)
    one = model.tokenize("cherry")
    assert peers.left_to_right(model, one, 3) == pytest.approx(model.log_marginal(one), abs=1e-12)


def test_lda_peers_cli(tmp_path, capsys):
    """The report on the bundled model: exact, SMC and IS rows, then the libraries' figures (or why not)."""
    out = tmp_path / "peers"
    assert main(["lda-peers", "--num-samples", "16", "--output", str(out)]) == 0
    rows = json.loads((out / "results.json").read_text())
    by_tool = {r["tool"].split(",")[0]: r for r in rows}
    exact = by_tool["exact (dynamic program over topic counts)"]["perplexity"]
    assert exact == pytest.approx(548.828, abs=1e-3)
    assert by_tool["MALLET-style left-to-right"]["perplexity"] > exact
    if "scikit-learn" in by_tool and not math.isnan(by_tool["scikit-learn"]["perplexity"]):
        assert by_tool["scikit-learn"]["perplexity"] > 100 * exact
    assert "| tool |" in (out / "table.md").read_text() and "SMC" in capsys.readouterr().out


def test_lda_peers_bad_model_files_are_one_line(tmp_path, capsys):
    """A missing file, a corrupt joblib, a foreign .bin (tomotopy would abort the process), a bad α, and a model
    none of whose words occur in the documents: one line each, exit status 2, no traceback."""
    (tmp_path / "corrupt.joblib").write_bytes(b"x")
    (tmp_path / "foreign.bin").write_bytes(b"not tomotopy")
    (tmp_path / "weights.txt").write_text("0\tzebra\t1.5\n1\tzebra\t2.0\n")
    cases = [
        ([str(tmp_path / "missing.joblib")], "missing.joblib: no such model file"),
        ([str(tmp_path / "corrupt.joblib")], "not a readable scikit-learn .joblib. model file .EOFError"),
        ([str(tmp_path / "foreign.bin")], "not a tomotopy LDAModel file"),
        (
            [str(tmp_path / "weights.txt"), "--alpha", "abc"],
            "alpha must be a number or numbers separated by ':'",
        ),
        (
            [str(tmp_path / "weights.txt"), "--alpha", "0.1"],
            "none of the 20 documents has a word of the model's",
        ),
    ]
    for args, message in cases:
        if "joblib" in args[0] and "corrupt" in args[0]:
            pytest.importorskip("joblib")
        assert main(["lda-peers", "--pretrained", *args]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and re.search(message, err), err
