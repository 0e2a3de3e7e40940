"""latent_reasoning on the CPU, measured side by side in one run; writes bench/reasoning/README.md.

    python bench/reasoning.py [--seeds 400]
    python bench/reasoning.py --answers      # writes bench/reasoning/answers.md (5. alone)
    python bench/reasoning.py --questions    # writes bench/reasoning/questions.md (6. alone)
    python bench/reasoning.py --speed --size 1b --device cuda --dtype bfloat16 --output OUT/reasoning_cuda.md
                                             # 1. alone at Llama-3.2-1B's shape (a GPU: bench/gpu_session.sh)

1. Speed: K chains of up to L tokens and the scoring of 4 answers per question, (a) ours: the K chains in lockstep
   through one key/value cache, the answers scored on forks of it (common random numbers), against (b) what lm-eval's
   ``hf`` does for self-consistency: ``generate`` with K return sequences, then each chain ⊕ answer scored by its own
   forward pass; random-weight networks (a 2-layer GPT-2 of width 64, the bundled tokenizer; a 4-layer Llama of width
   256), seconds per question.
2. Common random numbers: the spread over seeds of the paired difference log p̂(a | x) − log p̂(b | x) with the
   choices on the same chains (the default) and on independent ones, against the exact difference (tiny model).
3. Coverage over seeds on the tiny model (3 questions): the bounded-weights interval, the package's usual statement,
   the certified bound's failures.
4. Side by side on the 40 four-choice questions of tests/data/hmm_choice with the bundled GPT-2: acc and the gold
   answer's mean log-likelihood under no chain, one chain, maj@K over chains and the marginal (IS, K chains).
5. ``--answers``: a question's 4 answers on chains of their own (the default), by importance sampling as a run does
   it (``estimate_documents``): one answer at a time against the 4 side by side (``ChainProposal.sample_documents``:
   one lockstep batch of 4K chains), seconds per question, and the largest difference of their log weights.
6. ``--questions``: 8 questions of 4 answers each (chains of their own) as lm-eval's loglikelihood estimates them:
   one question at a time (each question's view, its 4 answers side by side: section 5) against the questions side by
   side (``QuestionsView``: their chains in lockstep batches of up to ``batch_chains`` chains, the prompts padded),
   seconds per question, and the largest difference of their log weights.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from particles import timed
from reasoning_tiny import tiny_reasoning

from lm_latent_eval.estimators import UncertaintyPolicy, importance_log_weights, log_mean_exp
from lm_latent_eval.estimators.importance import importance_error
from lm_latent_eval.models import default_checkpoint, load_model
from lm_latent_eval.models.reasoning import LatentReasoningLM, ReasoningTemplate
from lm_latent_eval.models.reasoning.chains import draw_chains, score_answers

OUTPUT = Path(__file__).resolve().parent / "reasoning" / "README.md"
CHOICES = REPO / "tests" / "data" / "hmm_choice" / "test.jsonl"
PAIRS = [("a b", " a"), ("a b", " b ;"), ("b", " a a")]


# Llama-3.2-1B's shape (``--size 1b``: section 1 on a GPU, issue 54's 1B-width measurement)
LLAMA_1B = {"hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32,
            "num_key_value_heads": 8}  # fmt: skip
LLAMA_SMALL = {"hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 4, "num_attention_heads": 4,
               "num_key_value_heads": 2}  # fmt: skip
NETWORK_NAMES = {"gpt2": "GPT-2, 2 layers, width 64", "llama": "Llama, 4 layers, width 256",
                 "llama1b": "Llama, 16 layers, width 2,048 (Llama-3.2-1B's shape)"}  # fmt: skip


def random_network(kind: str, vocab: int, device: str = "cpu", dtype: torch.dtype = torch.float32):
    """A random-weight network (seed 0) of ``kind`` (a key of ``NETWORK_NAMES``), built on ``device`` in ``dtype``."""
    torch.manual_seed(0)
    with torch.device(device):
        if kind == "gpt2":
            return (
                GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_positions=512, n_embd=64, n_layer=2, n_head=2))
                .to(dtype)
                .eval()
            )
        shape = LLAMA_1B if kind == "llama1b" else LLAMA_SMALL
        config = LlamaConfig(vocab_size=vocab, max_position_embeddings=512, **shape)
        return LlamaForCausalLM(config).to(dtype).eval()


@torch.no_grad()
def hf_self_consistency(model, prompt, k, length, answers, generator) -> None:
    """lm-eval hf's route: K sampled chains by ``generate``, then every chain ⊕ answer scored by a forward pass."""
    torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=generator)))
    out = model.network.generate(prompt[None], do_sample=True, num_return_sequences=k, max_new_tokens=length,
                                 min_new_tokens=length, top_k=0, pad_token_id=0)  # fmt: skip
    for answer in answers:
        rows = torch.cat([out, answer[None].expand(k, -1)], 1)
        torch.log_softmax(model.network(input_ids=rows).logits[:, -answer.numel() - 1 : -1].float(), -1)


