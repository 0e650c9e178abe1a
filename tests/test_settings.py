"""site.toml (settings.py): every setting checked, typos refused, URLs made once."""

from __future__ import annotations

import re

import pytest

from site_builder.settings import (
    SettingsError,
    SiteConfig,
    load_settings,
    normalize_base_url,
    project_paths,
)


def test_no_file_gives_the_defaults(tmp_path):
    assert load_settings(tmp_path / "site.toml") == SiteConfig()


def test_settings_are_read_and_the_base_url_normalised(tmp_path):
    (tmp_path / "site.toml").write_text('title = "My mirror"\nbase_url = "https://example.org/pith"\npage_size = 20\n')
    config = load_settings(tmp_path / "site.toml")
    assert config.title == "My mirror" and config.page_size == 20
    assert config.base_url == "https://example.org/pith/" and config.base_path == "/pith/" and config.has_origin
    assert config.url("/a/b.html") == "/pith/a/b.html"
    assert config.absolute_url("feed.xml") == "https://example.org/pith/feed.xml"
    assert SiteConfig(base_url="/sub/").absolute_url("x") == "/sub/x"  # no origin: the site-internal path


@pytest.mark.parametrize("text, reason", [
    ('titel = "typo"', "unknown setting"),
    ('title = 3', "title must be a string"),
    ('page_size = 0', "page_size must be an integer"),
    ('page_size = true', "page_size must be an integer"),
    ('search_max_shards = 5000', "search_max_shards must be an integer"),
    ('title = "unclosed', "site.toml"),
    ('base_url = "ftp://example.org/"', "only http and https"),
    ('title = "Mirror\\u0000"', "title holds the control character U+0000, which no page or feed may hold"),
    ('description = "In \\u001b[31mred"', "description holds the control character U+001B"),
    ('resolver_url = "javascript:alert(1)"', "resolver URL 'javascript:alert(1)': must be an http(s) URL with a host"),
    ('resolver_url = "https://"', "must be an http(s) URL with a host"),
    ('resolver_url = "/pith"', "must be an http(s) URL with a host"),
    ('resolver_url = "https://me:secret@pith.example"', "must not hold a user name or password"),
    ('resolver_url = "https://pith.example/\\" onclick=\\"x"', "a character a URL never holds"),
    ('resolver_url = "https://[::1/"', "must be an http(s) URL with a host (invalid IPv6 URL)"),
    ('resolver_url = "https://pith.example:70000/"', "(port out of range 0-65535)"),
    ('base_url = "https://[::1/mirror/"', "base URL 'https://[::1/mirror/': invalid IPv6 URL"),
    ('title = ""', "title is empty"), ('title = " \\t"', "title is empty"),  # (an empty <title> is no HTML)
])
def test_a_bad_setting_is_refused_naming_the_file(tmp_path, text, reason):
    (tmp_path / "site.toml").write_text(text)
    with pytest.raises(SettingsError, match=re.escape(reason)) as caught:
        load_settings(tmp_path / "site.toml")
    assert "site.toml" in str(caught.value) and "secret" not in str(caught.value)


def test_a_settings_file_that_is_not_utf8_is_refused_naming_the_file(tmp_path):
    """TOML is UTF-8: a site.toml saved in Latin-1 is a one-line error, not a traceback."""
    (tmp_path / "site.toml").write_bytes('title = "Gödel"\n'.encode("latin-1"))
    with pytest.raises(SettingsError, match=r"site\.toml: cannot read: 'utf-8' codec can't decode byte 0xf6"):
        load_settings(tmp_path / "site.toml")


def test_a_description_may_run_over_lines(tmp_path):
    (tmp_path / "site.toml").write_text('description = """Papers we cite.\n\tAll verified."""\n')
    assert load_settings(tmp_path / "site.toml").description == "Papers we cite.\n\tAll verified."


def test_the_resolver_url_is_the_link_to_the_resolver(tmp_path):
    from site_builder.keys import load_trust_set
    from site_builder.rendering import SiteRenderer, template_dirs

    (tmp_path / "site.toml").write_text('resolver_url = "https://resolver.example/pith"\n')
    config = load_settings(tmp_path / "site.toml")
    page = SiteRenderer(config, template_dirs(None), load_trust_set()).render_text("404.html")
    assert '<a href="https://resolver.example/pith">resolver.example</a>' in page
    for url, name in [("https://pith.science", "pith.science"),
                      ("https://resolver.example:8443/pith/", "resolver.example:8443")]:
        assert SiteConfig(resolver_url=url).resolver_name == name


