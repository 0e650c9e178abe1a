"""Which template files each output unit is made from, so that an edited template renders again only the pages
that use it.

A unit names the templates it renders (``Unit.templates``; a record's, ``pages.RECORD_TEMPLATES``).  A template
uses those it extends, includes or imports (``jinja2.meta``), the partials it asks ``sitewide()`` for, and those the
renderer's helpers render for it (``rendering.HELPER_TEMPLATES``: a record's row in lists, its table of checks).
They are read from its syntax tree, so every branch counts, whatever a page's data.  A unit's key covers the
source of every template it uses, as the loader finds it by name (the user's folder over the built-in one), and
one that is not there (``{% include "x.html" ignore missing %}``) as missing: adding it changes the key too.

Where a template names another by an expression (``{% include name %}``), or cannot be read or parsed, what it
uses is not known, and a unit that reaches it depends on every template file (``identity``), as does a unit that
names no templates (``EVERY_TEMPLATE``).  The build id always depends on every one: the home, statistics and
report pages are rendered on every build.
"""

from __future__ import annotations

import hashlib
from typing import Iterable, Mapping

import jinja2
import jinja2.meta
from jinja2 import nodes

EVERY_TEMPLATE = None  # a unit's templates where it may use any of them
_MISSING = "missing"  # (a template not there: what a unit's key says of it)


def references(env: jinja2.Environment, source: str, helpers: Mapping[str, str]) -> list[str] | None:
    """The names of the templates a template of *source* uses directly, sorted; None where it names one by an
    expression, hands ``sitewide`` on to be called elsewhere, or does not parse (what it uses is not known).
    *helpers*: the globals that render a template of their own (name -> that template)."""
    try:
        tree = env.parse(source)
    except jinja2.TemplateSyntaxError:
        return None
    found: set[str] = set()
    for name in jinja2.meta.find_referenced_templates(tree):
        if name is None:
            return None
        found.add(name)
    called: set[int] = set()
    for call in tree.find_all(nodes.Call):
        if isinstance(call.node, nodes.Name) and call.node.name == "sitewide":
            partial = call.args[0] if len(call.args) == 1 else None
            if (not isinstance(partial, nodes.Const) or not isinstance(partial.value, str) or call.kwargs
                    or call.dyn_args or call.dyn_kwargs):
                return None
            found.add(partial.value)
            called.add(id(call.node))
    for name in tree.find_all(nodes.Name):
        if name.name == "sitewide" and id(name) not in called:
            return None  # (given another name, or passed on: whatever it renders is not known)
        if name.name in helpers:
            found.add(helpers[name.name])
    return sorted(found)


class TemplateUses:
    """The templates of one set of template files (their digest, ``identity``), looked at as units ask.

    *known*: the references of the sources seen before (sha256 of a source -> ``references``), which the build
    cache keeps between builds (parsing the ~25 templates a site uses takes ~25 ms); what is parsed here is added
    to it, and ``learned`` says so (``to_keep``: what the next build needs)."""

    def __init__(self, env: jinja2.Environment, identity: str, helpers: Mapping[str, str],
                 known: dict[str, list[str] | None]):
        self.identity = identity
        self.known = known
        self.learned = False
        self._env = env
        self._helpers = helpers
        self._looked: dict[str, tuple[str, list[str] | None]] = {}
        self._digests: dict[tuple[str, ...] | None, str] = {}

    def _look(self, name: str) -> tuple[str, list[str] | None]:
        """The template *name* as the loader finds it: the sha256 of its source (or ``_MISSING``) and the
        templates it uses (None: not known)."""
        found = self._looked.get(name)
        if found is None:
            try:
                source = self._env.loader.get_source(self._env, name)[0]  # type: ignore[union-attr]
            except jinja2.TemplateNotFound:
                found = (_MISSING, [])
            except (jinja2.TemplateError, OSError, UnicodeError):
                found = ("", None)  # (a unit using it fails to render, and says why)
            else:
                sha = hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()
                if sha not in self.known:
                    self.known[sha] = references(self._env, source, self._helpers)
                    self.learned = True
                found = (sha, self.known[sha])
            self._looked[name] = found
        return found

    def to_keep(self) -> dict[str, list[str] | None]:
        """The references of the sources looked at here: those of templates edited since are not kept."""
        return {sha: refs for sha, refs in self._looked.values() if sha in self.known}

    def uses(self, roots: Iterable[str]) -> dict[str, str] | None:
        """Every template a unit rendering *roots* uses, by name, with its source's sha256 (``_MISSING``);
        None where one of them uses what is not known."""
        seen: dict[str, str] = {}
        todo = list(roots)
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            sha, refs = self._look(name)
            if refs is None:
                return None
            seen[name] = sha
            todo.extend(refs)
        return seen

    def digest(self, roots: tuple[str, ...] | None) -> str:
        """What a unit's key says of its templates: the digest of the names and sources of those it uses, or
        ``identity`` (every template file) where *roots* is ``EVERY_TEMPLATE`` or what they use is not known."""
        found = self._digests.get(roots)
        if found is None:
            used = self.uses(roots) if roots is not EVERY_TEMPLATE else None
            if used is None:
                found = self.identity
            else:
                h = hashlib.sha256(b"templates\0")
                for name, sha in sorted(used.items()):
                    h.update(b"%d:%s%s\0" % (len(name.encode("utf-8", "surrogatepass")),
                                             name.encode("utf-8", "surrogatepass"), sha.encode()))
                found = h.hexdigest()
            self._digests[roots] = found
        return found
