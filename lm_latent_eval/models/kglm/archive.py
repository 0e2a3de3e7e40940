"""Import an original AllenNLP KGLM archive (``model.tar.gz``: config.json, weights.th, vocabulary/) as a ``KGLM``.

The archive's vocabulary fixes the id spaces: ``tokens`` (word embedding rows), ``entity_ids`` (entity embedding
rows), ``raw_entity_ids`` (entities whose aliases can be copied and that knowledge-graph edges may reach) and
``relations``. The original looks up a parent's edges by its ``entity_ids`` name and maps each edge's tail through
``raw_entity_ids`` (unknown tails become ``@@UNKNOWN@@``) and its relation through ``relations``; the graph built
here has exactly those edges, and every entity maps to the embedding row of its ``entity_ids`` name
(``T…``/``V…`` ids share the ``@@DATE@@``/``@@QUANTITY@@`` rows, others the ``@@UNKNOWN@@`` row).

Every tensor of ``weights.th`` is mapped onto a parameter of the model (``PARAMETER_MAP``); a tensor left over, a
parameter left unset, or a shape that disagrees is an error. ``weights.th`` is read with
``torch.load(weights_only=True)``, which builds tensors and containers only.

``PARAMETER_MAP``, the mapping of an original ``kglm`` archive's ``weights.th`` onto ``KGLM``:

    _token_embedder.weight                      -> token_embedding.weight   (row i = tokens vocab index i,
                                                   0 = padding; build ``vocab`` as ["@@PADDING@@"] + tokens.txt)
    _entity_embedder.weight                     -> entity_embedding.weight  (rows = entity_ids namespace;
                                                   pass entity_rows / num_entity_rows, see GraphTables)
    _relation_embedder.weight                   -> relation_embedding.weight (relation_rows / num_relation_rows)
    _rnn._rnns.{i}.module.weight_ih_l0          -> encoder.layers.{i}.weight_ih_l0
    _rnn._rnns.{i}.weight_hh_l0_raw             -> encoder.layers.{i}.weight_hh_l0   (the raw, undropped W_hh)
    _rnn._rnns.{i}.module.weight_hh_l0          -> (not used: a dropped copy of the raw weight)
    _rnn._rnns.{i}.module.bias_{ih,hh}_l0       -> encoder.layers.{i}.bias_{ih,hh}_l0
    _fc_mention_type.{weight,bias}              -> mention_type.{weight,bias}
    _fc_new_entity.bias                         -> new_entity_bias   (weight is tied to entity_embedding; an
                                                   archive with use_shortlist=true has none: new_entity_bias=False)
    _fc_condense.{weight,bias}                  -> condense.{weight,bias}
    _fc_generate.{weight,bias}                  -> generate.{weight,bias}   (weight tied to token_embedding)
    _fc_copy.{weight,bias}                      -> copy.{weight,bias}
    _alias_encoder._module.{w,b}_{ih,hh}_l0     -> alias_encoder.{w,b}_{ih,hh}_l0
    a ``kglm-disc`` archive: the same names     -> proposal.<same target names> (no word head, no alias encoder)

Sizes: token_dim = D_tok (original 400), entity_dim = D_ent (256), hidden_size (1150), num_layers (3); the last
LSTM layer has D_tok + 2·D_ent units.
"""

from __future__ import annotations

import io
import json
import math
import re
import tarfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from .graph import KnowledgeGraph
from .linked_wikitext import normalize_entity_id, tokenize_alias
from .pickles import MAX_ALIAS_TOKENS, MAX_ALIASES, load_alias_pickle, load_knowledge_graph_pickle
from .vocabulary import OOV_TOKEN, PADDING_TOKEN, Vocabulary

GENERATIVE_TYPE = "kglm"
PROPOSAL_TYPE = "kglm-disc"

