"""What the bundled ``evaluate`` metric modules (``metrics/<name>/<name>.py``) share: how they describe themselves."""

from __future__ import annotations

import datasets
import evaluate


def metric_info(description: str, citation: str, inputs_description: str, features: dict, reference_url: str):
    """The ``evaluate.MetricInfo`` of one of our metric modules: its description, citation and argument docs, the
    ``datasets`` features of one example (``{column: feature}``) and the URL of its paper."""
    return evaluate.MetricInfo(
        description=description,
        citation=citation,
        inputs_description=inputs_description,
        features=datasets.Features(features),
        reference_urls=[reference_url],
    )