@torch.no_grad()
def lockstep_question(model, k: int, answers, seed: int) -> None:
    """Ours: K chains in lockstep through one key/value cache, each answer scored on a fork of it."""
    generator = torch.Generator(model.device).manual_seed(seed)
    draws = draw_chains(model.network, model.rule, model.prompt, k, generator)
    for answer in answers:
        score_answers(model.network, model.rule, draws, torch.arange(k), answer)


def speed(
    rows: list[str], repeats: int = 3, kinds=("gpt2", "llama"), device: str = "cpu", dtype=torch.float32
):
    tokenizer = AutoTokenizer.from_pretrained(default_checkpoint("tokenization"))
    header = "| network | K | L | ours: lockstep + cached answers (s / question) | hf generate + forward per chain "
    rows += [header + "(s / question) | ratio |", "|---|---|---|---|---|---|"]
    for kind in kinds:
        network = random_network(kind, len(tokenizer), device, dtype)
        # issue 54's shapes at 1B width (K = 8 and 32 chains of up to 256 tokens), smaller ones on the CPU's networks
        for k, length in ((8, 256), (32, 256)) if kind == "llama1b" else ((8, 64), (32, 64), (8, 256)):
            # an end marker the random network never writes: every chain runs to L, as generate's does
            template = ReasoningTemplate(end_marker="\x00never", max_chain_tokens=length)
            model = LatentReasoningLM(network, tokenizer, template).conditional_model(
                "Question: 2 + 2?\nAnswer:"
            )
            model.rule.stop_ids = frozenset()
            answers = [
                torch.tensor(model.tokenizer(a)["input_ids"], device=device)
                for a in (" 4", " 5", " 22", " four")
            ]
            ours, theirs = [], []
            for r in range(repeats):
                seconds, _ = timed(lambda r=r: lockstep_question(model, k, answers, r), device)
                ours.append(seconds)
                seconds, _ = timed(lambda r=r: hf_self_consistency(model, model.prompt, k, length, answers,
                                                                   torch.Generator().manual_seed(r)), device)  # fmt: skip
                theirs.append(seconds)
            a, b = min(ours), min(theirs)
            rows.append(f"| {NETWORK_NAMES[kind]} | {k} | {length} | {a:.3f} | {b:.3f} | {b / a:.2f} |")
            print(rows[-1], flush=True)


