"""q(z | x): the LM's own next-token distribution restricted to tokens that keep spelling x, tempered, token by token.

q_τ(z | x) = Π_t softmax_{a ∈ A(z_<t)}(log p(a | z_<t) / τ)[z_t], where A(z_<t) are the tokens whose bytes continue
the text at the byte position z_<t has reached and from which its end can still be reached (the lattice's edges).
With ``canonical_mix`` = ε > 0 (a defensive mixture), at a byte position where the canonical segmentation has a
token boundary, q becomes (1 − ε) q + ε · 1[z_t = the canonical token starting there]: the canonical segmentation
gets probability ≥ ε^T and every deviation can return to it. Every segmentation with p(x, z) > 0 has q > 0, so IS
is unbiased; at τ = 1 the weight p(x, z) / q(z | x) =
Π_t p(A(z_<t) | z_<t) is the probability mass the model keeps on the text at each step. Context: ids[s : t + 1] with
s = L·⌊t / L⌋ (the full blocks of the rolling windows), so q reads exactly p's conditionals in every full block.

Particles advance in lockstep (one token per step, all at token index t): particles with the same history share
one node of a prefix tree, whose key/value cache and next-token logits are computed once per step.
"""

from __future__ import annotations

import torch
from torch.nn.utils.rnn import pad_sequence
from transformers import DynamicCache

from ...protocol import CheckedProposal, check_beam_args
from ...tensors import inverse_cdf, pad_rows
from ..causal_lm import cache_step
from .beam import beam_documents