@pytest.mark.parametrize("value, reason", [
    ("relative/path", "start with '/'"), ("https://e.example/?q=1", "query"), ("https://e.example/#top", "fragment"),
    ("/a b/", "' '"), ("/x\x7f/", "'\\x7f'"),
    ("//e.example/mirror/", "a host but no scheme"),  # (it named no host the links could use: they left it out)
    ("https:///mirror/", "no host"),
    ("https://me:secret@e.example/", "user name or password"),  # (every absolute link would publish them)
    ("https://token@e.example/", "user name or password"),  # (a user name alone: a token given as one)
    ("/x\x9f/", "'\\x9f'"), ("/x\x1f/", "'\\x1f'"),  # (the last C1 control, the last C0 control)
    ("//me:secret@e.example/", "user name or password"), ("https://me:secret@e.example/?q", "user name or password"),
    # (what urllib cannot parse is a line, not a traceback; a host no resolver could look up is none)
    ("https://[::1/", "invalid IPv6 URL"), ("https://e.example:99999/", "port out of range"),
    ("https://e.example:https/", "port could not be cast"), ("https://e..example/", "'e..example' is not a host"),
    ("https://e.example:0/", "port 0"),
    ("/a/../b/", "'..' segment"), ("https://e.example/./b/", "'.' or '..' segment"),  # (a browser drops them)
])
def test_a_base_url_that_is_not_a_plain_site_address_is_refused(value, reason):
    with pytest.raises(SettingsError, match=re.escape(reason)) as caught:
        normalize_base_url(value)
    assert "secret" not in str(caught.value) and "token" not in str(caught.value)  # (not printed to a CI log)


@pytest.mark.parametrize("value", ["/papers!/", "/pith/~mirror/", "/my%20mirror/", "https://[::1]:8443/mirror/",
                                   "http://localhost:8000/", "/v1.2/..a/"])
def test_a_base_url_holding_only_what_a_url_may_hold_is_taken(value):
    """Only the characters a URL never holds as they are are refused: sub-delimiters, a tilde, an escape and a
    port are a site's address, as written."""
    assert normalize_base_url(value) == value


@pytest.mark.parametrize("value, uri", [("https://e.example/caf\u00e9/", "https://e.example/caf%C3%A9/"),
                                        ("/caf\u00e9", "/caf%C3%A9/"),
                                        ("https://b\u00fccher.example:8443/a", "https://xn--bcher-kva.example:8443/a/"),
                                        ("HTTPS://E.example/Pith", "https://E.example/Pith/")])
def test_a_base_url_beyond_ascii_is_taken_as_the_uri_it_names(value, uri):
    """An IRI is a site's address too, but a sitemap's <loc> and a feed's links must be URIs, and a browser's
    location.pathname (what live reload compares with) is one: the path is percent-encoded, the host IDNA."""
    assert normalize_base_url(value) == uri


@pytest.mark.parametrize("key, low, high", [("page_size", 1, 10_000), ("search_shard_size", 1, 10_000_000),
                                            ("search_max_shards", 1, 1024)])
def test_each_count_is_taken_from_its_lowest_to_its_highest_value_and_refused_beyond(tmp_path, key, low, high):
    settings = tmp_path / "site.toml"
    for value in (low, high):
        settings.write_text(f"{key} = {value}\n")
        assert getattr(load_settings(settings), key) == value
    for value in (low - 1, high + 1):
        settings.write_text(f"{key} = {value}\n")
        with pytest.raises(SettingsError, match=re.escape(f"{key} must be an integer from {low:,} to {high:,}")):
            load_settings(settings)


