"""What our models saved in the Hub layout (``PyTorchModelHubMixin``) share when they are loaded."""

from __future__ import annotations


class StrictLoading:
    """Mixed in before ``PyTorchModelHubMixin``: ``from_pretrained`` loads with strict=True, so a checkpoint missing
    a parameter is an error, never a random init."""

    @classmethod
    def _from_pretrained(cls, *, strict: bool = True, **kwargs):
        return super()._from_pretrained(strict=strict, **kwargs)
