"""Compiled templates kept on disk (compiled_templates.py): loaded only when this user's builder wrote them, since
loading one runs it."""

from __future__ import annotations

import os

import jinja2
import pytest

from conftest import open_descriptors
from site_builder.cache_key import user_cache_key
from site_builder.compiled_templates import CompiledTemplates

SOURCE = "{{ 6 * 7 }}"


def compiled(folder, key) -> tuple[CompiledTemplates, jinja2.Environment]:
    cache = CompiledTemplates(folder, key)
    return cache, jinja2.Environment(loader=jinja2.DictLoader({"t.html": SOURCE}), bytecode_cache=cache)


def loaded(folder, key) -> bool:
    """Whether a fresh cache with *key* hands Jinja the compiled template in *folder*."""
    cache, env = compiled(folder, key)
    bucket = cache.get_bucket(env, "t.html", None, SOURCE)
    return bucket.code is not None


@pytest.fixture
def written(tmp_path):
    key = user_cache_key({"HOME": str(tmp_path / "home")})
    _, env = compiled(tmp_path / "c", key)
    assert env.get_template("t.html").render() == "42"
    (path,) = (tmp_path / "c").glob("*.jbc")
    return key, path


def test_a_template_this_user_compiled_is_loaded_again(written, tmp_path):
    key, _ = written
    assert loaded(tmp_path / "c", key)


def test_a_changed_byte_or_another_users_key_loads_nothing(written, tmp_path):
    key, path = written
    other = user_cache_key({"HOME": str(tmp_path / "someone-else")})
    assert not loaded(tmp_path / "c", other)
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 1
    path.write_bytes(bytes(raw))
    assert not loaded(tmp_path / "c", key)
    _, env = compiled(tmp_path / "c", key)
    assert env.get_template("t.html").render() == "42"  # compiled again, and written again
    assert loaded(tmp_path / "c", key)


@pytest.mark.parametrize("other", ["builder", "jinja"])
def test_a_template_compiled_by_another_builder_or_jinja_is_compiled_again(written, tmp_path, monkeypatch, other):
    """Jinja's compiled code depends on the environment the builder sets up and on Jinja's own code generator,
    not only on the template's source: after an upgrade of either, the old code is not run."""
    key, _ = written
    with monkeypatch.context() as patched:
        if other == "builder":
            patched.setattr("site_builder.compiled_templates.builder_identity", lambda: "0.0.0+another")
        else:
            patched.setattr(jinja2, "__version__", jinja2.__version__ + ".post1")
        assert not loaded(tmp_path / "c", key)
    assert loaded(tmp_path / "c", key)


def test_a_link_or_a_fifo_in_its_place_is_not_followed(written, tmp_path):
    key, path = written
    genuine = tmp_path / "genuine.jbc"
    path.rename(genuine)
    path.symlink_to(genuine)
    assert not loaded(tmp_path / "c", key)
    path.unlink()
    os.mkfifo(path)
    assert not loaded(tmp_path / "c", key)  # (and does not wait for a writer)


def test_a_link_at_the_temporary_name_is_not_written_through(written, tmp_path):
    key, path = written
    outside = tmp_path / "outside.txt"
    outside.write_text("not the cache's")
    path.unlink()
    path.with_name(f".{path.name}.{os.getpid()}").symlink_to(outside)
    _, env = compiled(tmp_path / "c", key)
    assert env.get_template("t.html").render() == "42"
    assert outside.read_text() == "not the cache's" and loaded(tmp_path / "c", key)


def test_reading_them_leaves_no_file_open(written, tmp_path):
    """Each template of every build is looked up here (serve: each rebuild): one descriptor left open a lookup
    ends a long session in "Too many open files"."""
    key, path = written
    before = open_descriptors()
    assert loaded(tmp_path / "c", key)  # (read and loaded)
    path.write_bytes(b"x" * 100)
    assert not loaded(tmp_path / "c", key)  # (read, its tag refused)
    path.unlink()
    os.mkfifo(path)
    assert not loaded(tmp_path / "c", key)  # (opened, not a regular file)
    assert open_descriptors() == before


def test_a_compiled_template_that_cannot_be_kept_leaves_nothing_behind(written, tmp_path):
    key, path = written
    path.unlink()
    path.mkdir()  # (in the file's place: it cannot be replaced)
    (path / "x").write_text("")
    _, env = compiled(tmp_path / "c", key)
    assert env.get_template("t.html").render() == "42"  # compiled, used, and not kept
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == [path.name]