def test_a_settings_file_of_at_most_one_megabyte_is_read_and_a_larger_one_refused(tmp_path):
    settings = tmp_path / "site.toml"
    megabyte = 1 << 20
    head = b'title = "Big"\n#'
    settings.write_bytes(head + b"x" * (megabyte - len(head) - 1) + b"\n")
    assert settings.stat().st_size == megabyte and load_settings(settings).title == "Big"
    settings.write_bytes(head + b"x" * (megabyte - len(head)) + b"\n")
    with pytest.raises(SettingsError, match=f"site.toml: {megabyte + 1} bytes is over the {megabyte}-byte limit"):
        load_settings(settings)


def test_a_settings_file_that_is_a_link_to_a_file_is_read(tmp_path):
    """The settings file is one the user names (as the keys file), so a link to a shared one is followed; a
    link to what is not a regular file is refused (tests/test_rendering.py)."""
    (tmp_path / "shared.toml").write_text('title = "Shared"\n')
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "site.toml").symlink_to(tmp_path / "shared.toml")
    assert load_settings(tmp_path / "project" / "site.toml").title == "Shared"


@pytest.mark.parametrize("text", ['about_file = "/proc/self/environ"', 'static_dir = "/home"',
                                  'about_file = "../secret.md"', 'static_dir = "site/../.."'])
def test_a_path_out_of_the_settings_folder_is_refused(tmp_path, text):
    (tmp_path / "site.toml").write_text(text)
    with pytest.raises(SettingsError, match="leads out of the folder") as caught:
        load_settings(tmp_path / "site.toml")
    assert "site.toml" in str(caught.value)


def test_an_absolute_path_inside_the_settings_folder_is_refused_as_absolute(tmp_path):
    """An absolute path that happens to lead into the project names it on one machine alone: refused, and said
    as what it is, not as a path that leads out of the folder."""
    (tmp_path / "static").mkdir()
    (tmp_path / "site.toml").write_text(f'static_dir = "{tmp_path / "static"}"\n')
    with pytest.raises(SettingsError) as caught:
        load_settings(tmp_path / "site.toml")
    assert str(caught.value) == (f"{tmp_path / 'site.toml'}: static_dir = '{tmp_path / 'static'}' is an absolute "
                                 f"path; name it relative to the folder the settings file is in, which may be "
                                 f"checked out anywhere")


@pytest.mark.parametrize("text", ['static_dir = "."', 'static_dir = "./"', 'about_file = ""', 'static_dir = " "',
                                  'static_dir = "static/.."'])
def test_the_settings_folder_itself_is_refused_as_the_static_folder_or_about_file(tmp_path, text):
    """The static folder would copy the whole project (bundles, cache key file beside it, .git) into the site."""
    (tmp_path / "site.toml").write_text(text)
    with pytest.raises(SettingsError, match="is the folder the settings file is in itself") as caught:
        load_settings(tmp_path / "site.toml")
    assert "site.toml" in str(caught.value)


def test_a_link_out_of_the_settings_folder_is_refused_and_one_inside_it_is_not(tmp_path):
    project = tmp_path / "project"
    (project / "pages").mkdir(parents=True)
    (project / "pages" / "about.md").write_text("# About")
    (tmp_path / "secret").mkdir()
    (project / "static").symlink_to(tmp_path / "secret")
    (project / "site.toml").write_text('about_file = "pages/about.md"\n')
    with pytest.raises(SettingsError, match="static_dir = 'static' leads out"):
        load_settings(project / "site.toml")
    (project / "static").unlink()
    (project / "static").symlink_to(project / "pages")
    config = load_settings(project / "site.toml")
    assert project_paths(project / "site.toml", config) == (project / "pages" / "about.md", project / "static")


def test_the_settings_readme_shows_load_and_its_numbers_are_the_defaults(tmp_path):
    """README's example ``site.toml`` is one a user can copy: it loads, and the numbers and the resolver it
    shows are what a build uses without it."""
    import tomllib
    from pathlib import Path

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text("utf-8")
    example = re.search(r"### Settings .*?```toml\n(.*?)```", readme, re.S).group(1)
    (tmp_path / "site.toml").write_text(example)
    config = load_settings(tmp_path / "site.toml")
    assert config.title == "My pith mirror" and config.base_url == "https://user.github.io/mirror/"
    shown = tomllib.loads(example)
    for name in ("page_size", "search_shard_size", "search_max_shards", "resolver_url"):
        assert shown[name] == getattr(SiteConfig(), name) == getattr(config, name), name

