"""Every model's cost against text length: the default statement at four lengths per model (issue 52, item 5).

For each bundled model and for the importance-sampling-only path of a user's model, what a user who gives no
estimator setting gets, resolved as the lm-eval backends resolve it (the model's ``default_settings``, then ``auto``:
``with_model_defaults``, ``resolve``; ``estimate_corpus``, then ``corpus_estimate``), on ``--texts`` texts of T of
the model's own tokens at four lengths T. Per (model, T) cell: the statement (two-sided or not, and the certified
bound), particles per document (mean over the sampled texts at the last stage drawn), particles·tokens drawn per
corpus token over every stage (network rows per token for the masked LM), the texts computed exactly
(``exact_where_cheaper``), the seconds, and the precision target's cost line ("the next N stages will draw at least
... samples·tokens ...", logged after stage 1 and again where a later stage's allocation more than doubles what it
said), captured as it is logged, beside what the stages after it then drew and took.

Each cell runs in its own process under a time budget (``--seconds``, counted from the moment the model is loaded and
its texts are made): a cell still running then is stopped, and its row says "did not finish in S s" with the stages it
had finished and the cost line it had printed by then. Where a model's cell does not finish, its longer cells are not
started (their cost is at least that: ``--run-past-timeouts`` runs them anyway).

Models: ``hmm``, ``kglm``, ``entitynlm``, ``rnng``, ``lda``, ``tokenization``, ``masked`` (``models.load_model``), and
two models a user might bring that have neither a stepwise part nor an exact marginal, so that ``auto`` picks
importance sampling: ``user_is_hmm``, the bundled HMM seen through the whole-document contract only
(``tests/hmm_tiny.WholeDocumentOnly``: its own mismatched proposal, forward-filter backward-sample), and
``user_is_gaussian``, ``tests/gaussian_tiny.GaussianLatentLM`` (one continuous latent, proposal N(posterior mode, 1))
seen the same way.

Texts of T tokens: the model's bundled held-out documents joined (one space between them) and cut into consecutive
pieces of T of the model's own tokens, wrapping around; the masked LM's as ``bench/masked_length.joined_texts`` makes
them; ``user_is_hmm`` reads the HMM's; ``user_is_gaussian`` (no corpus) reads its own samples (z ~ N(0, 1), then T
words). Lengths: 16, 64, 256 and 1,024 tokens, except the masked LM's 8, 16, 32 and 64 (its network reads 64
positions). The RNNG reads one sentence: a text of T words is one sentence of T words (the held-out sentences run on,
their full stops inside it), scored with ``</s>`` (T + 1 tokens), the tree spanning all of it.

    python bench/length_scaling.py      # writes bench/length_scaling/output.md and output.json
    python bench/length_scaling.py --models hmm,masked --lengths 16,32 --seconds 60 --output /tmp/length.md
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import json
import logging
import math
import os
import queue
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch
from masked_length import joined_texts
from masked_side_by_side import Cost, machine
from tqdm.auto import tqdm

from lm_latent_eval.estimators import EstimatorSettings
from lm_latent_eval.estimators.adaptive import estimate_corpus
from lm_latent_eval.estimators.corpus import corpus_estimate
from lm_latent_eval.estimators.registry import resolve, with_model_defaults
from lm_latent_eval.models import load_model
from lm_latent_eval.models.corpora import bundled_documents

REPO = Path(__file__).resolve().parents[1]
OUTPUT = Path(__file__).resolve().parent / "length_scaling" / "output.md"
BUNDLED = ("hmm", "kglm", "entitynlm", "rnng", "lda", "tokenization", "masked")
USER = ("user_is_hmm", "user_is_gaussian")
LENGTHS = (16, 64, 256, 1024)
# the bundled masked network reads 64 positions (its max_length)
MASKED_LENGTHS = (8, 16, 32, 64)
TEXTS_PER_LENGTH = 4
SECONDS = 300
# a cell whose model has not loaded and made its texts by then is stopped (its budget starts after that)
LOAD_SECONDS = 300
# each line the child process writes for the parent starts with this
MARK = "@length_scaling "
# the progress bar's line is redrawn when a cell's stage changes, else at most this often
PROGRESS_SECONDS = 30
# seconds below this give no growth exponent (start-up and noise)
TIMED_SECONDS = 1.0
# a cell's cost grows "faster than linearly" in T where its exponent between two lengths exceeds this
LINEAR_EXPONENT = 1.25


# ---------------------------------------------------------------------------------------------- models and texts


def user_model(base, latent_support: str | None = None):
    """``base`` seen through the whole-document contract only (tokenize, log_joint, proposal: no stepwise part, no
    log_marginal), as a user's model without them: ``auto`` picks importance sampling."""
    sys.path.insert(0, str(REPO / "tests"))
    from hmm_tiny import WholeDocumentOnly

    model = WholeDocumentOnly(base)
    if latent_support is not None:
        model.latent_support = latent_support
    return model


