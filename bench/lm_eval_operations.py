"""Operations per document·token of the precision target through lm-eval, as a user runs it, beside one chunk.

``lm_eval.simple_evaluate`` runs each model's bundled task in this one process (``latent_kglm`` on
``linked_wikitext2_tiny``, ``latent_entitynlm`` on ``coref_tiny``) with model_args ``estimator=smc``, K = 1,000, the
precision target ``target_se`` = 0.002 nats per token (``estimator=auto``'s), ``threads=1``, ``workers=1``. Every
aten operation that computes is counted around the whole call, lm-eval's work included, with the accelerator's code
paths and chunks of documents forced as ``bench/side_by_side.py`` counts them (``kernel_counts.accelerator_paths``,
``side_by_side.accelerator_chunks``, ``side_by_side.StepCounter``: on a GPU each operation is a kernel launch, and for
these small models the launches are the time). A stage of the precision target estimates every document afresh
(``estimators/adaptive.py``), so the end-to-end figure is operations / Σ over stages of the documents' tokens: what a
document·token costs at each stage, to set beside the one chunk of ``bench/side_by_side.py`` (the corpus at a fixed
K = 1,000 through ``estimate_corpus``, after the same warm-up on two documents, in a freshly loaded model). Per stage:
the documents that grew, the distinct sample sizes, the passes over the tokens (``smc.smc_lanes`` calls: chunks of
lanes advanced side by side), their steps and the stage's operations per document·token. The results' perplexities
are printed in full: a change that moves no number leaves them equal, digit for digit.

    python bench/lm_eval_operations.py                  # writes bench/lm_eval_operations/output.md
    python bench/lm_eval_operations.py --models kglm --label after --output bench/lm_eval_operations/kglm.md
    python bench/lm_eval_operations.py --models entitynlm --label after --output bench/lm_eval_operations/entitynlm.md
    python bench/lm_eval_operations.py --revision f6673ec --output bench/lm_eval_operations/before.md
    python bench/lm_eval_operations.py --device cuda --output bench/lm_eval_operations/cuda.md   # on a GPU: seconds
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import side_by_side
from kernel_counts import accelerator_paths
from smc_cost import cpu_name, package_revision, run_at_revision

from lm_latent_eval.estimators import EstimatorSettings, adaptive, resolve, smc
from lm_latent_eval.estimators.registry import with_model_defaults
from lm_latent_eval.models import load_model
from lm_latent_eval.models.corpora import bundled_documents

OUTPUT = Path(__file__).resolve().parent / "lm_eval_operations"
TASKS = Path(__file__).resolve().parents[1] / "tasks"
TASK = {"kglm": "linked_wikitext2_tiny", "entitynlm": "coref_tiny"}
METRICS = ("word_perplexity,none", "latent_perplexity,none", "perplexity_upper_bound,none")


@contextlib.contextmanager
def stage_record(counter):
    """A list that gets one dict per precision-target stage (its number, documents, sample sizes, operations) and
    the passes and steps of each (``smc.smc_lanes`` calls), while the block runs."""
    stages: list[dict] = []
    saved_stage, saved_lanes = adaptive._stage, smc.smc_lanes

    def stage(*args):
        # (pool, store, progress, run, jobs of (text, K), number, desc); before issue 51 without run, and jobs of
        # (text, its resolved run)
        jobs, number, desc = args[-3:]
        row = {
            "stage": number,
            "texts": [t for t, _ in jobs],
            "sizes": [k if isinstance(k, int) else k.settings.num_samples for _, k in jobs],
        }
        row.update(passes=0, steps=0, ops=-counter.ops, desc=desc)
        stages.append(row)
        try:
            return saved_stage(*args)
        finally:
            row["ops"] += counter.ops

    def lanes(model, batch, settings):
        if stages:
            stages[-1]["passes"] += 1
            stages[-1]["steps"] += max(int(lane.x.shape[0]) for lane in batch)
        return saved_lanes(model, batch, settings)

    adaptive._stage, smc.smc_lanes = stage, lanes
    try:
        yield stages
    finally:
        adaptive._stage, smc.smc_lanes = saved_stage, saved_lanes


def end_to_end(name: str, model_args: str, device: str) -> dict:
    """The task through ``lm_eval.simple_evaluate``, counted: operations, host syncs, stages, the results."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    manager = TaskManager(include_path=str(TASKS), include_defaults=False)
    with (
        accelerator_paths(),
        side_by_side.accelerator_chunks(),
        side_by_side.StepCounter() as counter,
        stage_record(counter) as stages,
    ):
        started = time.perf_counter()
        results = lm_eval.simple_evaluate(
            model=f"latent_{name}",
            model_args=model_args,
            tasks=[TASK[name]],
            task_manager=manager,
            bootstrap_iters=0,
            device=device,
        )
        seconds = time.perf_counter() - started
    return {
        "ops": counter.ops,
        "syncs": counter.syncs,
        "stages": stages,
        "seconds": seconds,
        "metrics": {m: results["results"][TASK[name]][m] for m in METRICS},
    }