# original parameter name pattern -> our parameter name (``{i}`` = encoder layer); the generative model's names.
PARAMETER_MAP = {
    "_token_embedder.weight": "token_embedding.weight",
    "_entity_embedder.weight": "entity_embedding.weight",
    "_relation_embedder.weight": "relation_embedding.weight",
    "_rnn._rnns.{i}.module.weight_ih_l0": "encoder.layers.{i}.weight_ih_l0",
    "_rnn._rnns.{i}.weight_hh_l0_raw": "encoder.layers.{i}.weight_hh_l0",
    "_rnn._rnns.{i}.module.bias_ih_l0": "encoder.layers.{i}.bias_ih_l0",
    "_rnn._rnns.{i}.module.bias_hh_l0": "encoder.layers.{i}.bias_hh_l0",
    "_fc_mention_type.weight": "mention_type.weight",
    "_fc_mention_type.bias": "mention_type.bias",
    # tied to the entity embeddings (tie_weights=true)
    "_fc_new_entity.weight": "entity_embedding.weight",
    "_fc_new_entity.bias": "new_entity_bias",
    "_fc_condense.weight": "condense.weight",
    "_fc_condense.bias": "condense.bias",
    "_fc_generate.weight": "generate.weight",
    "_fc_generate.bias": "generate.bias",
    "_fc_copy.weight": "copy.weight",
    "_fc_copy.bias": "copy.bias",
    "_alias_encoder._module.weight_ih_l0": "alias_encoder.weight_ih_l0",
    "_alias_encoder._module.weight_hh_l0": "alias_encoder.weight_hh_l0",
    "_alias_encoder._module.bias_ih_l0": "alias_encoder.bias_ih_l0",
    "_alias_encoder._module.bias_hh_l0": "alias_encoder.bias_hh_l0",
}
# the weight-dropped LSTM also stores W_hh after dropout; in a saved (eval-mode) model it equals the raw weight
DROPPED_COPY = "_rnn._rnns.{i}.module.weight_hh_l0"


@dataclass
class OriginalArchive:
    """The parts of an AllenNLP archive: parsed config.json, the state dict of weights.th, the vocabulary."""

    path: str
    config: dict
    state_dict: dict[str, torch.Tensor]
    vocabulary: Vocabulary

    @property
    def model_type(self) -> str:
        return str(self.config.get("model", {}).get("type", "<missing>"))

    @property
    def model_config(self) -> dict:
        return self.config.get("model", {})


