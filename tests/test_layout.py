"""The package's shape, held: a pipeline of modules without cycles, none too long to read, no code run from data,
no private parts of the libraries it builds on, and a test module beside every module with logic."""

from __future__ import annotations

import ast
import re

import pytest

from conftest import ROOT

PACKAGE = ROOT / "site_builder"
MODULES = {".".join(("site_builder", *p.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__"): p
           for p in sorted(PACKAGE.rglob("*.py"))}
# Modules without logic of their own to test: the package's version line, ``python -m``, the stages' folder,
# and the options (plain data, which every build test hands in).
NO_LOGIC = {"site_builder", "site_builder.__main__", "site_builder.stages", "site_builder.options"}


def imports_of(path) -> set[str]:
    """The package's modules *path* imports, those under ``if TYPE_CHECKING`` too."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("site_builder"):
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in MODULES)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("site_builder"))
    return found & MODULES.keys()


def test_no_module_imports_itself_back_through_others():
    graph = {name: imports_of(path) - {name} for name, path in MODULES.items()}
    cycles = []

    def walk(name, path):
        for dep in graph[name]:
            if dep in path:
                cycles.append(" -> ".join([*path[path.index(dep):], dep]))
            elif dep not in done:
                walk(dep, [*path, dep])
        done.add(name)
    done: set[str] = set()
    for name in sorted(graph):
        if name not in done:
            walk(name, [name])
    assert cycles == []


@pytest.mark.parametrize("name", sorted(MODULES))
def test_modules_and_functions_stay_short_enough_to_read(name):
    source = MODULES[name].read_text()
    assert len(source.splitlines()) <= 600
    long = [f"{node.name}: {node.end_lineno - node.lineno + 1} lines" for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 60]
    assert long == []


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_code_is_made_from_data_and_no_private_library_part_is_used(name):
    source = MODULES[name].read_text()
    tree = ast.parse(source)
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    imported = {a.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                for a in node.names} | {node.module.split(".")[0] for node in ast.walk(tree)
                                        if isinstance(node, ast.ImportFrom) and node.module}
    assert not names & {"eval", "exec", "compile", "__import__"}
    assert not imported & {"pickle", "marshal", "shelve", "dill"}
    attributes = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    assert not attributes & {"__new__", "__setstate__", "__reduce__"}  # (objects made past their constructor)
    assert not re.search(r"\b(jinja2|markupsafe)(\.\w+)*\._[a-z]", source)
    assert not re.search(r"from (jinja2|markupsafe)[\w.]* import [^\n]*\b_[a-z]", source)


@pytest.mark.parametrize("name", sorted(MODULES.keys() - NO_LOGIC))
def test_every_module_with_logic_has_its_test_module(name):
    parts = name.split(".")[1:]
    test = ROOT / "tests" / "/".join([*parts[:-1], f"test_{parts[-1]}.py"])
    assert test.is_file(), f"{name}: no {test.relative_to(ROOT)}"


def test_no_test_undoes_every_patch_of_its_own():
    """``monkeypatch.undo()`` undoes the autouse fixtures' patches too: the cache home of the test's own
    (conftest.user_cache_home), so that the builds after it read and write the user's real cache, under another
    key than the builds before it, and find none of their entries.  A patch for a part of a test is made in
    ``monkeypatch.context()``."""
    tests = sorted(path for path in (ROOT / "tests").rglob("*.py") if path.name != "test_layout.py")
    assert [str(path.relative_to(ROOT)) for path in tests if "monkeypatch.undo()" in path.read_text()] == []


def test_no_test_module_imports_another():
    """Shared fixtures and helpers live in conftest.py and the helper modules, never in a test module."""
    tests = sorted((ROOT / "tests").rglob("test_*.py"))
    wrong = [f"{path.relative_to(ROOT)}: {line.strip()}" for path in tests for line in path.read_text().splitlines()
             if re.match(r"\s*(from|import) test_\w+", line)]
    assert wrong == []
    fixtures = [path.relative_to(ROOT) for path in tests if "@pytest.fixture" in path.read_text()
                and re.search(r"@pytest.fixture[^\n]*\n(async )?def (project|bundles_dir|real_bundle)\(", path.read_text())]
    assert fixtures == []  # (the shared ones are defined once, in conftest.py)
