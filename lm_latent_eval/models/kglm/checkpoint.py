"""KGLM checkpoints: our Hub layout read and written, and the choice between it and an original AllenNLP archive.

Our layout (``KGLM.save_pretrained`` / ``KGLM.from_pretrained``, a folder or a Hub id): ``config.json`` (constructor
arguments, the word ``vocab`` included; written by huggingface_hub's mixin), ``model.safetensors`` (p's and q's
weights, q's under ``proposal.``) and ``knowledge_graph.json`` (``KnowledgeGraph.to_json``: entities, relations,
edges, aliases), read from the checkpoint unless ``knowledge_graph=`` (a KnowledgeGraph, a dict or a JSON path) is
given. A path ending in ``.tar.gz`` / ``.tgz`` is an original ``kglm`` archive, read by ``archive.py``.
This module never imports the model (the class is passed in): no import cycle.
"""

from __future__ import annotations

import os
from pathlib import Path

import safetensors.torch
from huggingface_hub import hf_hub_download

from ...errors import InputError, MissingFileError
from .archive import load_original_kglm
from .graph import KnowledgeGraph

GRAPH_FILE = "knowledge_graph.json"
WEIGHTS_FILE = "model.safetensors"
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz")


def load_graph(source: KnowledgeGraph | dict | str | Path | None) -> KnowledgeGraph:
    """A KnowledgeGraph from a KnowledgeGraph, a ``to_dict`` dict, a JSON path or None (empty graph)."""
    if source is None:
        return KnowledgeGraph()
    if isinstance(source, KnowledgeGraph):
        return source
    if isinstance(source, dict):
        return KnowledgeGraph.from_dict(source)
    if isinstance(source, (str, Path)):
        return KnowledgeGraph.from_json(source)
    raise TypeError(
        f"knowledge_graph must be a KnowledgeGraph, dict or JSON path, got {type(source).__name__}"
    )


def is_original_archive(name: str) -> bool:
    """True for the path of an original AllenNLP archive (``model.tar.gz``), read by ``archive.load_original_kglm``."""
    return str(name).endswith(ARCHIVE_SUFFIXES)


def load_original(
    model_class: type,
    name: str,
    knowledge_graph=None,
    alias_database=None,
    proposal_archive=None,
    options: dict | None = None,
):
    """``model_class`` (KGLM) from an original archive, with its graph, alias database and ``kglm-disc`` q."""
    if options:
        raise InputError(f"{name}: options {sorted(options)} do not apply to an original KGLM archive")
    return load_original_kglm(
        name,
        knowledge_graph=knowledge_graph,
        alias_database=alias_database,
        proposal_archive=proposal_archive,
        model_class=model_class,
    )


def checkpoint_options(
    name: str, knowledge_graph=None, alias_database=None, proposal_archive=None, options: dict | None = None
) -> dict:
    """The keyword arguments for the Hub mixin's ``from_pretrained`` of our checkpoint ``name``: ``options`` plus
    ``knowledge_graph`` when given; the archive-only options are refused."""
    if alias_database is not None or proposal_archive is not None:
        raise InputError(
            f"{name}: alias_database / proposal_archive only apply to an original AllenNLP archive "
            "(model.tar.gz); a lm-latent-eval checkpoint already holds the aliases and q"
        )
    options = dict(options or {})
    if knowledge_graph is not None:
        options["knowledge_graph"] = knowledge_graph
    return options


def checkpoint_files(model_id: str, need_graph: bool, **download) -> tuple[str, str | None]:
    """(path of model.safetensors, path of knowledge_graph.json or None) of a checkpoint folder or Hub id
    (``download``: hf_hub_download's revision, cache_dir, force_download, token, local_files_only)."""
    if os.path.isdir(model_id):
        weights = os.path.join(model_id, WEIGHTS_FILE)
        if not os.path.isfile(weights):
            raise MissingFileError(f"{model_id}: no {WEIGHTS_FILE} (not a KGLM checkpoint folder)")
        return weights, os.path.join(model_id, GRAPH_FILE)
    weights = hf_hub_download(model_id, WEIGHTS_FILE, **download)
    return weights, hf_hub_download(model_id, GRAPH_FILE, **download) if need_graph else None


def load_checkpoint(
    model_class: type,
    model_id: str,
    map_location: str = "cpu",
    strict: bool = True,
    download: dict | None = None,
    **model_kwargs,
):
    """``model_class(**config, knowledge_graph=...)`` with every weight of model.safetensors, in eval mode; the graph
    is the checkpoint's knowledge_graph.json unless ``model_kwargs`` hold ``knowledge_graph``."""
    weights, graph_file = checkpoint_files(
        model_id, "knowledge_graph" not in model_kwargs, **(download or {})
    )
    if model_kwargs.get("knowledge_graph") is None:
        if graph_file is None or not os.path.isfile(graph_file):
            raise MissingFileError(
                f"{model_id}: no {GRAPH_FILE}; pass knowledge_graph=<KnowledgeGraph or JSON path>"
            )
        model_kwargs["knowledge_graph"] = graph_file
    model = model_class(**model_kwargs)
    safetensors.torch.load_model(model, weights, strict=strict, device=map_location)
    model.eval()
    return model
