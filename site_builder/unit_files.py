"""How a unit's output files are written down: in the plan, in the build cache's unit lists, and from there
read back, untrusted, by the next build, which links and removes them.

A unit's files are kept as one tab-joined string (output paths never hold tabs or newlines): one object
instead of ten per record, for each of the two trees the cache describes (100,000 records: ~150 MB less),
and reading the cache does not split two million paths that a build mostly only compares keys of.  A record's
files are a function of four values (``pages.record_files``) and are kept as those: "@<pith id> <arXiv id>
<version> <address mask>", ~50 characters instead of ~700 (no output path starts with "@").
"""

from __future__ import annotations

import re

from site_builder.pages import record_file_count, record_files
from site_builder.verification import ARXIV_ID
from site_builder.writing import check_relative_path, is_plain_path

_RECORD_UNIT = re.compile(rf"@([A-Z2-7]+) ({ARXIV_ID}) ([0-9]+) ([0-9]|[12][0-9]|3[01])")  # (the mask: five bits)


def record_unit_files(pith_id: str, arxiv_id: str, version: int, mask: int, written: list[str]) -> str:
    """A record's files as they are kept: its four values where they make exactly *written* (they always do:
    ``paper_files`` writes ``pages.record_files``), the files joined otherwise."""
    kept = f"@{pith_id} {arxiv_id} {version} {mask}"
    if _RECORD_UNIT.fullmatch(kept) is None or record_files(pith_id, arxiv_id, version, mask) != written:
        return join_files(written)
    return kept


def join_files(files: list[str]) -> str:
    return "\t".join(files)


def split_files(files: str) -> list[str]:
    if files.startswith("@"):
        pith_id, arxiv_id, version, mask = _RECORD_UNIT.fullmatch(files).groups()
        return record_files(pith_id, arxiv_id, int(version), int(mask))
    return files.split("\t") if files else []


def file_count(files: str) -> int:
    """How many files *files* names (without expanding a record's: a build counts every unit's)."""
    if files.startswith("@"):
        return record_file_count(int(files.rpartition(" ")[2]))
    return files.count("\t") + 1 if files else 0


def units_to_text(units: dict[str, tuple[str, str]]) -> str:
    """One line per unit: name, key, files, tab-separated."""
    return "\n".join(f"{name}\t{key}\t{files}" for name, (key, files) in units.items())


def units_from_text(text: str) -> dict[str, tuple[str, str]]:
    """The unit lists as saved; ValueError (the cache is then thrown away) for a unit whose files are not what a
    build writes: the build unlinks and links the files its cache names, so a damaged entry such as
    ``../x`` must never reach it (a record's files are checked by their four values, the others path by path)."""
    units = {}
    for line in text.split("\n") if text else []:
        name, key, files = line.split("\t", 2)
        if files.startswith("@"):
            record = _RECORD_UNIT.fullmatch(files)
            # (an old-style arXiv id is a folder and a name: neither may be a name Windows reserves)
            if record is None or "/" in record[2] and not is_plain_path(f"arxiv/{record[2]}/index.html"):
                raise ValueError(f"damaged unit {name}")
        elif files:
            for rel in files.split("\t"):
                check_relative_path(rel)
        units[name] = (key, files)
    return units
