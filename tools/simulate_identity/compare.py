"""Compares two folders of tools/simulate_identity/run.sh: which files are
byte-identical, and the largest relative difference of any number in the
CSVs that are not (docs/redesign.md).

With --drop-added, CSV columns and JSON keys that only AFTER has (outputs a
change added) are dropped from AFTER first, and the rest compared: a file
is then "identical apart from added fields" when nothing else differs.

Usage: /usr/bin/python3 tools/simulate_identity/compare.py [--drop-added] BEFORE AFTER"""
import csv
import io
import json
import os
import sys


def drop_added_csv(ta, tb):
    """tb's rows with only the columns ta's header names, as CSV text."""
    ha = next(csv.reader(ta.splitlines()), [])
    rows = list(csv.reader(tb.splitlines()))
    if not rows:
        return tb
    keep = [rows[0].index(c) for c in ha if c in rows[0]]
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    for r in rows:
        w.writerow([r[i] for i in keep if i < len(r)])
    return out.getvalue()


def drop_added_json(a, b):
    if isinstance(a, dict) and isinstance(b, dict):
        return {k: drop_added_json(a[k], v) for k, v in b.items() if k in a}
    return b


def same_apart_from_added(name, ta, tb):
    if name.endswith(".csv"):
        plain = lambda t: io.StringIO(t).read().replace('"', "")
        return plain(ta) == plain(drop_added_csv(ta, tb))
    if name.endswith(".json"):
        ja, jb = json.loads(ta), json.loads(tb)
        return ja == drop_added_json(ja, jb)
    return False


def main(a, b, drop_added=False):
    worst, where, files, same, added, differ = 0.0, None, 0, 0, 0, []
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
            if drop_added and tb is not None and same_apart_from_added(name, ta, tb):
                added += 1
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
    print(f"{files} files, {same} byte-identical" + (f", {added} identical apart from added fields" if drop_added else ""))
    for d in differ:
        print(f"  differs: {d}")
    if where:
        print(f"largest relative difference of a CSV number: {worst:.3g} ({where[0]}: {where[1]} vs {where[2]})")
    return 0


if __name__ == "__main__":
    args = sys.argv[1:]
    drop = "--drop-added" in args
    args = [x for x in args if x != "--drop-added"]
    if len(args) != 2:
        sys.exit(__doc__)
    sys.exit(main(args[0], args[1], drop))
