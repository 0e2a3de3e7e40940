"""One network row per revealed set of a text, shared by every call that reads it: particles, runs, sample blocks,
stages of the precision target and estimators.

The scores of a state S of a text x (log p_θ(x_i | S) and the policy's score at every position: one network row)
depend on (x, S) and the network only. ``conditionals.token_log_probs`` already runs each distinct S of one call once;
``RowCache`` keeps the rows between calls, so a state that an earlier step, SMC run, sample block or stage of the
precision target ran is read back instead of run again: for a text of T tokens no estimator runs more than the 2^T − 1
rows of the exact program, however many particles and stages it draws. A row read back is the row the network gave
for that state, so every estimate stays what it was; the numbers are the same bit for bit wherever the network's row
does not depend on the other rows of its batch (checked on the CPU in ``tests/models/masked/test_masked_row_cache.py``;
on a GPU a row's last bits may depend on its batch, as they already do between batch sizes).

A cached row is keyed by what it depends on: the text and a conditional view's context (``model.context_ids``),
whether the mask row is kept, the order policy, and the network's parameters (each one's storage and in-place
version counter, so a training step or a move to another device or dtype starts afresh). A network in training mode
(dropout) is never cached. At most ``max_entries`` float64 entries are kept (two per position of a row); past it the
least recently used text's rows are dropped.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import torch

# float64 entries kept by default (two per position of a row): 64 MiB
DEFAULT_ENTRIES = 1 << 23


class _TextRows:
    """The rows of one text: a table [capacity, 2, T] (token log-probabilities and policy scores) and the row of
    each state, keyed by the state's packed bits."""

    def __init__(self, width: int, device) -> None:
        self.table = torch.empty(64, 2, width, dtype=torch.float64, device=device)
        self.index: dict[bytes, int] = {}

    @property
    def entries(self) -> int:
        return len(self.index) * 2 * self.table.shape[2]

    def add(self, keys: list[bytes], token: torch.Tensor, conf: torch.Tensor) -> None:
        start, n = len(self.index), len(keys)
        if start + n > self.table.shape[0]:
            grown = torch.empty(
                max(2 * self.table.shape[0], start + n), *self.table.shape[1:], dtype=torch.float64,
                device=self.table.device,
            )  # fmt: skip
            grown[:start] = self.table[:start]
            self.table = grown
        self.table[start : start + n, 0], self.table[start : start + n, 1] = token, conf
        self.index.update(zip(keys, range(start, start + n)))


class RowCache:
    """The network rows of recently scored texts (module docstring): ``lookup`` says which states are known,
    ``store`` keeps new ones; ``rows_read`` counts the rows read back instead of run."""

    def __init__(self, max_entries: int = DEFAULT_ENTRIES) -> None:
        self.max_entries = int(max_entries)
        self.texts: OrderedDict[tuple, _TextRows] = OrderedDict()
        self.rows_read = 0

    def clear(self) -> None:
        """Forget every row (a benchmark that counts one method's rows starts here)."""
        self.texts.clear()

    def key(self, model, x: torch.Tensor, keep_mask_row: bool) -> tuple | None:
        """What a row of text x depends on, or None where rows must not be kept (a network in training mode, or
        a cache of size 0)."""
        predictor = getattr(model, "predictor", None)
        if self.max_entries <= 0 or not isinstance(predictor, torch.nn.Module) or predictor.training:
            return None
        parameters = tuple((p.data_ptr(), p._version, p.dtype) for p in predictor.parameters())
        context = None if model.context_ids is None else tuple(model.context_ids.tolist())
        return (
            tuple(x.tolist()), context, bool(keep_mask_row), model.policy, model.mask_id, str(x.device), parameters
        )  # fmt: skip

    @staticmethod
    def state_keys(revealed: torch.Tensor) -> list[bytes]:
        """One key per state (revealed BoolTensor [N, T]): its positions packed into bytes."""
        packed = np.packbits(revealed.cpu().numpy(), axis=1)
        return [row.tobytes() for row in packed]

    def lookup(self, text_key: tuple, keys: list[bytes]) -> tuple[list[int], list[int], list[int]]:
        """(positions of ``keys`` found, their rows in the text's table, positions of ``keys`` missing)."""
        rows = self.texts.get(text_key)
        if rows is None:
            return [], [], list(range(len(keys)))
        self.texts.move_to_end(text_key)
        found, where, missing = [], [], []
        for n, k in enumerate(keys):
            i = rows.index.get(k)
            if i is None:
                missing.append(n)
            else:
                found.append(n)
                where.append(i)
        self.rows_read += len(found)
        return found, where, missing

    def table(self, text_key: tuple) -> torch.Tensor:
        return self.texts[text_key].table

    def store(self, text_key: tuple, keys: list[bytes], token: torch.Tensor, conf: torch.Tensor) -> None:
        """Keep the rows of new states (token log-probabilities and policy scores, float64 [n, T] each)."""
        width = token.shape[1]
        if 2 * width * len(keys) > self.max_entries:
            return
        rows = self.texts.get(text_key)
        if rows is None:
            rows = self.texts[text_key] = _TextRows(width, token.device)
        self.texts.move_to_end(text_key)
        rows.add(keys, token, conf)
        total = sum(r.entries for r in self.texts.values())
        while total > self.max_entries and len(self.texts) > 1:
            _, dropped = self.texts.popitem(last=False)
            total -= dropped.entries
        if total > self.max_entries:
            self.texts.clear()
