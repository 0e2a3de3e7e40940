"""Why the interval under the value head misses low at 48 tokens: the runs of the seeds that missed, beside those that
covered, with what each stage's SMC runs could have seen (issue 52, item 2).

``--run T --seeds S,S,...``: the statement of ``masked_value.py --coverage T --oracle --peek`` rerun seed by seed
(the same settings, texts, head and draws: its interval is checked against the pooled file's), recording for every
stage and document its log p̂, v̂ (the runs' spread and their Lee-Whiteley estimate), the exact log p, and what the
runs' particles show: Pareto k̂ of each run's weights just before every resampling step and at the end (the weights
of one epoch: PSIS's reading of how heavy the increments since the last resampling are), and the number of distinct
first-generation ancestors (Eves) left in each run. Seeds are split over ``--workers`` forked processes; each seed is
written to ``masked_tail/T{T}_seed{S}.json`` as it finishes.

``--table T``: one row per seed rerun: its last stage's error, the printed interval, what a run could check before
printing it (the stages' agreement, the largest k̂ of an epoch, the largest share of p̂ in one run), and the interval
restated with each document's v̂ from the largest or the pooled variance per sample of every stage (``restated``),
written to ``masked_tail/T{T}.md``.

    python bench/masked_tail.py --run 48 --seeds 13,55,56,57,58,0,1,2,3,4 --workers 2
    python bench/masked_tail.py --table 48
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from masked_coverage import holds, seed_statement
from masked_length import oracle_texts
from masked_value import TEXTS, coverage_args, oracle_with_head, pooled_name
from scipy import stats

from lm_latent_eval.estimators import smc
from lm_latent_eval.estimators.diagnostics import pareto_khat
from lm_latent_eval.estimators.intervals import DocumentError
from lm_latent_eval.estimators.policy import DEFAULT_POLICY
from lm_latent_eval.estimators.registry import resolve, with_model_defaults
from lm_latent_eval.estimators.resampling import RunLayout
from lm_latent_eval.estimators.smc_variance import SMCDiagnostics
from lm_latent_eval.harness.model_args import parse_settings
from lm_latent_eval.models.masked.oracle import oracle_log_marginal

OUTPUT = Path(__file__).resolve().parent / "masked_tail"


class RunWatcher:
    """What the particles of each lane's runs show while SMC runs (``smc_lanes``, ``RunLayout.resample`` and
    ``lee_whiteley_runs`` wrapped): per document name and run, k̂ of the run's weights before each resampling step and
    at the end, and the distinct Eves left at the end; ``take(name)`` hands one document's records over."""

    def __init__(self) -> None:
        self.lanes = None
        self.records: dict[str, list[dict]] = {}

    def _runs(self):
        """(document name, run record) of every run of the lanes now running, in the layout's order."""
        return [(lane.doc, record) for lane, records in self.lanes for record in records]

    @contextlib.contextmanager
    def installed(self):
        original_lanes, original_resample, original_lw = (
            smc.smc_lanes,
            RunLayout.resample,
            smc.lee_whiteley_runs,
        )
        watcher = self

        def lanes(model, lanes, settings):
            # a model that does not batch documents runs its lanes one by one (as ``smc_lanes`` does)
            if len(lanes) > 1 and not smc.has(model, "document_batches"):
                return [lanes(model, [lane], settings)[0] for lane in lanes]
            watcher.lanes = [(lane, [{"epoch_khat": [], "size": n} for n in lane.sizes]) for lane in lanes]
            out = original_lanes(model, lanes, settings)
            for lane, records in watcher.lanes:
                watcher.records.setdefault(lane.doc, []).extend(records)
            watcher.lanes = None
            return out

        def resample(layout, log_w, chosen, generators):
            runs = watcher._runs()
            for r in chosen:
                a, b = layout.starts[r], layout.starts[r + 1]
                runs[r][1]["epoch_khat"].append(pareto_khat(log_w[a:b].numpy()))
            return original_resample(layout, log_w, chosen, generators)

        def lee_whiteley(log_w, eve, layout, resampling_steps):
            for r, (_, record) in enumerate(watcher._runs()):
                a, b = layout.starts[r], layout.starts[r + 1]
                record["final_khat"] = pareto_khat(log_w[a:b].numpy())
                record["distinct_eves"] = int(torch.unique(eve[a:b]).numel())
            return original_lw(log_w, eve, layout, resampling_steps)

        smc.smc_lanes, RunLayout.resample, smc.lee_whiteley_runs = lanes, resample, lee_whiteley
        try:
            yield self
        finally:
            smc.smc_lanes, RunLayout.resample, smc.lee_whiteley_runs = (
                original_lanes,
                original_resample,
                original_lw,
            )

    def take(self, text: str) -> list[dict]:
        return self.records.pop(f"document {text[:60]!r}", [])


