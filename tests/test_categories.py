"""arXiv category names (categories.py): shown beside a code, never in its place."""

import json
import re

from conftest import ROOT
from site_builder.categories import category_name

TABLE = json.loads((ROOT / "site_builder" / "data" / "arxiv-categories.json").read_text())


def test_known_codes_have_their_names_and_unknown_ones_none():
    assert category_name("cs.DC") == "Distributed, Parallel, and Cluster Computing"
    assert category_name("hep-th") == "High Energy Physics - Theory"
    assert not category_name("cs.XX") and not category_name("")


def test_every_entry_is_an_arxiv_code_with_a_plain_name():
    assert len(TABLE) > 100
    for code, name in TABLE.items():
        assert re.fullmatch(r"[a-z-]+(\.[A-Za-z-]+)?", code), code
        assert isinstance(name, str) and name.strip() == name and "<" not in name
