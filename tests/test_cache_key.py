"""This user's cache key (cache_key.py): made once, private to the user, refused where others could read or plant
it, and a tag that binds every field and its context."""

from __future__ import annotations

import os
import re

import pytest

from site_builder import cache_key
from site_builder.cache_key import CacheKeyUnavailable, key_path, user_cache_key

from conftest import open_descriptors


def test_the_key_is_made_once_private_to_the_user(tmp_path):
    env = {"HOME": str(tmp_path / "home")}
    key = user_cache_key(env)
    path = key_path(env)
    assert path == tmp_path / "home" / ".cache" / "site-builder" / "cache-key"
    assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700
    assert user_cache_key(env) == key  # the same key next time
    assert user_cache_key({"HOME": str(tmp_path / "other")}) != key
    assert repr(key) == "CacheKey(<secret>)"  # (never printed)


def test_the_key_is_kept_only_under_a_home_or_cache_home_named_absolutely(tmp_path):
    """A relative XDG_CACHE_HOME or HOME would put the key in whatever folder the build runs in: a project, which
    may be a clone bringing a key its author knows.  A relative XDG_CACHE_HOME is ignored (the XDG rule), and a
    relative HOME is none."""
    home = str(tmp_path / "home")
    assert key_path({"XDG_CACHE_HOME": str(tmp_path / "xdg"), "HOME": home}) == \
        tmp_path / "xdg" / "site-builder" / "cache-key"
    assert key_path({"XDG_CACHE_HOME": "cache", "HOME": home}) == tmp_path / "home" / ".cache" / "site-builder" / \
        "cache-key"
    for env in ({"HOME": "home"}, {"XDG_CACHE_HOME": "cache", "HOME": "."}):
        with pytest.raises(CacheKeyUnavailable, match="no home folder"):
            key_path(env)


def test_a_key_made_at_the_same_time_by_another_build_is_the_one_both_read(tmp_path):
    """Two builds starting at once may both find no key and make one: the one linked into place first stays, so
    that neither build tags entries with a key the other then replaces."""
    env = {"HOME": str(tmp_path / "home")}
    first = user_cache_key(env)
    cache_key._create_secret(key_path(env))  # (the second build's, made as the first's was linked)
    assert user_cache_key(env) == first and os.listdir(key_path(env).parent) == ["cache-key"]


def test_making_and_reading_the_key_leaves_no_file_open_and_no_file_behind(tmp_path):
    """A build reads the key as it opens the cache; a process that builds again and again (a program calling
    ``build()``, serve whenever it opens its cache anew) would run out of descriptors (EMFILE) if each read left
    one open.  The key is written to a temporary name first, which must not stay beside it."""
    env = {"HOME": str(tmp_path / "home")}
    before = open_descriptors()
    key = user_cache_key(env)  # made
    assert all(user_cache_key(env) == key for _ in range(5))  # read
    assert open_descriptors() == before
    assert os.listdir(key_path(env).parent) == ["cache-key"]
    assert key_path(env).stat().st_size == cache_key.KEY_BYTES == 32  # (a key made before reads the same)