class StageRecorder:
    """A ``DocumentStore`` that keeps nothing for later runs: it records every stage's estimate of every document with
    the runs' records of ``watcher`` and the document's exact log p."""

    def __init__(self, watcher: RunWatcher, truth: dict[str, float]) -> None:
        self.watcher, self.truth, self.stages = watcher, truth, []

    def get(self, text, stage=0):
        return None

    def put(self, estimate, stage=0) -> None:
        d, err = estimate.diagnostics, estimate.error(DEFAULT_POLICY)
        self.stages.append(
            {
                "stage": stage,
                "text": list(self.truth).index(estimate.document),
                "num_samples": estimate.num_samples,
                "log_likelihood": estimate.log_likelihood,
                "exact": self.truth[estimate.document],
                "relative_variance": d.relative_variance,
                "runs_relative_variance": d.runs_relative_variance,
                "lee_whiteley_relative_variance": d.lee_whiteley_relative_variance,
                "run_log_likelihoods": d.run_log_likelihoods,
                "resampling_steps": d.resampling_steps,
                "ess_min": d.ess_min,
                "trusted": err.trusted,
                "runs": self.watcher.take(estimate.document),
            }
        )


def seed_record(oracle, texts: list[str], truth: dict[str, float], settings, pooled: dict) -> dict:
    """One seed's statement (``masked_coverage.seed_statement``) with every stage's record (``StageRecorder``), and
    whether it reproduces the pooled run."""
    watcher = RunWatcher()
    store = StageRecorder(watcher, truth)
    total = sum(truth.values())
    with watcher.installed():
        out = seed_statement(oracle, texts, settings, total, None, store)
    before = pooled.get(settings.seed)
    reproduced = (
        None if before is None else bool(np.isclose(before["lower"], out["lower"], rtol=0, atol=1e-9))
    )
    return {**out, "truth": total, "reproduced": reproduced, "stages": store.stages}


def pooled_runs(length: int) -> dict[int, dict]:
    """The runs of ``masked_value.py --pool T --oracle --peek`` by seed (none where it was not run)."""
    path = pooled_name(length, True, True)
    return {r["seed"]: r for r in json.loads(path.read_text())["runs"]} if path.exists() else {}


def run_seeds(length: int, seeds: list[int], workers: int) -> None:
    """``--run``: the seeds' records, split over ``workers`` processes forked after the head's fit."""
    oracle = oracle_with_head()
    texts = oracle_texts(oracle, length, TEXTS)
    truth = {t: float(oracle_log_marginal(oracle, oracle.tokenize(t))) for t in texts}
    given = coverage_args(True)
    settings, _ = with_model_defaults(parse_settings(given), oracle, given)
    settings = resolve(settings, oracle).settings
    pooled = pooled_runs(length)
    OUTPUT.mkdir(exist_ok=True)

    def part(worker: int) -> None:
        for s in seeds[worker::workers]:
            record = seed_record(oracle, texts, truth, settings.replace(seed=s), pooled)
            (OUTPUT / f"T{length}_seed{s}.json").write_text(json.dumps(record) + "\n")
            print(
                f"seed {s}: covered {record['covered']}, reproduced {record['reproduced']}, {record['seconds']:.0f} s"
            )

    processes = [multiprocessing.get_context("fork").Process(target=part, args=(w,)) for w in range(workers)]
    for process in processes:
        process.start()
    for process in processes:
        process.join()