def build(name: str):
    """(the model the statement runs on, the model that has an exact log_marginal for a reference or None)."""
    if name == "user_is_hmm":
        hmm, _ = load_model("hmm")
        return user_model(hmm), hmm
    if name == "user_is_gaussian":
        sys.path.insert(0, str(REPO / "tests"))
        from gaussian_tiny import GaussianLatentLM

        gaussian = GaussianLatentLM()
        return user_model(gaussian, "continuous"), gaussian
    model, _ = load_model(name)
    return model, (model if name == "hmm" else None)


def gaussian_texts(model, length: int, count: int) -> list[str]:
    """``count`` texts of ``length`` words drawn from the Gaussian model itself: z ~ N(0, 1), then the words i.i.d.
    given z (seed ``length``)."""
    generator = torch.Generator().manual_seed(length)
    texts = []
    for _ in range(count):
        z = torch.randn(1, generator=generator, dtype=torch.float64)
        probs = torch.softmax(model.offsets + model.slopes * z, -1)
        ids = torch.multinomial(probs, length, replacement=True, generator=generator)
        texts.append(" ".join(model.vocab[i] for i in ids.tolist()))
    return texts


def cut_documents(model, documents: list[str], length: int, count: int) -> list[str]:
    """``count`` texts of ``length`` of the model's tokens: ``documents`` joined by spaces, tokenized once (without
    an end-of-sentence id), cut into consecutive pieces (wrapping around), each written back as text."""
    ids = model.tokenize(" ".join(documents))
    end = getattr(model, "eos_id", None)
    if end is not None:
        ids = ids[ids != end]
    ids = ids.repeat(math.ceil(length * count / ids.numel()))
    decode = getattr(model, "detokenize", None) or (lambda x: model.text_bytes(x).decode("utf-8"))
    return [decode(ids[i * length : (i + 1) * length]) for i in range(count)]


def texts_of(name: str, model, length: int, count: int) -> list[str]:
    """``count`` texts of ``length`` of ``model``'s tokens (a user's model: of the model it wraps)."""
    if name == "masked":
        return joined_texts(model, length, count)
    if name == "user_is_gaussian":
        return gaussian_texts(model, length, count)
    source = "hmm" if name == "user_is_hmm" else name
    return cut_documents(model, bundled_documents(source), length, count)


def lengths_of(name: str) -> tuple[int, ...]:
    return MASKED_LENGTHS if name == "masked" else LENGTHS


# ---------------------------------------------------------------------------------------------- one cell (child)


def emit(event: dict) -> None:
    print(MARK + json.dumps(event), flush=True)


class StageLog:
    """A ``DocumentStore`` that keeps nothing (``get`` finds nothing) and reports every estimate as it is made:
    its stage, samples, tokens, whether it was computed exactly, the seconds since the start and the network rows
    run so far (the masked LM)."""

    def __init__(self, model, started: float) -> None:
        self.model, self.started = model, started

    def get(self, text: str, stage: int = 0):
        return None

    def put(self, estimate, stage: int = 0) -> None:
        emit(
            {
                "event": "document",
                "stage": stage,
                "samples": estimate.num_samples,
                "tokens": estimate.num_tokens,
                "exact": estimate.computed_exactly,
                "sampled": estimate.sampled,
                "rows": getattr(self.model, "network_rows", None),
                "at": time.perf_counter() - self.started,
            }
        )


