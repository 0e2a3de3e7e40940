"""EntityNLM's memory plan: how many particles one ``log_joint`` call scores, and what one call and the sampler hold.

Every temporary of ``log_joint`` that grows with the particles is planned from its shape (models/memory_plan.py). One
call over k particles of a T-token document (D = ``dim``, M = ``max_entities``, ℓ = ``max_mention_length``,
V = the vocabulary) runs through phases, each holding at once (bytes per particle·token, then per particle):

- finding the distinct configurations: the latents side by side [k, 3T] and their copies (``distinct_rows``);
- the memory run (``entity_rows``): the memory table [k·M, D], the entity row of every token [T + 1, k, D] (a list,
  then stacked) and the bilinear scores [N, M] of the N ≤ k·T rows starting a mention (a list, then joined);
- the slots' bookkeeping: the hits [T, k, M] (bool) and their latest positions [T, k, M] (int64: ``torch.where``,
  then ``cummax``'s values and indices), beside the entity rows;
- the entity head at the N starting rows: their latest positions [N, M] (int64) and the distance terms and scores
  [N, M] (float32), beside the entity rows and the latest positions of every row;
- the length head: [T, k, ℓ] logits per token, or one product over the starting rows' [h; e] [N, 2D] (where
  ``rows_apart`` holds);
- the context of every token [T, k, D] beside the entity rows;
- the word softmax (``word_log_probs``): one token's logits [k, V] at a time (and the float32 temporaries of their
  log-sum-exp, ``tensors.log_normalizer``), or about ``WORD_GROUP`` logits of consecutive tokens where k·V is
  smaller.

The plan takes N = k·T (every token starting a mention, the worst case) and the largest phase, so it bounds what a
call holds whatever z it is given (tests/models/entitynlm/test_entitynlm_memory.py records the temporaries of real
calls against it). ``log_joint`` scores ``max_particles_per_call`` particles at a time.

The sampler (``proposal.sample``) draws its K particles side by side, token by token: its state is the entity
memory [K, M, D] (float32) and the latents drawn [3, K, T]; each step's entity head is one batched product of the
memory and the query ([K, M] scores, no [K, M, D] temporary). Both are set by the particles the estimator draws at
once (its sample block, fixed by the random streams, at most ``num_particles``), not chunked by the budget:
``memory_plan`` lists them beside ``log_joint``'s, and a K whose sampler would hold more than the budget is refused
before any work (``estimators.registry.check_sample_memory``).
"""

from __future__ import annotations

from ..memory_plan import MemoryPlan, Temporary, rows_per_chunk

# logits normalised at once by word_log_probs (consecutive tokens; fits in cache)
WORD_GROUP = 1 << 18

# bytes of the word softmax's logits group (``WORD_GROUP`` values) and its log-sum-exp's float32 temporaries
_WORD_BYTES_PER_LOGIT = 12
# [T, k] int64 and bool bookkeeping arrays alive beside each phase (R, E, L views, masks, slots, counts, indices)
_INDEX_BYTES = 96


def _sizes(model) -> tuple[int, int, int, int, int]:
    """(D, M, ℓ, V, element size of the float tables)."""
    itemsize = model.token_embedding.weight.element_size()
    return model.dim, model.max_entities, model.max_mention_length, len(model.vocab), itemsize


def token_bytes(model) -> int:
    """Bytes one particle·token of ``log_joint``'s [T, k, ...] arrays holds at once: the largest phase (see the
    module docstring), every token starting a mention."""
    D, M, L, _, f = _sizes(model)
    apart = D % 16 == 0  # rows_apart can hold only for rows of whole 64-byte lines
    phases = {
        "distinct rows": 5 * 3 * 8,
        "memory run": 2 * f * D + 2 * 4 * M + 4 * 8,
        "slot bookkeeping": f * D + 4 * M + M + 3 * 8 * M,
        "entity head": f * D + M + 8 * M + 2 * 8 * M + 4 * 4 * M + M,
        "length head": f * D + 9 * M + (4 * f * D + 3 * 4 * L if apart else 2 * 4 * L + 2 * 4 * L),
        "context": 2 * f * D + 9 * M + 3 * 8,
        "words": f * D + 2 * 8,
    }
    return max(phases.values()) + 3 * 8 + _INDEX_BYTES


def word_row_bytes(model) -> int:
    """Bytes one particle holds in one token's word softmax: its [V] logits and its log-sum-exp's float32
    temporaries (a float32 copy of bfloat16 logits, the shifted exponentials)."""
    _, _, _, V, f = _sizes(model)
    return (f + 2 * 4) * V


def particle_bytes(model, num_tokens: int) -> int:
    """Bytes one particle holds in ``log_joint`` at most: its [T, ...] arrays, its rows of the memory table
    [M, D] and of one token's word softmax [V]."""
    D, M, _, _, f = _sizes(model)
    return token_bytes(model) * (int(num_tokens) + 1) + f * M * D + word_row_bytes(model)


def fixed_bytes(model) -> int:
    """Bytes a call holds whatever its particles: the word softmax of a group of ``WORD_GROUP`` logits."""
    return _WORD_BYTES_PER_LOGIT * WORD_GROUP


def max_particles_per_call(model, num_tokens: int, budget: int | None = None) -> int:
    """The most particles of a ``num_tokens``-token document one ``log_joint`` call scores within ``budget`` bytes
    (default: the model's ``memory_budget``)."""
    budget = model.memory_budget if budget is None else budget
    return rows_per_chunk(particle_bytes(model, num_tokens), max(1, int(budget) - fixed_bytes(model)))


def call_bytes(model, num_tokens: int, num_particles: int) -> int:
    """What one ``log_joint`` call over ``num_particles`` particles holds at once, as planned."""
    return int(num_particles) * particle_bytes(model, num_tokens) + fixed_bytes(model)


def memory_plan(model, num_tokens: int, num_particles: int, budget: int | None = None) -> MemoryPlan:
    """The planned temporaries of one ``log_joint`` call and of the sampler at ``num_particles`` particles of a
    ``num_tokens``-token document (see the module docstring)."""
    budget = model.memory_budget if budget is None else budget
    T, K = int(num_tokens), int(num_particles)
    D, M, L, V, f = _sizes(model)
    k = min(K, max_particles_per_call(model, T, budget))
    temporaries = [
        Temporary("log_joint: latents side by side [k, 3T] (distinct rows)", (k, 3 * T), 8),
        Temporary("log_joint: memory table [k·M, D]", (k * M, D), f),
        Temporary("log_joint: entity rows [T + 1, k, D] (list, stack, context)", (T + 1, k, D), f),
        Temporary("log_joint: slot positions [T, k, M] (int64, each)", (T, k, M), 8),
        Temporary("log_joint: entity scores at mention starts [N ≤ k·T, M]", (k * T, M), 4),
        Temporary("log_joint: length logits [T, k, ℓ]", (T, k, L), 4),
        Temporary("log_joint: word logits of one token [k, V] (float32, log-sum-exp)", (k, V), 4),
        Temporary("sampler: entity memory [K, M, D] (state)", (K, M, D), f),
        Temporary("sampler: entity scores [K, M]", (K, M), 4),
        Temporary("sampler: latents [3, K, T]", (3, K, T), 8),
    ]
    return MemoryPlan("entitynlm", T, K, int(budget), k, temporaries, call_bytes(model, T, k))
