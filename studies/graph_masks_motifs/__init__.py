"""Mask sweep on motif graphs: the code is the graph studies' shared mask sweep (:mod:`studies._graphs.mask_sweep`)."""

from studies._graphs.mask_sweep import blocks, render, resolve, run, summary

__all__ = ["blocks", "render", "resolve", "run", "summary"]
