"""How a unit's files are written down (unit_files.py): a record's as its four values, the others joined; and the
unit lists read back from the cache only where every file they name is a plain path inside the site."""

from __future__ import annotations

import pytest

from site_builder.pages import record_files
from site_builder.unit_files import file_count, record_unit_files, split_files, units_from_text, units_to_text

PITH_ID = "A" * 26


@pytest.mark.parametrize("arxiv_id", ["hep-th/9901001", "math.AG/0601001", "2401.00001", "0704.0001"])
def test_a_records_files_are_kept_as_its_four_values_and_made_again_from_them(arxiv_id):
    for mask in range(32):
        written = record_files(PITH_ID, arxiv_id, 3, mask)
        kept = record_unit_files(PITH_ID, arxiv_id, 3, mask, written)
        assert kept == f"@{PITH_ID} {arxiv_id} 3 {mask}"
        assert split_files(kept) == written and file_count(kept) == len(written) == 5 + mask.bit_count()
        assert units_from_text(units_to_text({"record:x": ("k", kept)})) == {"record:x": ("k", kept)}


def test_files_the_four_values_do_not_make_are_kept_as_they_are():
    written = [*record_files(PITH_ID, "hep-th/9901001", 3, 0b10110), f"pith/{PITH_ID}/extra.html"]
    kept = record_unit_files(PITH_ID, "hep-th/9901001", 3, 0b10110, written)
    assert split_files(kept) == written and file_count(kept) == len(written)
    assert split_files("") == [] and file_count("") == 0


@pytest.mark.parametrize("files", [
    "../victim.txt", "index.html\t../victim.txt", "/etc/passwd", "a//b.html", "aux.html",  # (joined paths)
    f"@{PITH_ID} .. 1 1", f"@{PITH_ID} ../../victim 1 1", f"@{PITH_ID} aux/1234567 1 1",  # (a record's)
    f"@{PITH_ID} 2401.00001/.. 1 1",
    f"@{PITH_ID} 2401.00001 1 32", f"@{PITH_ID.lower()} 2401.00001 1 1", f"@{PITH_ID} 2401.00001 x 1",
])
def test_a_unit_list_naming_anything_but_plain_paths_inside_the_site_is_refused(files):
    """The build links and removes the files a unit list names: the whole list is refused (ValueError: the cache
    is thrown away) where one unit's files could lead out of the site or are not what a build writes."""
    good = units_to_text({"static": ("k", "index.html\trobots.txt")})
    assert units_from_text(good) == {"static": ("k", "index.html\trobots.txt")}
    with pytest.raises(ValueError):
        units_from_text(good + "\n" + units_to_text({"damaged": ("k", files)}))
