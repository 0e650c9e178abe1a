"""The stages of a build, one module each, in the order ``build.py`` runs them:
gather -> verify -> plan (select, then plan) -> render -> index -> publish -> remember.
``context`` holds what they all share."""
