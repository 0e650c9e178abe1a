"""Generate N realistic bundles signed with a benchmark key (same shape and size as the real ones).

Used by bench_build.py and by the large-site tests.  Each bundle starts from a real
bundle and varies the arXiv id, version, year, categories, author count, title and
abstract; it is then re-hashed and re-signed with a key made here (never the resolver's).
Also the template edit that the serve benchmark and the tests save (``edited_visibly``).
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta, timezone
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from signing import TestKey, sign_bundle, to_bytes

ROOT = Path(__file__).resolve().parent.parent

CATEGORIES = ["cs.LG", "cs.AI", "cs.CL", "cs.CV", "cs.DC", "cs.PL", "stat.ML", "math.OC", "hep-th", "hep-lat",
              "astro-ph.GA", "astro-ph.HE", "quant-ph", "cond-mat.str-el", "physics.optics", "q-bio.NC", "econ.EM"]
WORDS = ("learning model training parallel distributed graph neural quantum field lattice optimal stochastic "
         "inference language vision protein galaxy spectral robust efficient scalable adaptive sparse").split()
NAMES = ("Ada Lovelace,Alan Turing,Emmy Noether,Grace Hopper,John Nash,Lise Meitner,Marie Curie,Niels Bohr,"
         "Paul Dirac,Rosalind Franklin,Srinivasa Ramanujan,Chien-Shiung Wu,Hedy Lamarr,Kurt Gödel").split(",")
SEED_KEY = bytes(range(32))


def benchmark_key() -> TestKey:
    return TestKey("bench-key-1", seed=SEED_KEY)


def _template() -> dict:
    return json.loads(sorted((ROOT / "bundles").glob("*.json"))[0].read_bytes())


def make_bundle(i: int, template: dict | None = None, key: TestKey | None = None, variant: int = 0,
                record: int | None = None, version: int | None = None) -> bytes:
    """Bundle number *i*.  A *variant* is a newer bundle of the same record (a later ``built_at``, as when the
    resolver re-signs a record after new events); *record* picks the paper's content (default: *i*), so
    ``make_bundle(i, record=j)`` is file *i* holding a different record; *version* makes another version of the
    same arXiv paper (another record: the version is part of what the pith number is made of)."""
    rng = random.Random((i if record is None else record) * 7919)
    b = json.loads(json.dumps(template or _template()))
    key = key or benchmark_key()
    year = 2007 + i % 19
    arxiv_id = f"{year % 100:02d}{1 + i % 12:02d}.{10000 + i // 12 % 90000:05d}"
    default_version = 1 + rng.randrange(3)
    version = default_version if version is None else version
    primary = rng.choice(CATEGORIES)
    cross = sorted(set(rng.sample(CATEGORIES, rng.randrange(4))) - {primary})
    title = " ".join(rng.choice(WORDS) for _ in range(6 + rng.randrange(8))).capitalize() + f" {i}"
    authors = ", ".join(rng.sample(NAMES, 1 + rng.randrange(8)))
    abstract = " ".join(rng.choice(WORDS) for _ in range(120)) + "."
    submitted = f"{year}-{1 + i % 12:02d}-{1 + i % 28:02d}T{i % 24:02d}:{i % 60:02d}:00Z"
    record = b["canonical_record"]
    record["source"].update(id=arxiv_id, version=version)
    record["metadata"].update(primary_cat=primary, cross_cats_sorted=cross, submitted_at=submitted)
    import hashlib
    record["metadata"]["title_canon_sha256"] = hashlib.sha256(" ".join(title.lower().split()).encode()).hexdigest()
    for event in b["events"]:
        if event["event_type"] == "graph_snapshot":
            g = event["payload"]["graph_snapshot"]
            g["paper"].update(title=title, authors_text=authors, abstract_excerpt=abstract, primary_cat=primary,
                              cross_cats=cross, submitted_at=submitted)
            g["source"] = dict(record["source"])
    if variant:  # later for a larger variant, so a newer variant is never refused as a rollback
        built = datetime(2026, 9, 1, tzinfo=timezone.utc) + timedelta(seconds=variant)
        b["built_at"] = built.strftime("%Y-%m-%dT%H:%M:%SZ")
    return to_bytes(sign_bundle(b, key))


def _write_range(args) -> None:
    folder, start, stop = args
    template, key = _template(), benchmark_key()
    for i in range(start, stop):
        (Path(folder) / f"b{i:07d}.json").write_bytes(make_bundle(i, template, key))


def edited_visibly(source: str, mark: str) -> str:
    """A template's *source* with the comment *mark* where its pages show it: after the first block it fills
    where it extends another (what lies outside its blocks is not shown), else at its end."""
    comment = f"<!-- {mark} -->"
    if "{% extends" in source and "{% block" in source:
        end = source.index("%}", source.index("{% block")) + 2
        return source[:end] + comment + source[end:]
    return source + comment + "\n"


def generate(folder: Path, n: int, jobs: int = 0) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    step = 500
    ranges = [(str(folder), s, min(n, s + step)) for s in range(0, n, step)]
    with ProcessPoolExecutor(jobs or None) as pool:
        list(pool.map(_write_range, ranges))
    benchmark_key().write(folder.parent / "bench-key.json")
    return folder


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("folder", type=Path)
    parser.add_argument("n", type=int)
    args = parser.parse_args()
    generate(args.folder, args.n)
    print(f"wrote {args.n} bundles to {args.folder}; key: {args.folder.parent / 'bench-key.json'}")
