"""arXiv's category names (``data/arxiv-categories.json``), for pages that show a category's code."""

from __future__ import annotations

import functools
import json
from importlib import resources


@functools.cache
def _names() -> dict[str, str]:
    return json.loads(resources.files("site_builder.data").joinpath("arxiv-categories.json").read_text("utf-8"))


def category_name(code: str) -> str:
    """The category's name ("Distributed, Parallel, and Cluster Computing" for cs.DC), or "" for a code the
    table does not know (an old or new category: the page then shows the code alone)."""
    return _names().get(code, "")
