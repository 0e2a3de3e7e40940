"""``lm-latent-eval report <lm-eval output dir>``: a card (Markdown, JSON, and a convergence PNG for IS runs) for every
run and task under the folder."""

from __future__ import annotations

import argparse
from pathlib import Path

from ...cli import level
from ...estimators.settings import DEFAULT_LEVEL
from ..json_files import write_json
from ..lm_eval_output import read_runs
from .compute import build_card
from .render import card_markdown, save_plot


def write_cards(output_dir: str | Path, out: str | Path | None = None, **kwargs) -> list[list[Path]]:
    """A card (.md, .json, and a .png for IS runs) for every run and task under ``output_dir``; returns the files
    written, one list per card, the Markdown file first."""
    runs = read_runs(output_dir)
    out = Path(out) if out is not None else Path(output_dir) / "cards"
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for run in runs:
        card = build_card(run, runs, **kwargs)
        stem = f"{run.results_file.parent.name}__{run.task}__{run.results_file.stem.removeprefix('results_')}"
        files = [out / f"{stem}.md", out / f"{stem}.json"]
        if save_plot(card, out / f"{stem}.png"):
            files.append(out / f"{stem}.png")
        write_json(files[1], card)
        files[0].write_text(card_markdown(card, files[2].name if len(files) > 2 else None))
        written.append(files)
    return written


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "output_dir", help="lm-eval --output_path of runs made with --log_samples (or one results_*.json)"
    )
    parser.add_argument("--output", default=None, help="folder for the cards (default: <output_dir>/cards)")
    parser.add_argument("--beam-size", type=int, default=None, help="also compute the beam bound with this k")
    parser.add_argument(
        "--level", type=level, default=DEFAULT_LEVEL, help="level of the intervals and certified bounds"
    )
    parser.add_argument("--device", default="cpu", help="for --beam-size")


def run(args: argparse.Namespace) -> int:
    for files in write_cards(
        args.output_dir, args.output, beam_size=args.beam_size, level=args.level, device=args.device
    ):
        print(f"wrote {files[0]} (+ {', '.join(f.suffix for f in files[1:])})")
    return 0