def sampled_stages(record: dict) -> dict[int, list[dict]]:
    """Each document's records of stages 1 on (stage 0's runs of 25 particles left out), drawn, not computed
    exactly, in stage order."""
    out: dict[int, list[dict]] = {}
    for s in sorted(record["stages"], key=lambda s: s["stage"]):
        if s["stage"] >= 1 and s["runs"]:
            out.setdefault(s["text"], []).append(s)
    return out


def penultimate(record: dict) -> list[dict]:
    """The stage before the last, of every document drawn in both."""
    return [stages[-2] for stages in sampled_stages(record).values() if len(stages) >= 2]


def restated(record: dict, variance: str):
    """Whether the last stage's two-sided interval (``UncertaintyPolicy.interval``) covers the exact value, and the
    interval, with each document's v̂ taken as ``variance`` says: ``own`` the last stage's (what was printed),
    ``largest`` the largest relative variance per sample c = v̂ K of any stage over the last stage's K (the
    precision target's c), ``pooled`` c averaged over the stages, weighted by their runs' degrees of freedom. Runs of
    at most 1,024 particles, R of them: v̂ = Var(p̂_r)/(R p²), so c estimates one particle's share of a run's
    variance at any stage."""
    errors = []
    for stages in sampled_stages(record).values():
        last = stages[-1]
        k, dof = last["num_samples"], len(last["runs"]) - 1
        c = [(s["relative_variance"] * s["num_samples"], len(s["runs"]) - 1) for s in stages]
        v = {
            "own": last["relative_variance"],
            "largest": max(ci for ci, _ in c) / k,
            "pooled": sum(ci * n for ci, n in c) / sum(n for _, n in c) / k,
        }[variance]
        errors.append(
            DocumentError(last["log_likelihood"], v, sum(n for _, n in c) if variance == "pooled" else dof)
        )
    interval = DEFAULT_POLICY.interval(errors)
    return interval.two_sided and holds(interval.lower, interval.upper, record["truth"]), interval


def stages_agreement(record: dict) -> float:
    """P-value of the stages' agreement: Σ over documents and stages 1 on of (c_s − c̄)² / v̂_s against χ² with
    Σ (stages − 1) degrees of freedom (c_s the bias-corrected log p̂ of stage s, c̄ their v̂-weighted mean)."""
    q = dof = 0.0
    for stages in sampled_stages(record).values():
        c = np.array([s["log_likelihood"] + s["relative_variance"] / 2 for s in stages])
        v = np.array([s["relative_variance"] for s in stages])
        q += float(((c - (c / v).sum() / (1 / v).sum()) ** 2 / v).sum())
        dof += len(c) - 1
    return float(stats.chi2.sf(q, dof))