def read_archive(path: str | Path) -> OriginalArchive:
    """Read config.json, weights.th (tensors only) and vocabulary/*.txt from an AllenNLP ``model.tar.gz``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"AllenNLP archive not found: {path}")
    try:
        tar = tarfile.open(path, "r:*")  # noqa: SIM115 - closed by the with block below, outside this try
    except tarfile.TarError as err:
        raise ValueError(f"{path} is not a (gzipped) tar archive: {err}") from err
    with tar:
        files = {}
        for member in tar.getmembers():
            if member.isfile():
                name = member.name.removeprefix("./")
                files[name] = tar.extractfile(member).read()
    for needed in ("config.json", "weights.th"):
        if needed not in files:
            raise ValueError(
                f"{path} is not an AllenNLP model archive: {needed} is missing (has {sorted(files)[:8]})"
            )
    config = json.loads(files["config.json"].decode("utf-8"))
    try:
        state = torch.load(io.BytesIO(files["weights.th"]), map_location="cpu", weights_only=True)
    except Exception as err:
        # any failure of the restricted loader means: not plain tensors
        raise ValueError(f"{path}: weights.th is not a plain state dict of tensors ({err})") from err
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"{path}: weights.th does not hold a state dict of tensors")
    vocab_files = {
        n[len("vocabulary/") : -4]: b.decode("utf-8")
        for n, b in files.items()
        if n.startswith("vocabulary/") and n.endswith(".txt")
    }
    non_padded = vocab_files.pop("non_padded_namespaces", None)
    if non_padded is None:
        raise ValueError(f"{path}: vocabulary/non_padded_namespaces.txt is missing")
    vocabulary = Vocabulary.from_texts(non_padded, vocab_files, where=f"{path}:vocabulary")
    return OriginalArchive(str(path), config, dict(state), vocabulary)


def check_model_type(archive: OriginalArchive, expected: str) -> None:
    """Raise a clear error unless the archive holds a model of type ``expected``."""
    if archive.model_type != expected:
        raise ValueError(
            f"{archive.path} holds an AllenNLP model of type {archive.model_type!r}; expected a {expected!r} archive "
            f"(the original KGLM code base: generative '{GENERATIVE_TYPE}', proposal '{PROPOSAL_TYPE}')"
        )


def archive_graph(
    vocabulary: Vocabulary, edges: dict[str, list[tuple[str, str]]], aliases: dict[str, list[list[str]]]
) -> tuple[KnowledgeGraph, list[int], list[int]]:
    """The graph the original model sees, with (entity_rows, relation_rows) into its embedding tables."""
    for ns in ("tokens", "entity_ids", "raw_entity_ids", "relations"):
        if ns not in vocabulary:
            raise ValueError(f"archive vocabulary lacks the {ns!r} namespace (not a KGLM archive?)")
    # row owners first: name of row r is entity r - 1
    entity_names = vocabulary.tokens["entity_ids"][1:]
    raw_names = [n for n in vocabulary.tokens["raw_entity_ids"][1:]]
    raw_known = set(raw_names)

    def tail_name(raw: str) -> str:
        return raw if raw in raw_known else OOV_TOKEN

    kept_edges = {}
    for head in entity_names:
        out = edges.get(head)
        if out:
            kept_edges[head] = [(rel, tail_name(tail)) for rel, tail in out]
    kept_aliases = {name: forms for name, forms in aliases.items() if name in raw_known and forms}
    relation_names = vocabulary.tokens["relations"][1:]
    graph = KnowledgeGraph.from_dicts(
        edges=kept_edges, aliases=kept_aliases, entities=entity_names + raw_names, relations=relation_names
    )
    entity_rows = [vocabulary.index(normalize_entity_id(n) or n, "entity_ids") for n in graph.entities]
    relation_rows = [vocabulary.index(r, "relations") for r in graph.relations]
    return graph, entity_rows, relation_rows


def _layer_count(state: dict, prefix: str) -> int:
    layers = {
        int(m.group(1)) for k in state for m in [re.match(re.escape(prefix) + r"\._rnns\.(\d+)\.", k)] if m
    }
    return max(layers) + 1 if layers else 0


def _expand(pattern: str, num_layers: int) -> list[str]:
    return [pattern.format(i=i) for i in range(num_layers)] if "{i}" in pattern else [pattern]


def map_state_dict(
    state: dict[str, torch.Tensor], num_layers: int, prefix: str = ""
) -> dict[str, torch.Tensor]:
    """Original tensors -> {our name: tensor}; raises if any original tensor has no destination."""
    mapped: dict[str, torch.Tensor] = {}
    consumed: set[str] = set()
    for src_pattern, dst_pattern in PARAMETER_MAP.items():
        for src, dst in zip(_expand(src_pattern, num_layers), _expand(dst_pattern, num_layers)):
            if src not in state:
                continue
            consumed.add(src)
            tensor = state[src]
            if prefix + dst in mapped and not torch.equal(mapped[prefix + dst], tensor):
                raise ValueError(f"{src} should be tied to {dst} but holds different values")
            mapped[prefix + dst] = tensor
    for src in _expand(DROPPED_COPY, num_layers):
        if src in state:
            consumed.add(src)
            raw = state[src.replace("module.weight_hh_l0", "weight_hh_l0_raw")]
            if not torch.equal(state[src], raw):
                warnings.warn(
                    f"{src} differs from the raw weight (a dropped copy saved in training mode); "
                    "the raw weight is used, as the original does in evaluation",
                    stacklevel=3,
                )
    left = sorted(set(state) - consumed)
    if left:
        raise ValueError(f"original parameters with no counterpart in lm-latent-eval's KGLM: {left}")
    return mapped


def _edges_and_aliases(
    where: Path, knowledge_graph: str | Path, alias_database: str | Path | None
) -> tuple[dict[str, list[tuple[str, str]]], dict[str, list[list[str]]]]:
    """(head name -> [(relation name, tail name)], entity name -> alias token lists) from the original
    ``knowledge_graph.pkl`` or our JSON graph, with the aliases of ``alias_database`` (``alias.pkl``) when given."""
    kg_path = Path(knowledge_graph)
    if kg_path.suffix == ".json":
        source = KnowledgeGraph.from_json(kg_path)
        edges = {
            source.entities[h]: [(source.relations[r], source.entities[t]) for r, t in out]
            for h, out in source.edges.items()
        }
        aliases = {source.entities[e]: forms for e, forms in source.aliases.items()}
    else:
        edges, aliases = load_knowledge_graph_pickle(kg_path), {}
    if alias_database is not None:
        aliases = {
            e: [tokenize_alias(a)[:MAX_ALIAS_TOKENS] for a in names[:MAX_ALIASES]]
            for e, names in load_alias_pickle(alias_database).items()
        }
    elif not aliases:
        warnings.warn(
            f"{where}: no alias database given (alias_database=<alias.pkl>): the model cannot copy",
            stacklevel=3,
        )
    return edges, aliases


def load_original_kglm(
    archive: str | Path,
    knowledge_graph: str | Path | None = None,
    alias_database: str | Path | None = None,
    proposal_archive: str | Path | None = None,
    *,
    model_class: type,
    **_ignored,
):
    """A ``model_class`` (``KGLM``) with every weight of an original ``kglm`` archive (and q from a ``kglm-disc`` one).

    Called by ``KGLM.from_pretrained`` for ``.tar.gz`` paths (this module never imports the model: no import cycle).

    ``knowledge_graph``: the original ``knowledge_graph.pkl`` or our JSON graph (whose aliases are then used unless
    ``alias_database`` — the original ``alias.pkl`` — is given). Without a proposal archive, q starts as a copy of
    p's encoder and latent heads (with ``peek=False`` it is then exactly p's prior over z).
    """
    arch = read_archive(archive)
    check_model_type(arch, GENERATIVE_TYPE)
    cfg, state, vocab = arch.model_config, arch.state_dict, arch.vocabulary
    if knowledge_graph is None:
        kg_hint = cfg.get("knowledge_graph_path", "knowledge_graph.pkl")
        raise ValueError(
            f"{arch.path}: pass knowledge_graph=<path to the original {Path(kg_hint).name} or our "
            "JSON graph> (and alias_database=<alias.pkl>); the archive does not contain them"
        )
    edges, aliases = _edges_and_aliases(arch.path, knowledge_graph, alias_database)
    graph, entity_rows, relation_rows = archive_graph(vocab, edges, aliases)

    num_layers = _layer_count(state, "_rnn")
    if num_layers == 0 or "_token_embedder.weight" not in state:
        raise ValueError(f"{arch.path}: weights.th lacks the KGLM encoder / embeddings")
    token_dim = state["_token_embedder.weight"].shape[1]
    entity_dim = state["_entity_embedder.weight"].shape[1]
    hidden_size = (
        state["_rnn._rnns.0.weight_hh_l0_raw"].shape[1] if num_layers > 1 else int(cfg.get("hidden_size", 1))
    )
    use_shortlist = bool(cfg.get("use_shortlist", False))
    if use_shortlist:
        warnings.warn(
            f"{arch.path} was trained with use_shortlist=true (new entities chosen among those annotated "
            "in the document); lm-latent-eval scores new entities over every entity (tied embeddings, no "
            "bias), since a shortlist taken from gold annotations is not available from text",
            stacklevel=2,
        )
    unk_penalty = (
        math.log(vocab.size("tokens_unk")) if "tokens_unk" in vocab and vocab.size("tokens_unk") else 0.0
    )
    tokens = vocab.tokens["tokens"]
    if tokens[0] != PADDING_TOKEN:
        raise ValueError(f"{arch.path}: the tokens namespace is not padded")
    model = model_class(
        tokens,
        graph,
        token_dim=token_dim,
        entity_dim=entity_dim,
        hidden_size=hidden_size,
        num_layers=num_layers,
        cutoff=int(cfg.get("cutoff", 30)),
        tie_weights=bool(cfg.get("tie_weights", False)),
        new_entity_bias="_fc_new_entity.bias" in state,
        unk_penalty=unk_penalty,
        entity_rows=entity_rows,
        relation_rows=relation_rows,
        num_entity_rows=vocab.size("entity_ids"),
        num_relation_rows=vocab.size("relations"),
    )
    if "_fc_new_entity.weight" in state and not bool(cfg.get("tie_weights", False)):
        raise ValueError(
            f"{arch.path}: untied new-entity weights (tie_weights=false, use_shortlist=false) are not "
            "supported: lm-latent-eval's new-entity head is tied to the entity embeddings"
        )
    mapped = map_state_dict(state, num_layers)
    if proposal_archive is not None:
        disc = read_archive(proposal_archive)
        check_model_type(disc, PROPOSAL_TYPE)
        mapped.update(
            map_state_dict(disc.state_dict, _layer_count(disc.state_dict, "_rnn"), prefix="proposal.")
        )
    _assign(model, mapped, arch.path, with_proposal=proposal_archive is not None)
    if proposal_archive is None:
        model.proposal.copy_from_generative(model)
        warnings.warn(
            f"{arch.path}: no proposal archive (proposal_archive=<kglm-disc model.tar.gz>): q(z | x) starts "
            "as p's prior over z; importance sampling will need many samples",
            stacklevel=2,
        )
    model.eval()
    return model


def _assign(model, mapped: dict[str, torch.Tensor], where: str, with_proposal: bool) -> None:
    """Copy every mapped tensor into the model; every parameter of p (and of q when given) must be set."""
    params = dict(model.named_parameters(remove_duplicate=False))
    unknown = sorted(set(mapped) - set(params))
    if unknown:
        raise ValueError(f"{where}: mapped names missing from the model: {unknown}")
    written: dict[int, tuple[str, torch.Tensor]] = {}
    for name, tensor in mapped.items():
        target = params[name]
        if id(target) in written and not torch.equal(written[id(target)][1], tensor):
            raise ValueError(
                f"{where}: {name} is tied to {written[id(target)][0]} in lm-latent-eval's KGLM, but the "
                "archive holds different values for them"
            )
        written[id(target)] = (name, tensor)
        if tuple(target.shape) != tuple(tensor.shape):
            raise ValueError(
                f"{where}: {name} has shape {tuple(target.shape)} in the model but "
                f"{tuple(tensor.shape)} in the archive"
            )
        with torch.no_grad():
            target.copy_(tensor.to(target.dtype))
    set_ids = {id(params[n]) for n in mapped}
    missing = sorted(
        n
        for n, p in params.items()
        if id(p) not in set_ids and (with_proposal or not n.startswith("proposal."))
    )
    if missing:
        raise ValueError(f"{where}: model parameters not set by the archive: {missing}")