def common_random_numbers(rows: list[str], seeds: int) -> None:
    model = tiny_reasoning()
    question, a, b = "a b", " a", " b"
    exact = [model.conditional_model(question).log_marginal(model.conditional_model(question).tokenize(question + c))
             for c in (a, b)]  # fmt: skip
    rows += [
        "| streams | K | SD of log p̂(a) − log p̂(b) over seeds | mean error of the difference |",
        "|---|---|---|---|",
    ]
    for shared in (True, False):
        for k in (4, 16):
            diffs = []
            for seed in range(seeds):
                view = model.conditional_model(question)
                view.share_chains = (
                    shared  # model_args share_chains (default false: each answer's own stream)
                )
                values = [log_mean_exp(importance_log_weights(view, view.tokenize(question + c), num_samples=k,
                                                              peek=False, seed=seed, document=question + c))
                          for c in (a, b)]  # fmt: skip
                diffs.append(values[0] - values[1])
            diffs = np.array(diffs)
            label = "shared (the question's)" if shared else "independent (each answer's)"
            rows.append(
                f"| {label} | {k} | {diffs.std(ddof=1):.4f} | {diffs.mean() - (exact[0] - exact[1]):+.4f} |"
            )
            print(rows[-1], flush=True)


def coverage(rows: list[str], seeds: int) -> None:
    model = tiny_reasoning()
    views = [(model.conditional_model(q), q + a) for q, a in PAIRS]
    exact = sum(v.log_marginal(v.tokenize(t)) for v, t in views)
    policy = UncertaintyPolicy()
    header = "| K | bounded-weights interval covers | usual statement covers (two-sided of them) | certified bound "
    rows += [header + "fails | mean width, bounded (nats) |", "|---|---|---|---|---|"]
    for k in (4, 16, 64):
        bounded = usual = two_sided = failed = 0
        widths = []
        for seed in range(seeds):
            lws = [importance_log_weights(v, v.tokenize(t), num_samples=k, peek=False, seed=seed, document=t)
                   for v, t in views]  # fmt: skip
            b = policy.bounded_interval([np.exp(lw) for lw in lws], 1.0)
            bounded += b.lower <= exact <= b.upper
            widths.append(b.upper - b.lower)
            u = policy.interval([importance_error(lw, policy) for lw in lws])
            usual += u.lower <= exact <= u.upper
            two_sided += u.two_sided
            failed += exact < policy.certified_lower_bound([float(log_mean_exp(lw)) for lw in lws])
        rows.append(f"| {k} | {bounded}/{seeds} | {usual}/{seeds} ({two_sided}) | {failed}/{seeds} | "
                    f"{np.mean(widths):.3f} |")  # fmt: skip
        print(rows[-1], flush=True)


@torch.no_grad()
def side_by_side(rows: list[str], k: int = 16, length: int = 16) -> None:
    model, _ = load_model("reasoning", str(default_checkpoint("tokenization")), max_chain_tokens=length)
    docs = [json.loads(line) for line in CHOICES.read_text().splitlines()]
    correct = {m: 0 for m in ("no chain", "one chain", f"maj@{k}", f"marginal (IS, K = {k})")}
    gold_ll = {m: [] for m in correct}
    for doc in docs:
        question = f"Question: {doc['question']}\nAnswer:"
        answers = [" " + t for t in doc["choices"]["text"]]
        gold = doc["choices"]["label"].index(doc["answerKey"])
        view = model.conditional_model(question)
        # no chain: the answer right after the question, as lm-eval's hf scores it
        plain = [model.tokenizer(question)["input_ids"] for _ in answers]
        no_chain = []
        for ids, answer in zip(plain, answers):
            y = model.tokenizer(answer)["input_ids"]
            logp = torch.log_softmax(model.network(input_ids=torch.tensor([ids + y])).logits[0].double(), -1)
            no_chain.append(float(sum(logp[len(ids) + j - 1, t] for j, t in enumerate(y))))
        draws = draw_chains(model.network, model.rule, view.prompt, k, torch.Generator().manual_seed(0))
        per_chain = torch.stack([score_answers(model.network, model.rule, draws, torch.arange(k), view.tokenize(
            question + a).to(model.device)) for a in answers])  # fmt: skip
        values = {
            "no chain": no_chain,
            "one chain": per_chain[:, 0].tolist(),
            f"maj@{k}": np.bincount(per_chain.argmax(0).numpy(), minlength=len(answers)).tolist(),
            f"marginal (IS, K = {k})": (torch.logsumexp(per_chain, 1) - math.log(k)).tolist(),
        }
        for method, v in values.items():
            correct[method] += int(int(np.argmax(v)) == gold)
            if method != f"maj@{k}":
                gold_ll[method].append(v[gold])
    rows += ["| method | acc (40 questions) | mean log p(gold answer \\| question) |", "|---|---|---|"]
    for method, right in correct.items():
        ll = f"{np.mean(gold_ll[method]):.3f}" if gold_ll[method] else "(a vote: no likelihood)"
        rows.append(f"| {method} | {right / len(docs):.3f} | {ll} |")
        print(rows[-1], flush=True)


