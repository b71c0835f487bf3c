#!/usr/bin/python3
"""servesim's datasheet predictions beside published measurements.

Each row of measurements.csv is one published number (its source, URL,
engine, setting) with the `servesim simulate` arguments that predict it
(servesim_args), the summary.json value that is the prediction
(summary_key, times scale: seconds to ms) and nothing else: the roofline
with its default efficiencies, nothing fitted to these rows. Rows whose
arguments need a flag this servesim lacks (--tensor-parallel-size) are
kept with an empty prediction and a note.

Writes into --out:
  results.csv    id, group, engine, metric, unit, published, predicted, error_pct
                 ((predicted - published) / published, in %), note, command
  metadata.json  the commit, the machine, the command, the date

Usage: experiments/published/run.py [--servesim BIN] [--out DIR]
(every row simulates in well under a second: the whole study takes seconds)
"""
import argparse
import csv
import datetime
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
import provenance  # noqa: E402

# Flags a row may use that a servesim build may not have yet.
OPTIONAL_FLAGS = ["--tensor-parallel-size"]


def read_measurements(path=os.path.join(HERE, "measurements.csv")):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def simulate(servesim, args):
    cmd = [servesim, "simulate", "--quiet", "--json", *args]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr}")
    return json.loads(p.stdout)


def lookup(summary, key):
    """summary['a']['b'] for key 'a.b'."""
    for part in key.split("."):
        summary = summary[part]
    return summary


def tracked_files_modified():
    """Whether the checkout's tracked files differ from its commit (the servesim built from it may too)."""
    return bool(subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servesim", default=os.path.join(ROOT, "build/me/cli/servesim"))
    ap.add_argument("--out", default=HERE)
    opts = ap.parse_args()
    os.makedirs(opts.out, exist_ok=True)
    p = subprocess.run([opts.servesim, "simulate", "--help"], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{opts.servesim} simulate --help failed ({p.returncode}): {p.stderr}")
    missing = [f for f in OPTIONAL_FLAGS if f not in p.stdout]

    summaries, results = {}, []
    for m in read_measurements():
        args = m["servesim_args"].split()
        published = float(m["published"])
        row = {"id": m["id"], "group": m["group"], "engine": m["engine"], "metric": m["metric"], "unit": m["unit"],
               "published": m["published"], "predicted": "", "error_pct": "", "note": "",
               "command": "servesim simulate --quiet --json " + m["servesim_args"]}
        lacking = [f for f in missing if f in args]
        if lacking:
            row["note"] = f"this servesim has no {' '.join(lacking)}"
        else:
            key = tuple(args)
            if key not in summaries:
                print(f"{m['id']}: simulating", file=sys.stderr, flush=True)
                summaries[key] = simulate(opts.servesim, args)
            predicted = lookup(summaries[key], m["summary_key"]) * float(m["scale"])
            row["predicted"] = f"{predicted:.6g}"
            row["error_pct"] = f"{100 * (predicted - published) / published:.1f}"
        results.append(row)

    with open(os.path.join(opts.out, "results.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(results[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(results)
    with open(os.path.join(opts.out, "metadata.json"), "w") as f:
        json.dump({"command": " ".join(sys.argv), "date": datetime.datetime.now(datetime.timezone.utc)
                   .isoformat(timespec="seconds"), "commit": provenance.commit(),
                   "tracked_files_modified": tracked_files_modified(), "machine": provenance.machine(),
                   "servesim": opts.servesim, "servesim_lacks": missing,
                   "note": "datasheet predictions (roofline, default efficiencies); the machine only ran the "
                           "simulator"}, f, indent=2)
        f.write("\n")

    print(f"{'id':<20} {'metric':<20} {'unit':<11} {'published':>10} {'predicted':>10} {'error':>8}")
    for r in results:
        err = f"{r['error_pct']}%" if r["error_pct"] else r["note"]
        print(f"{r['id']:<20} {r['metric']:<20} {r['unit']:<11} {r['published']:>10} {r['predicted']:>10} {err:>8}")
    print(f"wrote {os.path.join(opts.out, 'results.csv')}", file=sys.stderr)


if __name__ == "__main__":
    main()
