"""The per-user secret that proves a build cache entry was written by this user's builder.

Everything a build finds on disk is untrusted input, its own cache included: a project folder can come from a
clone, a fork's pull request or a folder another user writes to.  So every entry the cache keeps (a file's
digest, a verification result, a tree's unit list, the no-op answer, a compiled template) carries a keyed
BLAKE2b tag, and an entry whose tag does not check is ignored and recomputed, which costs only work.  A large
field is tagged by its SHA-256 digest (``DIGEST_FROM``): forging its tag still needs the key, or another field
with the same SHA-256.

The secret lives outside every project, in the user's cache home (``$XDG_CACHE_HOME/site-builder/cache-key``,
by default ``~/.cache/site-builder/cache-key``): 32 random bytes, created on first use, mode 0600, in a folder
only the user can write.  A folder's mode inside a project proves nothing (a clone can have any mode), but the
user's own home is where this user's builder runs.  Where no such secret can be had (no home, a folder others
may write), ``user_cache_key`` says why and the build runs without a cache.

Each key is bound to a context (the builder's identity and the kind of entry), so an entry made by another
version of the builder, or of another kind, never checks.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from site_builder.writing import not_private

KEY_BYTES = 32
KEY_FILE = "cache-key"
# A field of this many bytes or more is tagged by its SHA-256 digest, which this CPU's SHA instructions make
# twice as fast as the keyed BLAKE2b over it: 0.9 ms against 1.7 ms for the no-op answer or the mirrored
# bundles' record at 10,000 records (~1.6 MB each), read by every build.  None: every field whole.
DIGEST_FROM: int | None = 4096


class CacheKeyUnavailable(Exception):
    """No secret this user alone can read and write: the build then keeps no cache."""


TAG_CHARS = 64  # a tag's hex digits


@dataclass(frozen=True)
class CacheKey:
    """A secret bound to one context; ``tag`` and ``checks`` are pure functions of it and their fields.  Plain
    data: it crosses to worker processes (the compiled templates' key)."""

    secret: bytes

    def __repr__(self) -> str:  # (never print the secret)
        return "CacheKey(<secret>)"

    def bound_to(self, context: str) -> CacheKey:
        """The key for entries of *context* (a different key for every context)."""
        return CacheKey(hashlib.blake2b(context.encode(), key=self.secret, digest_size=KEY_BYTES).digest())

    def tag(self, *fields: str | bytes) -> str:
        """The tag over *fields*, each prefixed by its length in bytes, so that no two lists of fields share an
        encoding; TypeError for a field that is neither text nor bytes."""
        return _tag(hashlib.blake2b(key=self.secret, digest_size=32), fields)

    def checks(self, tag: object, *fields: object) -> bool:
        """Whether *tag* is this key's tag over *fields* (False for fields of any other type: a planted row)."""
        return _checks(self.tag, tag, fields)

    def tagged_file(self, *fields: str, data: bytes) -> bytes:
        """A file's bytes that hold *data* under this key's tag over *fields* and *data*: the tag's hex digits
        first (``TAG_CHARS`` of them), then *data* (compiled templates, the word a save leaves)."""
        return self.tag(*fields, data).encode("ascii") + data

    def checked_file(self, raw: bytes, *fields: str) -> bytes | None:
        """The data of *raw*, a file ``tagged_file`` made with this key and *fields*; None where its tag does not
        check (a file planted, cut short, or made under another key)."""
        tag, data = raw[:TAG_CHARS].decode("ascii", "replace"), raw[TAG_CHARS:]
        return data if self.checks(tag, *fields, data) else None

    def tagger(self) -> Tagger:
        """The same tags, for a process that makes or checks many (the build cache: ~40,000 a build at 10,000
        records)."""
        return Tagger(self)


class Tagger:
    """``CacheKey.tag`` and ``checks`` with the keyed hash's state made once and copied for each tag: keying a
    fresh hash each time was two fifths of their cost (3.6 against 2.1 µs a tag).  The state is not plain data:
    a tagger stays in the process that made it."""

    def __init__(self, key: CacheKey):
        self._keyed = hashlib.blake2b(key=key.secret, digest_size=32)

    def tag(self, *fields: str | bytes) -> str:
        return _tag(self._keyed.copy(), fields)

    def checks(self, tag: object, *fields: object) -> bool:
        return _checks(self.tag, tag, fields)


def _tag(mac, fields: tuple) -> str:
    for value in fields:
        if type(value) is str:
            value = value.encode("utf-8", "surrogatepass")
        elif type(value) is not bytes:
            raise TypeError(f"a tagged field is text or bytes, not {type(value).__name__}")
        if DIGEST_FROM is not None and len(value) >= DIGEST_FROM:  # ("#" never starts a length: no two lists of
            mac.update(b"#%d:" % len(value))                     # fields share an encoding)
            mac.update(hashlib.sha256(value).digest())
        else:
            mac.update(b"%d:" % len(value))
            mac.update(value)
    return mac.hexdigest()


def _checks(tag_of, tag: object, fields: tuple) -> bool:
    if type(tag) is not str:
        return False
    try:
        expected = tag_of(*fields)
    except TypeError:
        return False
    return hmac.compare_digest(tag, expected)


def key_path(environ: dict[str, str] | None = None) -> Path:
    """Where this user's secret lives (by ``XDG_CACHE_HOME``, else ``HOME``)."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CACHE_HOME") or ""
    if not os.path.isabs(base):  # (the XDG rule: a relative value is ignored)
        home = env.get("HOME") or ""
        if not os.path.isabs(home):
            raise CacheKeyUnavailable("no home folder (HOME is not set) to keep the cache key in")
        base = os.path.join(home, ".cache")
    return Path(base) / "site-builder" / KEY_FILE


def user_cache_key(environ: dict[str, str] | None = None) -> CacheKey:
    """This user's secret, created on first use; CacheKeyUnavailable when none can be kept safely."""
    path = key_path(environ)
    folder = path.parent
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as e:
        raise CacheKeyUnavailable(f"cannot make {folder}: {e.strerror}") from None
    _check_private_folder(folder)
    try:
        return CacheKey(_read_secret(path))
    except FileNotFoundError:
        pass
    _create_secret(path)
    return CacheKey(_read_secret(path))


def _check_private_folder(folder: Path) -> None:
    problem = not_private(folder)
    if problem is not None:
        raise CacheKeyUnavailable(problem)


def _read_secret(path: Path) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise CacheKeyUnavailable(f"cannot read {path}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            raise CacheKeyUnavailable(f"{path} is not a file of this user's")
        if st.st_mode & 0o077:
            raise CacheKeyUnavailable(f"{path} can be read or written by other users (chmod 600 it)")
        secret = os.read(fd, KEY_BYTES + 1)
    finally:
        os.close(fd)
    if len(secret) != KEY_BYTES:
        raise CacheKeyUnavailable(f"{path} does not hold a {KEY_BYTES}-byte key (delete it to make a new one)")
    return secret


def _create_secret(path: Path) -> None:
    """Write a new secret whole, then link it into place: two builds starting at once both end up reading
    the one that was linked first."""
    temporary = path.with_name(f".{KEY_FILE}.{os.getpid()}")
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, os.urandom(KEY_BYTES))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(temporary, path)
        except FileExistsError:
            pass
    except OSError as e:
        raise CacheKeyUnavailable(f"cannot write {path}: {e.strerror}") from None
    finally:
        try:
            os.unlink(temporary)
        except OSError:
            pass
