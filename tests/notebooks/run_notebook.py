#!/usr/bin/python3
"""Executes a notebook with nbclient (Debian's python3-nbclient) and fails on any cell error.

Usage: run_notebook.py NOTEBOOK [--figures DIR] [--results DIR]
The notebook runs in its own folder; --figures sets SERVESIM_FIGURES so a test
writes its PNGs outside the source tree, --results sets SERVESIM_RESULTS (the
results folder a notebook reads, where it has that setting).
"""
import argparse
import os
import sys

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

parser = argparse.ArgumentParser()
parser.add_argument("notebook")
parser.add_argument("--figures")
parser.add_argument("--results")
opts = parser.parse_args()
if opts.figures:
    os.environ["SERVESIM_FIGURES"] = opts.figures
if opts.results:
    os.environ["SERVESIM_RESULTS"] = os.path.abspath(opts.results)
nb = nbformat.read(opts.notebook, as_version=4)
client = NotebookClient(nb, timeout=300, kernel_name="python3",
                        resources={"metadata": {"path": os.path.dirname(os.path.abspath(opts.notebook))}})
try:
    client.execute()
except CellExecutionError as e:
    print(f"{opts.notebook}: a cell failed:\n{e}", file=sys.stderr)
    sys.exit(1)
figures = [f for f in os.listdir(opts.figures)] if opts.figures else []
print(f"{opts.notebook}: {len(nb.cells)} cells ran; figures: {', '.join(sorted(figures))}")