def test_tags_bind_every_field_and_the_context(tmp_path):
    key = user_cache_key({"HOME": str(tmp_path)})
    a = key.bound_to("context one")
    tag = a.tag("file", "a.json", "sig", "sha")
    assert a.checks(tag, "file", "a.json", "sig", "sha")
    assert not a.checks(tag, "file", "a.json", "sig", "shb")
    assert not a.checks(tag, "file", "a.jso", "nsig", "sha")  # (fields are length-prefixed)
    assert not key.bound_to("context two").checks(tag, "file", "a.json", "sig", "sha")
    for at in (0, len(tag) // 2, len(tag) - 1):  # (every character of a tag counts)
        other = tag[:at] + ("0" if tag[at] != "0" else "1") + tag[at + 1:]
        assert not a.checks(other, "file", "a.json", "sig", "sha")
    assert a.tag("\udcff.json") != a.tag("\udcfe.json")  # (names in bytes that are not UTF-8, as Python holds them)
    assert not a.checks(None, "file", "a.json", "sig", "sha") and not a.checks(tag, "file", "a.json", 1, "sha")
    # (a planted row's tag may be of any type SQLite holds: False, never a TypeError that stops the build)
    for planted in (5, 2.5, tag.encode(), bytes.fromhex(tag), [tag]):
        assert not a.checks(planted, "file", "a.json", "sig", "sha")
        assert not a.tagger().checks(planted, "file", "a.json", "sig", "sha")


def test_a_tagged_file_gives_back_its_data_only_under_the_same_key_and_fields(tmp_path):
    """The file format compiled templates and the word of a save share: the tag's hex digits, then the data."""
    key = user_cache_key({"HOME": str(tmp_path)}).bound_to("files")
    raw = key.tagged_file("name", "checksum", data=b"\x00data")
    assert raw[:cache_key.TAG_CHARS] == key.tag("name", "checksum", b"\x00data").encode() and raw.endswith(b"\x00data")
    assert key.checked_file(raw, "name", "checksum") == b"\x00data"
    for planted in (raw[:-1], raw + b"!", raw[:cache_key.TAG_CHARS - 1], b"", b"0" * 64 + b"\x00data"):
        assert key.checked_file(planted, "name", "checksum") is None
    assert key.checked_file(raw, "name", "other") is None
    assert key.bound_to("elsewhere").checked_file(raw, "name", "checksum") is None


@pytest.mark.parametrize("digest_from", [cache_key.DIGEST_FROM, None])
def test_a_large_fields_tag_binds_every_byte_of_it(tmp_path, monkeypatch, digest_from):
    """A field tagged by its SHA-256 digest (``DIGEST_FROM``) is bound as a whole field is: one byte changed, or
    another length, or a small field holding its very digest, never checks."""
    import hashlib

    monkeypatch.setattr(cache_key, "DIGEST_FROM", digest_from)
    key = user_cache_key({"HOME": str(tmp_path)}).bound_to("context")
    large = bytes(range(256)) * 64
    tag = key.tag("document", large)
    assert key.checks(tag, "document", large) and key.tagger().checks(tag, "document", large)
    assert not key.checks(tag, "document", large[:-1] + b"\0") and not key.checks(tag, "document", large + b"\0")
    assert not key.checks(tag, "document", large[:-1])
    assert not key.checks(tag, "document", hashlib.sha256(large).digest())
    assert not key.checks(tag, "document", b"#%d:" % len(large) + hashlib.sha256(large).digest())
    assert not key.checks(tag, "documen", b"t" + large)


@pytest.mark.parametrize("flaw", ["folder-writable-by-others", "key-readable-by-others", "key-readable-by-its-group",
                                  "key-writable-by-its-group", "key-is-a-link", "key-is-a-folder",
                                  "key-wrong-length", "key-one-byte-too-long", "no-home"])
def test_a_key_that_others_could_read_or_plant_is_refused(tmp_path, flaw):
    env = {"HOME": str(tmp_path / "home")}
    path = key_path(env)
    if flaw != "no-home":
        user_cache_key(env)
    if flaw == "folder-writable-by-others":
        path.parent.chmod(0o777)
    elif flaw == "key-readable-by-others":
        path.chmod(0o644)
    elif flaw == "key-readable-by-its-group":  # (a group's members could tag cache entries as this user)
        path.chmod(0o640)
    elif flaw == "key-writable-by-its-group":
        path.chmod(0o620)
    elif flaw == "key-is-a-link":
        planted = tmp_path / "planted"
        planted.write_bytes(b"k" * 32)
        planted.chmod(0o600)
        path.unlink()
        path.symlink_to(planted)
    elif flaw == "key-is-a-folder":  # (private, as the key would be: not a file, whatever its mode)
        path.unlink()
        path.mkdir(mode=0o700)
    elif flaw == "key-wrong-length":
        path.write_bytes(b"short")
    elif flaw == "key-one-byte-too-long":
        path.write_bytes(path.read_bytes() + b"k")
    else:
        env = {}
    with pytest.raises(CacheKeyUnavailable):
        user_cache_key(env)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user (CI runs as root)")
def test_a_key_file_of_another_user_is_refused_even_by_root_who_can_read_it(tmp_path):
    """root reads any file, so a private key file another user put in root's cache folder would be read, and
    that user could tag cache entries root's builds trust."""
    env = {"HOME": str(tmp_path / "home")}
    user_cache_key(env)
    os.chown(key_path(env), 12345, 12345)
    with pytest.raises(CacheKeyUnavailable, match="is not a file of this user's"):
        user_cache_key(env)


def test_a_key_that_cannot_be_kept_says_where_and_why(tmp_path, monkeypatch):
    """The build then runs without a cache, and its note names the folder or file and the system's reason."""
    home_file = tmp_path / "home"
    home_file.write_text("a file where the home folder should be")
    with pytest.raises(CacheKeyUnavailable, match=r"cannot make .*/home/\.cache/site-builder: Not a directory"):
        user_cache_key({"HOME": str(home_file)})
    env = {"HOME": str(tmp_path / "elsewhere")}
    path = key_path(env)
    path.parent.mkdir(parents=True, mode=0o700)
    monkeypatch.setattr(os, "getpid", lambda: 4242)
    (path.parent / f".{path.name}.4242").mkdir()  # (the new key's temporary file cannot be made: as on a full disk)
    with pytest.raises(CacheKeyUnavailable, match=f"cannot write {re.escape(str(path))}: File exists"):
        user_cache_key(env)
    assert not path.exists()


def test_the_key_module_has_no_state(tmp_path):
    """Each call reads the environment it is given: a test (or serve under another HOME) never sees a stale key."""
    assert not [name for name, value in vars(cache_key).items()
                if isinstance(value, (dict, list, set, bytes)) and not name.startswith("__")]


def test_a_tagger_makes_the_keys_own_tags_and_the_key_crosses_to_workers(tmp_path):
    import pickle

    key = user_cache_key({"HOME": str(tmp_path)}).bound_to("context")
    tagger = key.tagger()
    fields = ("row", "build key", b"<tr>\xff</tr>", "d\udcff")
    assert tagger.tag(*fields) == key.tag(*fields) and tagger.tag(*fields) == tagger.tag(*fields)
    assert tagger.checks(key.tag(*fields), *fields) and not tagger.checks(key.tag(*fields), *fields[:3], "other")
    assert not tagger.checks(key.tag(*fields), "row", 3) and not tagger.checks(None, *fields)
    assert pickle.loads(pickle.dumps(key)) == key  # (the compiled templates' key goes to forkserver workers)