class LogLines(logging.Handler):
    """The package's log lines (the precision target's cost line, its warnings), each sent as it is logged."""

    def __init__(self, started: float) -> None:
        super().__init__(logging.INFO)
        self.started = started

    def emit(self, record: logging.LogRecord) -> None:
        emit(
            {
                "event": "log",
                "level": record.levelname,
                "message": record.getMessage(),
                "at": time.perf_counter() - self.started,
            }
        )


def run_cell(name: str, length: int, count: int) -> None:
    """One cell, in this process: the default statement on ``count`` texts of ``length`` tokens, every step sent
    to stdout (``emit``) as it happens."""
    torch.set_num_threads(1)
    model, base = build(name)
    texts = texts_of(name, base or model, length, count)
    settings, own = with_model_defaults(EstimatorSettings(), model)
    run = resolve(settings, model)
    # the Pareto diagnostics import arviz on their first call (2.5 to 5 s here): imported before the clock starts,
    # so that a cell's seconds are its statement's
    importlib.import_module("arviz")
    started = time.perf_counter()
    package = logging.getLogger("lm_latent_eval")
    package.setLevel(logging.INFO)
    package.propagate = False
    package.addHandler(LogLines(started))
    emit(
        {
            "event": "start",
            "estimator": run.settings.estimator,
            "reason": run.reason + own,
            "tokens": [model.tokenize(t).numel() for t in texts],
        }
    )
    store = StageLog(model, started)

    def statement():
        return estimate_corpus(run, texts, progress=False, store=store)

    rows = None
    if hasattr(model, "row_cache"):
        estimates, rows, _, seconds = Cost(model).run(statement)
    else:
        estimates = statement()
        seconds = time.perf_counter() - started
    corpus = corpus_estimate([estimates[t] for t in texts], keys=texts)
    lower, upper = corpus.perplexity_interval
    result = {
        "event": "result",
        "seconds": seconds,
        "estimator": corpus.estimator,
        "perplexity": corpus.perplexity,
        "two_sided": corpus.interval.two_sided,
        "lower": lower,
        "upper": upper,
        "why_one_sided": corpus.interval.reason,
        "bound": corpus.perplexity_upper_bound,
        "num_tokens": corpus.num_tokens,
        "network_rows": rows,
        "stages": max(len(e.stage_log_likelihoods or [0]) for e in estimates.values()),
    }
    if base is not None and getattr(base, "log_marginal", None) is not None:
        exact = sum(base.log_marginal(base.tokenize(t)) for t in texts)
        result["exact"] = math.exp(-exact / corpus.num_tokens)
    emit(result)


# ---------------------------------------------------------------------------------------------- one cell (parent)


def _read(stream, lines: queue.Queue) -> None:
    for line in stream:
        if line.startswith(MARK):
            lines.put(json.loads(line[len(MARK) :]))
    lines.put(None)


def measure(name: str, length: int, count: int, seconds: float, bar) -> dict:
    """One cell in a child process, stopped ``seconds`` after its model and texts are ready: every event it sent,
    whether it was stopped, and the error that ended it, if one did (``fold`` makes its record)."""
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--cell",
        f"{name}:{length}",
        "--texts",
        str(count),
    ]
    load = os.getloadavg()[0]
    # the package's log lines come on stdout (LogLines); stderr's last line names an error that ended the cell
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue = queue.Queue()
    reader = threading.Thread(target=_read, args=(child.stdout, lines), daemon=True)
    reader.start()
    tail: list[str] = []
    drain = threading.Thread(target=lambda: tail.extend(child.stderr.readlines()), daemon=True)
    drain.start()
    events, deadline, began, stopped = [], time.monotonic() + LOAD_SECONDS, None, False
    shown, shown_at = "", 0.0
    while True:
        try:
            event = lines.get(timeout=1.0)
        except queue.Empty:
            event = ""
        if event is None:
            break
        if event:
            events.append(event)
            if event["event"] == "start":
                began, deadline = time.monotonic(), time.monotonic() + seconds
        if time.monotonic() > deadline:
            child.kill()
            stopped = True
            break
        done = [e for e in events if e["event"] == "document"]
        stage = f"stage {done[-1]['stage'] + 1}" if done else "loading" if began is None else "stage 1"
        if stage != shown or time.monotonic() > shown_at + PROGRESS_SECONDS:
            spent = 0 if began is None else time.monotonic() - began
            bar.set_postfix_str(f"{name} T={length}: {stage}, {spent:.0f} of {seconds:.0f} s")
            shown, shown_at = stage, time.monotonic()
    child.wait()
    reader.join(timeout=5)
    drain.join(timeout=5)
    error = None
    if not stopped and not any(e["event"] == "result" for e in events):
        lines_ = [line.strip() for line in tail if line.strip()]
        error = lines_[-1] if lines_ else f"exit status {child.returncode}"
        if began is None and time.monotonic() > deadline:
            error = f"the model and its texts were not ready in {LOAD_SECONDS} s"
    return {
        "model": name,
        "length": length,
        "texts": count,
        "budget_seconds": seconds,
        "load_average": load,
        "events": events,
        "stopped": stopped,
        "error": error,
    }