class SegmentationProposal(CheckedProposal):
    """Sequential proposal over the segmentation lattice of one text (see the module docstring)."""

    def __init__(self, lm):
        self.lm = lm

    # ---- helpers ---------------------------------------------------------------------------------------------

    def _edges(self, lattice, positions: list[int], device):
        """Padded (ids [N, M], ends [N, M], valid [N, M]) of the lattice edges at each node's byte position."""
        ids, ends = zip(*(lattice.allowed(p) for p in positions))
        valid = pad_sequence([torch.ones(len(i), dtype=torch.bool) for i in ids], batch_first=True)
        ids = pad_sequence(list(ids), batch_first=True)
        ends = pad_sequence(list(ends), batch_first=True)
        return ids.to(device), ends.to(device), valid.to(device)

    def _forward(self, tokens: torch.Tensor, cache):
        """Next-token logits [N, V] (float32) after feeding one token per node, and the updated cache."""
        if cache is None:
            cache = DynamicCache()
        out, cache = cache_step(self.lm.model, tokens[:, None], cache)
        return out.logits[:, -1].float(), cache

    def _boundaries(self, x) -> dict[int, int]:
        """Byte position → the canonical token starting there (cached on the lattice)."""
        lattice = self.lm.lattice(x)
        if getattr(lattice, "canonical_boundaries", None) is None:
            boundary, pos = {}, 0
            for t in x.tolist():
                boundary[pos] = t
                pos += len(self.lm.vocab[t])
            lattice.canonical_boundaries = boundary
        return lattice.canonical_boundaries

    def _mix_canonical(self, node_log_q, ids, positions: list[int], x):
        """(1 − ε) q + ε · 1[canonical token] at nodes on a canonical token boundary; log q [N, M] (float64)."""
        eps = self.lm.canonical_mix
        if eps <= 0:
            return node_log_q
        boundary = self._boundaries(x)
        rows = [row for row, p in enumerate(positions) if p in boundary]
        if not rows:
            return node_log_q
        q = node_log_q.exp()
        for row in rows:
            q[row] *= 1 - eps
            q[row, (ids[row] == boundary[positions[row]]).nonzero()[0, 0]] += eps
        return q.log()

    # ---- sampling -----------------------------------------------------------------------------------------------

    def _sample(self, x, num_samples, temperature, peek, generator):
        """z [K, T_max] (token ids, padded with −1) ~ q_τ(z | x) and log q_τ(z | x) [K] (float64)."""
        if not peek:
            raise ValueError(
                "the segmentation proposal must read the text it spells: peek=false is not available"
            )
        lattice = self.lm.lattice(x)
        if not lattice.spellable:
            raise ValueError(f"text {lattice.data[:60]!r} cannot be spelled with the vocabulary")
        device = self.lm.device
        gen_device = generator.device if generator is not None else torch.device("cpu")
        # one uniform per (particle, step): the draws never depend on how particles are grouped into forward passes
        uniforms = torch.rand((num_samples, max(lattice.n, 1)), generator=generator, device=gen_device,
                              dtype=torch.float64).to(device)  # fmt: skip
        self.lm.memo = {}
        rows, log_q = [], []
        for start in range(0, num_samples, self.lm.particle_batch):
            r, q, p = self._sample_chunk(
                lattice, uniforms[start : start + self.lm.particle_batch], temperature, x
            )
            rows.extend(r)
            log_q.append(q)
            for row, value in zip(r, p):
                self.lm.memo[tuple(row)] = value
        return pad_rows(rows), torch.cat(log_q)

    def _sample_chunk(self, lattice, uniforms, temperature, x):
        """Token lists, log q [K] and, per particle, (Σ_t log p(z_t | block context), complete): the sum over all
        tokens when z fits in one window, else over its full blocks only (see TokenizationLM.memo)."""
        device, L, n = self.lm.device, self.lm.max_length, lattice.n
        K = uniforms.shape[0]
        logits, cache = self._forward(torch.tensor([self.lm.prefix_token], device=device), None)
        node_pos = [0]
        particle_node = torch.zeros(K, dtype=torch.long, device=device)
        tokens = torch.full((K, max(n, 1)), -1, dtype=torch.long, device=device)
        log_q = torch.zeros(K, dtype=torch.float64, device=device)
        token_log_p = torch.zeros((K, max(n, 1)), dtype=torch.float64, device=device)
        active = torch.arange(K, device=device)
        for t in range(n):
            # [N, M]
            ids, ends, valid = self._edges(lattice, node_pos, device)
            scores = logits.gather(1, ids).double() / temperature
            node_log_q = torch.log_softmax(scores.masked_fill(~valid, float("-inf")), -1)
            node_log_q = self._mix_canonical(node_log_q, ids, node_pos, x)
            node_log_p = torch.log_softmax(logits, -1).gather(1, ids).double()
            # per node; each particle draws from its node's row
            cdf = node_log_q.exp().cumsum(-1)
            a = particle_node[active]
            choice = inverse_cdf(None, uniforms[active, t], cumulative=cdf[a])
            tokens[active, t] = ids[a, choice]
            log_q[active] += node_log_q[a, choice]
            token_log_p[active, t] = node_log_p[a, choice]
            reached = ends[a, choice]
            going = reached < n
            if not going.any():
                break
            active, a, choice, reached = active[going], a[going], choice[going], reached[going]
            width = ids.shape[1]
            children, particle_node[active] = torch.unique(a * width + choice, return_inverse=True)
            parent, edge = children // width, children % width
            # a new block of the rolling windows: its first target sees only z_t
            if (t + 1) % L == 0:
                cache = None
            else:
                cache.batch_select_indices(parent)
            logits, cache = self._forward(ids[parent, edge], cache)
            node_pos = ends[parent, edge].tolist()
        rows = [[v for v in row if v >= 0] for row in tokens.tolist()]
        cumulative = token_log_p.cumsum(-1).cpu()
        log_p = []
        for k, row in enumerate(rows):
            if len(row) <= L:
                log_p.append((float(cumulative[k, len(row) - 1]), True))
            else:
                full = L * ((len(row) - 1) // L)
                log_p.append((float(cumulative[k, full - 1]), False))
        return rows, log_q.cpu(), log_p

    # ---- scoring given z (teacher forcing) ------------------------------------------------------------------

    @torch.no_grad()
    def log_prob(self, x, z, temperature=1.0, peek=True):
        """log q_τ(z_k | x) [K] (float64) of given segmentations z [K, T_max] (−inf for a z outside the lattice)."""
        lattice = self.lm.lattice(x)
        device, L = self.lm.device, self.lm.max_length
        out = torch.full((z.shape[0],), float("-inf"), dtype=torch.float64)
        for k, row in enumerate(z.tolist()):
            row = [t for t in row if t >= 0]
            if not lattice.contains(row):
                continue
            ids = [self.lm.prefix_token, *row]
            total, pos = 0.0, 0
            for s in range(0, len(row), L):
                e = min(len(row), s + L)
                logits = self.lm.model(torch.tensor([ids[s:e]], device=device)).logits[0].float()
                for t in range(s, e):
                    allowed, ends = lattice.allowed(pos)
                    scores = logits[t - s, allowed.to(device)].double() / temperature
                    j = int((allowed == row[t]).nonzero()[0, 0])
                    node_log_q = self._mix_canonical(torch.log_softmax(scores, 0)[None], allowed[None].to(device),
                                                     [pos], x)  # fmt: skip
                    total += float(node_log_q[0, j])
                    pos = int(ends[j])
            out[k] = total
        return out

    # ---- beam ---------------------------------------------------------------------------------------------------

    def _beam(self, x, beam_size):
        """Up to ``beam_size`` distinct segmentations [k, T_max] of highest p(z), best first (``beam.py``)."""
        return self._beam_documents([x], beam_size)[0]

    def beam_documents(self, xs, beam_size: int) -> list[torch.Tensor]:
        """``beam`` of several texts side by side (``protocol.DocumentBeam``): one forward pass per byte position
        for every text's hypotheses; each text's segmentations are those ``beam`` finds for it alone."""
        for x in xs:
            check_beam_args(x, beam_size)
        return self._beam_documents(xs, beam_size)

    def _beam_documents(self, xs, beam_size: int) -> list[torch.Tensor]:
        return [pad_rows(rows) for rows in beam_documents(self.lm, list(xs), beam_size)]
