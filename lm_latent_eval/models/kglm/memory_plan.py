"""KGLM's memory plan: how many particles one ``log_joint`` call scores, and what one call and one sampler step hold.

Every temporary of ``log_joint`` and of the sampler's step that grows with the particles, the document or the
graph is planned from its shape (models/memory_plan.py):

- the per-(particle, position) arrays of ``latent_log_prob`` and ``word_log_prob`` ([k, T] and [k, cutoff + T]:
  ``PARTICLE_TOKEN_BYTES`` bytes a particle·token in all) set the particles per call, ``max_particles_per_call``;
- related pairs go through the parent and edge heads ``related_pair_bytes`` at a time (their windows [P, C] and
  padded edges [P, D_max]; a quarter of the budget) and the parent head's window embeddings [n, C, De]
  ``parent_chunk`` rows at a time (another quarter);
- new-entity log probabilities [n, rows] ``new_entity_row_bytes`` positions at a time (a half, after the related
  pairs);
- where they fit an eighth of the budget each, a document's tables of every position and row replace the parent
  head's and the new-entity head's chunks: its parent logits (``parent_table_fits``) and its new-entity log
  probabilities (``new_entity_table_fits``), held while the document runs.

What the sampler holds per token is set by the particles it advances together (the estimator's sample block, which
its random streams fix): its [K, C] windows, its parent head (chunked as above) and its parents' padded edges
[K, D_max], listed by ``memory_plan`` beside ``log_joint``'s.
"""

from __future__ import annotations

from ..memory_plan import MemoryPlan, Temporary, rows_per_chunk
from .latents import (
    NEW_TABLE_BYTES,
    PARENT_TABLE_BYTES,
    new_entity_row_bytes,
    new_entity_table_fits,
    parent_chunk,
    parent_row_bytes,
    parent_table_fits,
    related_pair_bytes,
)

# bytes a particle·token of ``log_joint``'s [k, T]-sized arrays held at once: latent_log_prob's (the previous
# type, entity and parent, the mention rows, windows and their prefix counts over cutoff + T, the pattern and its
# flat index, the gathered terms, the total and the masks: 12 eight-byte and 10 one-byte arrays), the nonzero
# indices of new and related pairs (4 eight-byte) and word_log_prob's (the pair keys, their sort, inverse and
# distinct positions and entities, the generate, copy and combined terms: 22 eight-byte arrays)
PARTICLE_TOKEN_BYTES = 12 * 8 + 10 + 4 * 8 + 22 * 8


def particle_bytes(num_tokens: int, cutoff: int) -> int:
    """Bytes one particle holds in ``log_joint`` (its [T] and [cutoff + T] rows)."""
    return PARTICLE_TOKEN_BYTES * (num_tokens + cutoff + 1)


def table_bytes(model, num_tokens: int, budget: int) -> int:
    """Bytes of a ``num_tokens``-token document's tables of every position and row, where they fit (an eighth of
    ``budget`` each): q's and p's parent logits and new-entity log probabilities."""
    T, rows = int(num_tokens), model.tables.num_rows
    parent = PARENT_TABLE_BYTES * T * rows if parent_table_fits(T, rows, model.cutoff, budget) else 0
    return parent + (NEW_TABLE_BYTES * T * rows if new_entity_table_fits(T, rows, budget) else 0)


def max_particles_per_call(model, num_tokens: int, budget: int | None = None) -> int:
    """The most particles of a ``num_tokens``-token document one ``log_joint`` call scores within ``budget`` bytes
    (default: the model's ``memory_budget``): half of it for the [k, T] arrays and the document's tables, the other
    half for the chunked heads."""
    budget = model.memory_budget if budget is None else budget
    room = budget // 2 - table_bytes(model, num_tokens, budget)
    return rows_per_chunk(particle_bytes(num_tokens, model.cutoff), room)


def memory_plan(model, num_tokens: int, num_particles: int, budget: int | None = None) -> MemoryPlan:
    """The planned temporaries of one ``log_joint`` call and one sampler step at ``num_particles`` particles of a
    ``num_tokens``-token document (see the module docstring)."""
    budget = model.memory_budget if budget is None else budget
    T, K, C = int(num_tokens), int(num_particles), model.cutoff
    De, rows = model.entity_dim, model.tables.num_rows
    itemsize = model.entity_embedding.weight.element_size()
    d_max = max(int(model.tables.degree.max()) if model.tables.degree.numel() else 0, 1)
    k = min(K, max_particles_per_call(model, T, budget))
    pairs = min(k * T, rows_per_chunk(related_pair_bytes(C, d_max), budget // 4))
    parent_rows = min(pairs, parent_chunk(C, De, itemsize, budget))
    step_parent = min(K, parent_chunk(C, De, itemsize, budget))
    positions = min(T, rows_per_chunk(new_entity_row_bytes(rows, itemsize), budget // 2))
    # a document's tables (held while it runs, an eighth of the budget each) replace the chunks they make needless
    row_table, new_table = parent_table_fits(T, rows, C, budget), new_entity_table_fits(T, rows, budget)
    if row_table:
        parent = Temporary(
            "tables: q's and p's parent logits [T, rows] (float32)", (T, rows), PARENT_TABLE_BYTES
        )
    else:
        window_rows = max(parent_rows, step_parent)
        parent = Temporary("parent head: window embeddings [n, C, De]", (window_rows, C, De), itemsize)
    if new_table:
        new_entity = Temporary(
            "tables: new-entity log probabilities [T, rows] (float64)", (T, rows), NEW_TABLE_BYTES
        )
    else:
        new_entity = Temporary("new-entity head: logits [n, rows] (float64)", (positions, rows), 8)
    temporaries = [
        Temporary("log_joint: [k, cutoff + T] arrays (each)", (k, C + T + 1), 8),
        Temporary("log_joint: related pairs' windows [P, C]", (pairs, C), 8),
        Temporary("log_joint: related pairs' padded edges [P, D_max]", (pairs, d_max), 8),
        parent,
        new_entity,
        Temporary("sampler step: windows [K, C]", (K, C), 8),
        Temporary("sampler step: parents' padded edges [K, D_max]", (K, d_max), 8),
        Temporary("sampler: z [K, T] (each of 4)", (K, T), 8),
    ]
    tables = table_bytes(model, T, budget)
    heads = max(
        pairs * related_pair_bytes(C, d_max)
        + (0 if row_table else parent_rows * parent_row_bytes(C, De, itemsize)),
        0 if new_table else positions * new_entity_row_bytes(rows, itemsize),
    )
    held = k * particle_bytes(T, C) + heads + tables
    return MemoryPlan("kglm", T, K, int(budget), k, temporaries, held)