def one_chunk(name: str, num_samples: int, device: str) -> float:
    """bench/side_by_side's 'together' figure: the corpus at a fixed K through ``estimate_corpus`` (one stage, no
    precision target), after a warm-up on two documents, in a freshly loaded model: operations per document·token."""
    side_by_side.DEVICE = torch.device(device)
    model = load_model(name)[0].to(device)
    texts = list(dict.fromkeys(bundled_documents(name)))
    settings, _ = with_model_defaults(EstimatorSettings("smc", num_samples, seed=1, target_se=None), model)
    run = resolve(settings, model)
    tokens = sum(int(model.tokenize(t).numel()) for t in texts)
    side_by_side.together(run, texts[:2])
    with accelerator_paths(), side_by_side.accelerator_chunks(), side_by_side.StepCounter() as counter:
        side_by_side.together(run, texts)
    return counter.ops / tokens


def markdown(rows: list[dict], args) -> str:
    load = "/".join(f"{v:.2f}" for v in os.getloadavg())
    lines = [
        f"# The precision target through lm-eval: operations per document·token ({args.label or 'this checkout'})",
        "",
        (
            f"lm_latent_eval {package_revision()}; {cpu_name()}, {os.cpu_count()} cores, torch {torch.__version__}, "
            f"lm-eval {lm_eval_version()}, one thread, on {args.device}; load average at the end {load}. model_args "
            f"`{args.model_args}`; operations as a GPU launches them (accelerator code paths and chunks), counted "
            "around `lm_eval.simple_evaluate`."
        ),
        "",
        (
            "| model | task | documents / tokens | stages | operations per document·token end to end "
            "| one chunk (bench/side_by_side) | host syncs per document·stage | seconds (counted run) |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {TASK[r['model']]} | {r['documents']} / {r['tokens']} | {len(r['stages'])} "
            f"| {r['ops'] / r['document_tokens']:.1f} | {r['one_chunk']:.1f} "
            f"| {r['syncs'] / r['document_stages']:.1f} | {r['seconds']:.0f} |"
        )
    lines += [
        "",
        (
            "| model | stage | documents that grew | distinct K | particles | passes | steps "
            "| operations per document·token |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        before = None
        for s in r["stages"]:
            sizes = dict(zip(s["texts"], s["sizes"]))
            grew = "–" if before is None else str(sum(sizes[t] > before.get(t, 0) for t in sizes))
            before = sizes
            lines.append(
                f"| {r['model']} | {s['stage'] + 1} | {grew} | {len(set(s['sizes']))} | {sum(s['sizes']):,} "
                f"| {s['passes']} | {s['steps']} | {s['ops'] / s['tokens']:.1f} |"
            )
    lines += ["", "Results (every digit: equal before and after where no number moved):", ""]
    for r in rows:
        lines.append(
            f"- {r['model']}: " + ", ".join(f"{m.split(',')[0]} {v!r}" for m, v in r["metrics"].items())
        )
    return "\n".join(lines) + "\n"


def lm_eval_version() -> str:
    from importlib.metadata import version

    return version("lm_eval")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(TASK), choices=list(TASK))
    parser.add_argument("--num-samples", type=int, default=1000)
    parser.add_argument("--target-se", type=float, default=0.002)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--label", default="", help="a word for the heading (before / after)")
    parser.add_argument("--output", type=Path, default=OUTPUT / "output.md")
    parser.add_argument(
        "--revision", default=None, help="count lm_latent_eval as it was at this git revision"
    )
    args = parser.parse_args(argv)
    if args.revision:
        given = argv if argv is not None else sys.argv[1:]
        return run_at_revision(args.revision, given, script=__file__, folders=("lm_latent_eval", "tasks"))
    args.model_args = (
        f"estimator=smc,num_samples={args.num_samples},target_se={args.target_se},threads=1,workers=1"
    )
    torch.set_num_threads(1)
    rows = []
    for name in args.models:
        model = load_model(name)[0]
        texts = list(dict.fromkeys(bundled_documents(name)))
        length = {t: int(model.tokenize(t).numel()) for t in texts}
        row = {"model": name, "documents": len(texts), "tokens": sum(length.values())}
        row.update(end_to_end(name, args.model_args, args.device))
        for s in row["stages"]:
            s["tokens"] = sum(length[t] for t in s["texts"])
        row["document_tokens"] = sum(s["tokens"] for s in row["stages"])
        row["document_stages"] = sum(len(s["texts"]) for s in row["stages"])
        row["one_chunk"] = one_chunk(name, args.num_samples, args.device)
        rows.append(row)
        print(markdown(rows, args), flush=True)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(markdown(rows, args))


if __name__ == "__main__":
    main()
