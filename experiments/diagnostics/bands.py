"""Bands of a measured quantity for the study's tables (floor_bands.py,
prefill_after_idle.py): the edges from a flag, and the [lo, hi) bands
from 0 to the last edge and above it."""
import sys


def parse_edges(text, flag, unit):
    """Ascending edges above 0 from a comma-separated flag value; exits
    naming the flag otherwise."""
    try:
        edges = [float(x) for x in text.split(",")]
        if edges != sorted(set(edges)) or edges[0] <= 0:
            raise ValueError
        return edges
    except ValueError:
        sys.exit(f"{flag}: ascending {unit} above 0, comma-separated, expected (got '{text}')")


def bounds(edges):
    """[(lo, hi)] from 0 to each edge and from the last edge on (hi None)."""
    return list(zip([0.0] + edges, edges + [None]))


def inside(value, lo, hi):
    return lo <= value and (hi is None or value < hi)
