"""Accuracy studies of attnmm, one folder each, run by one runner (``python -m studies``).

See README.md in this folder for how a study plugs in."""