def seed_row(record: dict, restatements: dict) -> str:
    """One seed: the printed interval against the exact value, what the last stage's runs show, and the interval
    restated with v̂ from every stage (``restatements``: ``restated`` of each of ``VARIANCES``)."""
    last = [stages[-1] for stages in sampled_stages(record).values()]
    error = sum(s["exact"] - s["log_likelihood"] for s in last)
    epochs = max(
        max(run["epoch_khat"][len(run["epoch_khat"]) // 2 :] + [run["final_khat"]])
        for s in last
        for run in s["runs"]
    )
    share = max(run_share(s) for s in last)
    cells = [f"{'covered' if ok else 'MISSED'}, SE {i.standard_error:.2f}" for ok, i in restatements.values()]
    return (
        f"| {record['seed']} | {error:+.2f} | {cells[0]} | {stages_agreement(record):.2f} | {epochs:.1f} | {share:.2f} "
        f"| {' | '.join(cells[1:])} |"
    )


def run_share(stage: dict) -> float:
    """The largest share of p̂ one run of the stage carries: ``SMCDiagnostics.largest_run_share`` of its record."""
    runs = SimpleNamespace(
        run_log_likelihoods=stage["run_log_likelihoods"],
        run_sizes=[run["size"] for run in stage["runs"]],
        log_likelihood=stage["log_likelihood"],
    )
    return SMCDiagnostics.largest_run_share.fget(runs)


VARIANCES = ("own", "largest", "pooled")


def table(length: int) -> list[str]:
    records = [json.loads(f.read_text()) for f in OUTPUT.glob(f"T{length}_seed*.json")]
    records.sort(key=lambda r: (r["covered"], r["seed"]))
    restatements = {r["seed"]: {v: restated(r, v) for v in VARIANCES} for r in records}
    restate = {v: sum(rs[v][0] for rs in restatements.values()) for v in VARIANCES}
    pooled = pooled_runs(length)
    missed = [s for s, r in pooled.items() if not r["covered"]]
    wider = all(
        rs["largest"][1].lower <= rs["own"][1].lower and rs["largest"][1].upper >= rs["own"][1].upper
        for rs in restatements.values()
    )
    if pooled and set(missed) <= set(restatements):
        rescued = sum(restatements[s]["largest"][0] for s in missed)
        closing = (
            f" Over the pooled file's {len(pooled)} seeds, whose {len(missed)} misses are all rerun here, v̂ from the "
            f"largest c would cover {len(pooled) - len(missed) + rescued} (the printed {len(pooled) - len(missed)} "
            f"and {rescued} of the misses), as long as its interval holds the printed one "
            f"({'so in every seed rerun' if wider else 'NOT so in every seed rerun'})."
        )
    else:
        closing = ""
    # the stage before the last was drawn at sizes fixed before it and is not what a miss selects
    before = [sum(s["exact"] - s["log_likelihood"] for s in penultimate(r)) for r in records]
    correction = [sum(s[-1]["relative_variance"] for s in sampled_stages(r).values()) / 2 for r in records]
    return [
        (
            f"Seeds of `masked_value.py --coverage {length} --oracle --peek` rerun with their runs recorded "
            f"(`python bench/masked_tail.py --run {length}`; {sum(r['reproduced'] is True for r in records)} of "
            f"{len(records)} reproduced the pooled file's interval). Stages 1 on; the last stage's documents summed "
            "(error: log p − log p̂ in nats)."
        ),
        "",
        (
            "| seed | error of the last stage | printed interval (v̂ of the last stage) | stages' agreement, p | largest "
            "k̂ of an epoch's weights (second half) | largest share of p̂ in one run | v̂ from the largest c of any stage "
            "| v̂ from c pooled over the stages |"
        ),
        "|---|---|---|---|---|---|---|---|",
        *(seed_row(r, restatements[r["seed"]]) for r in records),
        "",
        (
            f"Of {len(records)} seeds the interval covered the exact value in {restate['own']} as printed, "
            f"{restate['largest']} with the largest c of any stage, {restate['pooled']} with c pooled over the stages."
            + closing
        ),
        "",
        (
            f"The stage before the last, not selected by a miss: the four texts' error summed is {np.mean(before):+.2f} "
            f"nats on average over these seeds ({min(before):+.2f} to {max(before):+.2f}), against a bias correction "
            f"C = Σ v̂ / 2 of {np.mean(correction):.2f} at the last stage."
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=int, metavar="T", help="rerun seeds at T tokens, recording their runs")
    parser.add_argument("--seeds", default="13,55,56,57,58,0,1,2,3,4", help="comma-separated seeds of --run")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--table", type=int, metavar="T", help="the table of the seeds rerun at T tokens")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.run:
        run_seeds(args.run, [int(s) for s in args.seeds.split(",")], args.workers)
    if args.table:
        text = "\n".join(table(args.table)) + "\n"
        (OUTPUT / f"T{args.table}.md").write_text(text, encoding="utf-8")
        print(text)


if __name__ == "__main__":
    main()