COST_LINE = re.compile(
    r"the next (?P<stages>\d) stages? will draw at least (?P<draw>[0-9.e+]+) samples·tokens, "
    r"(?P<ratio>[0-9.e+]+) times stage (?P<after>\d+)'s"
    r"(?: [0-9.e+]+ \(about (?P<eta>[0-9.e+]+) (?P<unit>h|min|s) at the rate)?"
)
UNITS = {"h": 3600.0, "min": 60.0, "s": 1.0}


def fold(cell: dict) -> dict:
    """A cell's record from its child's events: what it drew stage by stage, its cost lines beside what the stages
    each spoke of drew and took, and its statement where it finished."""
    if cell.get("skipped"):
        return skipped(cell)
    name, length, count, seconds = cell["model"], cell["length"], cell["texts"], cell["budget_seconds"]
    events = cell["events"]
    start = next((e for e in events if e["event"] == "start"), {})
    result = next((e for e in events if e["event"] == "result"), None)
    documents = [e for e in events if e["event"] == "document"]
    stages = []
    for number in sorted({d["stage"] for d in documents}):
        these = [d for d in documents if d["stage"] == number]
        sampled = [d for d in these if d["sampled"]]
        stages.append(
            {
                "stage": number + 1,
                "documents": len(these),
                "complete": len(these) == count,
                "samples_mean": sum(d["samples"] for d in sampled) / len(sampled) if sampled else 0.0,
                "samples_max": max((d["samples"] for d in sampled), default=0),
                "samples_tokens": sum(d["samples"] * d["tokens"] for d in sampled),
                "exact": sum(d["exact"] for d in these),
                "rows": these[-1]["rows"],
                "ended_at": these[-1]["at"],
            }
        )
    lines, end = [], result["seconds"] if result else seconds
    for log in (e for e in events if e["event"] == "log"):
        said = COST_LINE.search(log["message"])
        line = {"level": log["level"], "message": log["message"], "at": log["at"]}
        if said:
            # the stages the line speaks of: the next 1 or 2 after stage ``after`` (labels counted from 1)
            after, count_ = int(said["after"]), int(said["stages"])
            scope = [s for s in stages if after < s["stage"] <= after + count_]
            done = bool(scope) and scope[-1]["complete"] and (result is not None or len(scope) == count_)
            line |= {
                "after_stage": after,
                "stages_said": count_,
                "draw_at_least": float(said["draw"]),
                "eta_seconds": float(said["eta"]) * UNITS[said["unit"]] if said["eta"] else None,
                # what those stages drew and took (to the end of the cell where they did not finish)
                "drew": sum(s["samples_tokens"] for s in scope),
                "took": (scope[-1]["ended_at"] if done else end) - log["at"],
                "done": done,
            }
        lines.append(line)
    tokens = start.get("tokens", [])
    record = {
        "model": name,
        "length": length,
        "texts": count,
        "tokens": tokens,
        "estimator": start.get("estimator"),
        "reason": start.get("reason"),
        "budget_seconds": seconds,
        "finished": result is not None,
        "stopped": cell["stopped"],
        "error": cell["error"],
        "load_average": cell["load_average"],
        "stages": stages,
        "log": lines,
        "result": result,
    }
    complete = [s for s in stages if s["complete"]]
    record["samples_per_document"] = complete[-1]["samples_mean"] if complete else None
    record["samples_max"] = complete[-1]["samples_max"] if complete else None
    record["exact_texts"] = complete[-1]["exact"] if complete else None
    record["samples_tokens"] = sum(s["samples_tokens"] for s in stages)
    total = sum(tokens) or None
    record["samples_tokens_per_token"] = record["samples_tokens"] / total if total else None
    rows = result["network_rows"] if result else (stages[-1]["rows"] if stages else None)
    record["rows_per_token"] = rows / total if rows is not None and total else None
    return record


