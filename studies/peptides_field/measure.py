"""``python -m studies peptides_field measure parameters``: each recipe candidate's model built from its configs
(untrained): its parameters in all and by part, against the field's budget of 500k."""

from __future__ import annotations

from typing import Any

from studies._runner import Study
from studies._runner.train import parameters


def count(opts: Any) -> dict[str, Any]:
    return {f"parameters/{n}": parameters("graph_graph", c["configs"])
            for n, c in Study.load("peptides_field").protocol.candidates.items() if c["peer"] == "recipe"}


MEASURE = {"parameters": count}
