"""Compares two folders of tools/simulate_identity/run.sh: which files are
byte-identical, and the largest relative difference of any number in the
CSVs that are not (docs/redesign.md).

Usage: /usr/bin/python3 tools/simulate_identity/compare.py BEFORE AFTER"""
import csv
import os
import sys


def main(a, b):
    worst, where, files, same, differ = 0.0, None, 0, 0, []
    for root, _, names in os.walk(a):
        for name in sorted(names):
            if name == "hashes.txt":
                continue
            pa = os.path.join(root, name)
            pb = os.path.join(b, os.path.relpath(pa, a))
            files += 1
            ta, tb = open(pa).read(), open(pb).read() if os.path.exists(pb) else None
            if ta == tb:
                same += 1
                continue
            differ.append(os.path.relpath(pa, a))
            if not name.endswith(".csv") or tb is None:
                continue
            for ra, rb in zip(csv.reader(ta.splitlines()), csv.reader(tb.splitlines())):
                for x, y in zip(ra, rb):
                    if x == y:
                        continue
                    try:
                        fx, fy = float(x), float(y)
                    except ValueError:  # a row of another kind: the runs took other paths
                        fx, fy = 0.0, 1.0
                    rel = abs(fx - fy) / max(abs(fx), abs(fy), 1e-300)
                    if rel > worst:
                        worst, where = rel, (os.path.relpath(pa, a), x, y)
    print(f"{files} files, {same} byte-identical")
    for d in differ:
        print(f"  differs: {d}")
    if where:
        print(f"largest relative difference of a CSV number: {worst:.3g} ({where[0]}: {where[1]} vs {where[2]})")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