# ---------------------------------------------------------------------------------------------- the tables


def figure(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "—"
    if value >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}" if value < 1 else f"{value:.{digits}f}".rstrip("0").rstrip(".")


def span(seconds: float) -> str:
    unit, scale = next(((u, d) for u, d in (("h", 3600), ("min", 60)) if seconds >= d), ("s", 1))
    return f"{seconds / scale:.2g} {unit}"


def said(line: dict) -> str:
    """A cost line's figures, → what the stages it spoke of drew and took."""
    eta = f", about {span(line['eta_seconds'])}" if line["eta_seconds"] is not None else ""
    scope = f"stage {line['after_stage'] + 1}" + (
        f"-{line['after_stage'] + 2}" if line["stages_said"] > 1 else ""
    )
    stopped = "" if line["done"] else " (not finished)"
    return (
        f"after stage {line['after_stage']}: ≥ {line['draw_at_least']:.2g}{eta} → {scope} drew "
        f"{line['drew']:.2g} in {span(line['took'])}{stopped}"
    )


def said_cell(record: dict) -> str:
    """The first cost line → what its stages drew and took; how many lines followed; the largest ratio of the
    seconds a line's stages took to the seconds it said."""
    lines = [line for line in record["log"] if "draw_at_least" in line]
    if not lines:
        return "none" if record["finished"] else "none yet"
    out = said(lines[0])
    if len(lines) > 1:
        out += f"; {len(lines) - 1} more"
    ratios = [line["took"] / line["eta_seconds"] for line in lines if line["eta_seconds"] and line["done"]]
    if ratios:
        out += f"; the worst line's stages took {max(ratios):.2g}× its estimate"
    return out


def row(record: dict) -> str:
    tokens = record["tokens"]
    # the model's own count (the RNNG's adds </s>); a cell not run: the length asked for
    shown = f"{min(tokens)}-{max(tokens)}" if tokens else str(record["length"])
    if tokens and min(tokens) == max(tokens):
        shown = str(tokens[0])
    result = record["result"]
    if result:
        if result["two_sided"]:
            statement = f"{result['perplexity']:.3f} in [{result['lower']:.3f}, {result['upper']:.3f}]"
        else:
            statement = f"≤ {result['bound']:.3f} (one-sided)"
        bound = f"{result['bound']:.3f}"
        exact = "—"
        if "exact" in result:
            holds = result["lower"] <= result["exact"] <= result["upper"] if result["two_sided"] else None
            said = {True: ", covered", False: ", NOT covered", None: ""}[holds]
            held = "" if result["exact"] <= result["bound"] * (1 + 1e-12) else ", bound FAILS"
            exact = f"{result['exact']:.3f}{said}{held}"
        two_sided = "yes" if result["two_sided"] else "no"
        seconds = f"{result['seconds']:.2g}" if result["seconds"] < 10 else f"{result['seconds']:.0f}"
    else:
        why = record["error"] or f"did not finish in {record['budget_seconds']:.0f} s"
        statement, bound, exact, two_sided, seconds = why, "—", "—", "—", f"> {record['budget_seconds']:.0f}"
    stages = record["stages"]
    reached = f"{len(stages)}" if record["finished"] else (
        f"{sum(s['complete'] for s in stages)} finished" + (
            f", stage {stages[-1]['stage']} {stages[-1]['documents']}/{record['texts']} texts"
            if stages and not stages[-1]["complete"] else ""
        )
    )  # fmt: skip
    first = next((s for s in stages if s["complete"]), None)
    stage_one = "—" if first is None else f"{first['ended_at']:.1f}"
    if first is None and record["stopped"]:
        stage_one = f"> {record['budget_seconds']:.0f}"
    exact_texts = "—" if record["exact_texts"] is None else f"{record['exact_texts']} of {record['texts']}"
    particles = "—"
    if record["estimator"] == "exact":
        particles = "none (exact)"
    elif record["exact_texts"] == record["texts"]:
        particles = "none (every text computed exactly)"
    elif record["samples_per_document"] is not None:
        particles = f"{figure(record['samples_per_document'])} (max {record['samples_max']:,})"
    per_token = figure(record["samples_tokens_per_token"]) if record["stages"] else "—"
    if record["rows_per_token"] is not None:
        per_token += f" ({figure(record['rows_per_token'])} rows)"
    return (
        f"| {record['model']} | {shown} | {record['estimator'] or '—'} | {statement} | {two_sided} | {bound} | "
        f"{exact} | {particles} | {per_token} | {exact_texts} | {reached} | "
        f"{stage_one} | {seconds} | {said_cell(record)} |"
    )


