"""What makes a URL one a request can be made to, or one a page may link to (urls.py)."""

from __future__ import annotations

import pytest

from site_builder.urls import credentials_left_out, is_url, linkable, on_resolver, unfetchable


@pytest.mark.parametrize("text, said_to_be", [
    ("https://mirror.example/", True), ("HTTP://mirror.example", True), ("Https://x", True),
    ("output", False), ("./https://x", False), ("ftp://mirror.example/", False), ("https:/x", False),
    ("httpss://x", False), ("", False),
])
def test_text_is_taken_for_an_http_url_by_its_scheme_in_any_letter_case(text, said_to_be):
    """A ``--live`` that is not one is a folder: "output" is read from disk, "HTTPS://..." fetched."""
    assert is_url(text) is said_to_be


@pytest.mark.parametrize("url, said", [
    ("https://token@mirror.example/", "https://…@mirror.example"),  # (a token given as the user name)
    ("https://:secret@mirror.example/", "https://…@mirror.example"),
    ("https://me:secret@mirror.example:8443/", "https://…@mirror.example"),
    ("https://mirror.example/", None), ("https://mirror.example/a@b/", None),  # (an @ in the path holds none)
])
def test_a_url_holding_either_a_user_name_or_a_password_is_said_without_them(url, said):
    assert credentials_left_out(url) == said


@pytest.mark.parametrize("url, problem", [
    ("https://mirror.example/", None), ("http://127.0.0.1:8000/x", None), ("https://[::1]:8443/", None),
    ("https://[::1/", "invalid IPv6 URL"), ("https://mirror.example:99999/", "port out of range 0-65535"),
    ("https://a..b/", "host 'a..b' is not a host name"), ("https://", "no host"),
    ("ftp://mirror.example/", "not an http(s) URL"),
    ("https://mirror.example:0/", "port 0"),
])
def test_a_url_no_request_could_be_made_to_says_why(url, problem):
    """urllib raises ValueError, not OSError, for these as it parses them: the reason is said instead."""
    assert unfetchable(url) == problem


@pytest.mark.parametrize("url, linked", [
    ("http://creativecommons.org/licenses/by/4.0/", True), ("https://example.org:8080/terms?v=2&w=3#use", True),
    ("https://example.org/caf%C3%A9", True), ("HTTPS://EXAMPLE.ORG/", True), ("https://xn--bcher-kva.example/", True),
    ("https://example.org/terms of use", False), ("http://", False), ("https://example.org/100%", False),
    ("https://example.org/a#b#c", False), ("https://-bad..example/", False), ("https://a.example:99999/", False),
    ('https://example.org/"><script>', False), ("https://example.org/<x>", False), ("https://[::1]/", False),
    ("https://user:secret@example.org/", False), ("javascript:alert(1)", False), ("mailto:a@b.example", False),
    ("/papers/", False), ("CC BY 4.0", False), ("", False),
])
def test_a_url_is_linkable_only_where_an_href_holds_it_as_it_stands(url, linked):
    """What the W3C validator accepts in an href, of http(s) URLs with a host a request could reach."""
    assert linkable(url) is linked


@pytest.mark.parametrize("resolver_url", ["https://resolver.example/pith", "https://resolver.example/pith/"])
@pytest.mark.parametrize("path", ["pith/ABC/bundle.json", "/pith/ABC/bundle.json"])
def test_a_path_on_the_resolver_has_one_slash_between_them_however_either_is_written(resolver_url, path):
    """site.toml may name the resolver with its closing "/" or without, and a page's links must not get a "//"
    (a server may not take it for the same path)."""
    assert on_resolver(resolver_url, path) == "https://resolver.example/pith/pith/ABC/bundle.json"
