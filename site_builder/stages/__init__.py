"""The stages of a build, one module each, in the order ``build.py`` runs them:
gather -> verify -> plan (select, then plan) -> render -> index -> publish -> remember.
``write`` is the one loop over the output kinds that render, index and publish write; ``context`` holds what they
all share."""