def cost_of(record: dict) -> float | None:
    """What a cell drew: network rows (the masked LM), else particles·tokens over every stage; None where it did
    not finish, or drew nothing (exact)."""
    if not record["finished"]:
        return None
    if record["rows_per_token"] is not None:
        return record["result"]["network_rows"]
    return record["samples_tokens"] or None


def stage_one(record: dict) -> float | None:
    """The seconds stage 1 took (``num_samples`` per text at every length), None where it did not end."""
    first = next((s for s in record["stages"] if s["complete"]), None)
    return None if first is None else first["ended_at"]


def growth(records: list[dict]) -> str:
    """How one model's cost grows with T, as the exponent b of cost ∝ T^b between consecutive lengths, by three
    measures: what the default drew (network rows, else particles·tokens over every stage), the seconds of stage 1
    (the same ``num_samples`` per text at every length: the cost of one particle·token against T) and the seconds of
    the whole statement. A cell stopped by its budget bounds its seconds from below. Seconds under
    ``TIMED_SECONDS`` give no exponent (start-up and noise)."""
    steps, faster = [], False

    def exponent(label: str, before: float, after: float, scale: float, bound: bool = False) -> str:
        nonlocal faster
        value = math.log(after / before) / scale
        faster |= value > LINEAR_EXPONENT
        return f"{label} {'≥ ' * bound}T^{value:.1f}"

    for a, b in itertools.pairwise(records):
        if not b["stages"] and not b["stopped"]:
            break
        scale, parts = math.log(b["length"] / a["length"]), []
        if a["finished"] and b["finished"] and cost_of(a) and cost_of(b):
            parts.append(exponent("drawn", cost_of(a), cost_of(b), scale))
        first_a, first_b = stage_one(a), stage_one(b)
        if first_a is not None and first_a >= TIMED_SECONDS:
            if first_b is not None:
                parts.append(exponent("stage 1", first_a, first_b, scale))
            elif b["stopped"]:
                parts.append(exponent("stage 1", first_a, b["budget_seconds"], scale, bound=True))
        if a["finished"] and a["result"]["seconds"] >= TIMED_SECONDS:
            if b["finished"]:
                parts.append(exponent("seconds", a["result"]["seconds"], b["result"]["seconds"], scale))
            elif b["stopped"]:
                parts.append(
                    exponent("seconds", a["result"]["seconds"], b["budget_seconds"], scale, bound=True)
                )
        if parts:
            steps.append(f"{a['length']}→{b['length']}: " + ", ".join(parts))
    if not steps:
        seconds = [r["result"]["seconds"] for r in records if r["finished"]]
        if not seconds:
            return "—"
        return f"every cell took under {TIMED_SECONDS:g} s ({min(seconds):.2g} to {max(seconds):.2g} s)"
    verdict = "faster than linear" if faster else "about linear or slower"
    return f"**{verdict}**: " + "; ".join(steps)