def answers(rows: list[str], repeats: int = 3) -> None:
    """Section 5 (``--answers``)."""
    from lm_latent_eval.estimators import EstimatorSettings, resolve

    tokenizer = AutoTokenizer.from_pretrained(default_checkpoint("tokenization"))
    rows += [
        (
            "| network | K | L | one answer at a time (s / question) | 4 side by side (s / question) | ratio | "
            "largest difference of a log weight |"
        ),
        "|---|---|---|---|---|---|---|",
    ]
    question = "Question: 2 + 2?\nAnswer:"
    texts = [question + a for a in (" 4", " 5", " 22", " four")]
    for kind in ("gpt2", "llama"):
        network = random_network(kind, len(tokenizer))
        for k, length in ((8, 64), (32, 64)):
            template = ReasoningTemplate(end_marker="\x00never", max_chain_tokens=length)
            view = LatentReasoningLM(network, tokenizer, template).conditional_model(question)
            view.rule.stop_ids = frozenset()
            run = resolve(EstimatorSettings("is", k, peek=False, seed=1, target_se=None), view)
            apart, together = [], []
            for _ in range(repeats):
                start = time.perf_counter()
                alone = [run.estimate_documents([t])[0] for t in texts]
                apart.append(time.perf_counter() - start)
                start = time.perf_counter()
                batched = run.estimate_documents(texts)
                together.append(time.perf_counter() - start)
            gap = max(float(np.max(np.abs(a.log_weights - b.log_weights))) for a, b in zip(alone, batched))
            a, b = min(apart), min(together)
            name = NETWORK_NAMES[kind]
            rows.append(f"| {name} | {k} | {length} | {a:.3f} | {b:.3f} | {a / b:.2f} | {gap:.1e} |")
            print(rows[-1], flush=True)


