"""site-builder: verify pith bundles against pinned keys and build a static mirror."""

__version__ = "0.1.0"