def markdown(run: dict) -> str:
    """The output: the header (command, machine at the start and the end), the table, each model's growth with T,
    and every line the package logged."""
    records = [fold(cell) for cell in run["cells"]]
    loads = [r["load_average"] for r in records if r["load_average"] is not None]
    by_model: dict[str, list[dict]] = {}
    for record in records:
        by_model.setdefault(record["model"], []).append(record)
    lines = [
        "# Every model's cost against text length (issue 52, item 5)",
        "",
        (
            f"`python bench/length_scaling.py {' '.join(run['command'])}`".replace(" `", "`")
            + f": the default statement (no estimator setting: the model's `default_settings`, then `auto`, as the "
            f"lm-eval backends resolve them) on {run['texts']} texts per length, each (model, T) cell in its own "
            f"process, stopped {run['seconds']:.0f} s after its model and texts were ready. One torch thread per "
            "cell, one cell at a time, on a machine shared with other work: the seconds are upper bounds. "
            f"Machine at the start: {run['started']}; at the end: {run['ended'] or 'not recorded (interrupted)'}; 1-minute load average at the cells' "
            f"starts {min(loads, default=math.nan):.1f} to {max(loads, default=math.nan):.1f}."
        ),
        "",
        (
            "T: tokens per text as the model counts them. Statement: the perplexity per token with its two-sided 95% "
            "interval, or the certified bound alone where no two-sided interval is honest. Exact: the true "
            "perplexity where the model has a cheap exact marginal (the HMM's forward algorithm, the Gaussian's "
            "quadrature), and whether the statement held it. Particles per document: the mean over the sampled texts "
            "at the last stage finished (its largest in brackets; 25,600 is the default max_samples). "
            "Particles·tokens per token: Σ over every stage and sampled text of K_n T_n, over the corpus's tokens "
            "(the masked LM: network rows per token in brackets, from an empty row cache). Stage 1 s: when "
            "stage 1 ended, after which the precision target's cost line is logged. Cost line: the first "
            '"precision target: the next N stages will draw at least X samples·tokens ..." with its time estimate, '
            "→ what the stages after it then drew (samples·tokens) and took."
        ),
        "",
        (
            "| model | T | estimator | statement (95%) | two-sided | certified bound | exact | particles per "
            "document | particles·tokens per token | texts computed exactly | stages | stage 1 s | seconds | "
            "cost line → spent |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        *(row(r) for r in records),
        "",
        (
            "How each model's cost grows with T: the exponent b of cost ∝ T^b between consecutive lengths (linear is "
            "b = 1) by three measures: drawn, what the default drew (network rows for the masked LM, else "
            "particles·tokens over every stage); stage 1, its seconds (100 particles per text at every length: the "
            "cost of one particle·token against T); seconds, the whole statement's. A cell stopped by its budget "
            f'gives a lower bound (≥); seconds under {TIMED_SECONDS:g} s give none. "Faster than linear" where '
            f"some b > {LINEAR_EXPONENT}:"
        ),
        "",
        "| model | resolved (auto, the model's default_settings) | growth with T |",
        "|---|---|---|",
        *(
            f"| {name} | {next((r['reason'] for r in rs if r['reason']), '—')} | {growth(rs)} |"
            for name, rs in by_model.items()
        ),
        "",
        "Why a statement is one-sided (the interval's reason, per cell):",
        "",
        *(
            f"- {r['model']}, T = {r['length']}: {r['result']['why_one_sided']}"
            for r in records
            if r["finished"] and not r["result"]["two_sided"]
        ),
        "",
        (
            "Every line the package logged, per cell (the precision target's cost lines and its warnings), with "
            "the seconds since the cell's start:"
        ),
        "",
    ]
    for record in records:
        for line in record["log"]:
            then = f" [{said(line)}]" if "draw_at_least" in line else ""
            lines.append(
                f"- {record['model']}, T = {record['length']}, at {line['at']:.1f} s: {line['message']}{then}"
            )
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------- command line


def positive_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated positive integers, got {text!r}"
        ) from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers, got {text!r}")
    return values


