"""Jinja's compiled templates, kept on disk between processes only behind this user's cache key.

Jinja stores a compiled template as marshalled code, and loading it runs that code: a file planted in the cache
folder (a fork's pull request, a clone, a shared folder) would run as whoever builds.  So each file here carries
a tag made with this user's cache key (cache_key.py) over the template's name, its source digest and the bytes,
and a file whose tag does not check is never handed to Jinja: the template is compiled again instead, which
costs only time.  A command-line rebuild that finds its templates here saves compiling them (about 0.1 s for
the built-in set); ``--no-cache`` turns this off along with the rest of the cache.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import jinja2

from site_builder import builder_identity
from site_builder.cache_key import CacheKey
from site_builder.loading import FileReadError, read_bytes
from site_builder.writing import create_new

_LIMIT = 16 << 20  # a compiled template is tens of KB; anything far larger is not one of ours


class CompiledTemplates(jinja2.BytecodeCache):
    def __init__(self, folder: Path, key: CacheKey):
        self.folder = folder
        self._key = key.bound_to(f"site-builder compiled templates {builder_identity()} "
                                 f"jinja2 {jinja2.__version__} python {sys.version}")

    def _path(self, bucket: jinja2.bccache.Bucket) -> Path:
        return self.folder / f"{bucket.key}.jbc"

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:  # (a file of its own: no link followed, no FIFO waited on)
            raw = read_bytes(self._path(bucket), _LIMIT)
        except FileReadError:
            return
        code = self._key.checked_file(raw, bucket.key, bucket.checksum)
        if code is not None:
            bucket.bytecode_from_string(code)

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        code = bucket.bytecode_to_string()
        path = self._path(bucket)
        temporary = path.with_name(f".{path.name}.{os.getpid()}")
        try:
            self.folder.mkdir(mode=0o755, parents=True, exist_ok=True)
            with open(create_new(temporary), "wb") as f:
                f.write(self._key.tagged_file(bucket.key, bucket.checksum, data=code))
            os.replace(temporary, path)
        except OSError:  # (not kept: compiled again next time)
            try:
                os.unlink(temporary)
            except OSError:
                pass