def questions(rows: list[str], count: int = 8, length: int = 32, repeats: int = 3) -> None:
    """Section 6 (``--questions``)."""
    from lm_latent_eval.estimators import EstimatorSettings, resolve

    tokenizer = AutoTokenizer.from_pretrained(default_checkpoint("tokenization"))
    rows += [
        (
            "| network | K | chains per batch (batch_chains) | one question at a time (s / question) | side by side "
            "(s / question) | ratio | largest difference of a log weight |"
        ),
        "|---|---|---|---|---|---|---|",
    ]
    asked = [f"Question: {a} + {a + 3}?\nAnswer:" for a in range(count)]
    pairs = [(q, a) for q in asked for a in (" 4", " 5", " 22", " four")]
    for kind in ("gpt2", "llama"):
        network = random_network(kind, len(tokenizer))
        for k, cap in ((8, 256), (32, 256), (32, 1024)):
            template = ReasoningTemplate(end_marker="\x00never", max_chain_tokens=length)
            model = LatentReasoningLM(network, tokenizer, template, batch_chains=cap)
            model.rule.stop_ids = frozenset()
            run = resolve(EstimatorSettings("is", k, peek=False, seed=1, target_se=None), model)
            apart, together = [], []
            for _ in range(repeats):
                start = time.perf_counter()
                alone = [e for q in asked for e in run.on(model.conditional_model(q)).estimate_documents(
                    [q + a for p, a in pairs if p == q])]  # fmt: skip
                apart.append(time.perf_counter() - start)
                start = time.perf_counter()
                batched = run.on(model.conditional_models(pairs)).estimate_documents(
                    [q + a for q, a in pairs]
                )
                together.append(time.perf_counter() - start)
            gap = max(float(np.max(np.abs(a.log_weights - b.log_weights))) for a, b in zip(alone, batched))
            a, b = min(apart) / count, min(together) / count
            rows.append(
                f"| {NETWORK_NAMES[kind]} | {k} | {cap} | {a:.3f} | {b:.3f} | {a / b:.2f} | {gap:.1e} |"
            )
            print(rows[-1], flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=400)
    parser.add_argument(
        "--answers", action="store_true", help="section 5 alone, into bench/reasoning/answers.md"
    )
    parser.add_argument(
        "--questions", action="store_true", help="section 6 alone, into bench/reasoning/questions.md"
    )
    parser.add_argument("--speed", action="store_true", help="section 1 alone, into --output")
    parser.add_argument(
        "--size", choices=("cpu", "1b"), default="cpu", help="--speed's networks (1b: Llama-3.2-1B's shape)"
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--output", type=Path, default=OUTPUT.with_name("speed.md"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    machine = f"{platform.processor() or platform.machine()}, torch {torch.__version__}, 1 thread"
    if args.speed:
        where = torch.cuda.get_device_name() if args.device.startswith("cuda") else machine
        rows = [f"# latent_reasoning's chains against hf's self-consistency ({where}, {args.dtype})", "",
                f"`python bench/reasoning.py --speed --size {args.size} --device {args.device} --dtype {args.dtype}`", ""]  # fmt: skip
        kinds = ("llama1b",) if args.size == "1b" else ("gpt2", "llama")
        speed(rows, kinds=kinds, device=args.device, dtype=getattr(torch, args.dtype))
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text("\n".join(rows) + "\n")
        return
    if args.questions:
        load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
        rows = [
            f"# A batch's questions side by side ({machine}; {os.cpu_count()} cores, load average {load} at the start)",
            "",
            "`python bench/reasoning.py --questions` (8 questions of 4 answers, chains of 32 tokens)",
            "",
        ]
        questions(rows)
        rows += ["", f"Load average at the end: {', '.join(f'{v:.2f}' for v in os.getloadavg())}."]
        OUTPUT.with_name("questions.md").write_text("\n".join(rows) + "\n")
        print(f"wrote {OUTPUT.with_name('questions.md')}")
        return
    if args.answers:
        rows = [
            f"# A question's answers side by side ({machine})",
            "",
            "`python bench/reasoning.py --answers`",
            "",
        ]
        answers(rows)
        OUTPUT.with_name("answers.md").write_text("\n".join(rows) + "\n")
        print(f"wrote {OUTPUT.with_name('answers.md')}")
        return
    rows = [
        f"# latent_reasoning on the CPU ({machine})",
        "",
        "`python bench/reasoning.py`",
        "",
        "## Speed",
        "",
    ]
    speed(rows)
    rows += ["", "## Common random numbers (tiny model, question `a b`, answers ` a` and ` b`)", ""]
    common_random_numbers(rows, args.seeds // 2)
    rows += ["", f"## Coverage over {args.seeds} seeds (tiny model, 3 questions, level 95%)", ""]
    coverage(rows, args.seeds)
    rows += ["", "## Side by side on tests/data/hmm_choice (bundled GPT-2, chains of up to 16 tokens)", ""]
    side_by_side(rows)
    OUTPUT.parent.mkdir(exist_ok=True)
    OUTPUT.write_text("\n".join(rows) + "\n")
    print(f"wrote {OUTPUT}")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory():
        main()