def model_list(text: str) -> list[str]:
    names = [v.strip() for v in text.split(",") if v.strip()]
    unknown = [n for n in names if n not in (*BUNDLED, *USER)]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown model {unknown or text!r}: use some of {', '.join((*BUNDLED, *USER))}"
        )
    return names


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=model_list, default=[*BUNDLED, *USER], help="comma-separated")
    parser.add_argument(
        "--lengths",
        type=positive_list,
        help=f"tokens per text, comma-separated (default {','.join(map(str, LENGTHS))}; the masked LM "
        f"{','.join(map(str, MASKED_LENGTHS))})",
    )
    parser.add_argument("--texts", type=int, default=TEXTS_PER_LENGTH, help="texts per length")
    parser.add_argument("--seconds", type=float, default=SECONDS, help="time budget per (model, length) cell")
    parser.add_argument(
        "--output", type=Path, default=OUTPUT, help="the table (.md); the records beside it (.json)"
    )
    parser.add_argument(
        "--run-past-timeouts", action="store_true", help="run a model's longer cells after one did not finish"
    )
    parser.add_argument(
        "--render",
        type=Path,
        metavar="JSON",
        help="write the table again from a run's .json, running nothing",
    )
    parser.add_argument("--cell", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.texts < 1:
        parser.error(f"--texts must be at least 1, got {args.texts}")
    if args.seconds <= 0:
        parser.error(f"--seconds must be positive, got {args.seconds:g}")
    if args.cell:
        name, _, length = args.cell.partition(":")
        run_cell(name, int(length), args.texts)
        return
    if args.lengths and "masked" in args.models and max(args.lengths) > max(MASKED_LENGTHS):
        parser.error(
            f"the masked LM reads at most {max(MASKED_LENGTHS)} positions: --lengths {max(args.lengths)}"
        )
    if args.render:
        if not args.render.is_file():
            parser.error(f"--render: no such file {args.render}")
        run = json.loads(args.render.read_text(encoding="utf-8"))
        write(run, args.output if args.output != OUTPUT else args.render.with_suffix(".md"))
        return
    cells = [(name, length) for name in args.models for length in (args.lengths or lengths_of(name))]
    run = {
        "command": sys.argv[1:] if argv is None else argv,
        "texts": args.texts,
        "seconds": args.seconds,
        "started": machine(),
        "ended": None,
        "cells": [],
    }
    gave_up = set()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    with tqdm(cells, desc="length scaling", unit="cell") as bar:
        for name, length in bar:
            if name in gave_up:
                cell = {"model": name, "length": length, "texts": args.texts, "budget_seconds": args.seconds}
                run["cells"].append(cell | {"skipped": True})
                continue
            cell = measure(name, length, args.texts, args.seconds, bar)
            run["cells"].append(cell)
            if cell["stopped"] and not args.run_past_timeouts:
                gave_up.add(name)
            args.output.with_suffix(".json").write_text(json.dumps(run, indent=1) + "\n", encoding="utf-8")
    run["ended"] = machine()
    args.output.with_suffix(".json").write_text(json.dumps(run, indent=1) + "\n", encoding="utf-8")
    print(write(run, args.output))


def write(run: dict, path: Path) -> str:
    text = markdown(run)
    path.write_text(text, encoding="utf-8")
    return text


def skipped(cell: dict) -> dict:
    """The record of a cell not started: a shorter one of the same model did not finish in its budget."""
    return {
        "model": cell["model"],
        "length": cell["length"],
        "texts": cell["texts"],
        "tokens": [],
        "estimator": None,
        "reason": None,
        "budget_seconds": cell["budget_seconds"],
        "finished": False,
        "stopped": False,
        "error": f"not run: a shorter text did not finish in {cell['budget_seconds']:.0f} s",
        "load_average": None,
        "stages": [],
        "log": [],
        "result": None,
        "samples_per_document": None,
        "samples_max": None,
        "exact_texts": None,
        "samples_tokens": 0,
        "samples_tokens_per_token": None,
        "rows_per_token": None,
    }


if __name__ == "__main__":
    main()
