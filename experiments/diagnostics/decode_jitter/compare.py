#!/usr/bin/python3
"""Two builds of servesim_decode_steps, alternated in short bursts.

For each round, each batch size and each build (base first, then head),
one burst of --seconds runs the same decode step over and over. Per burst:

  median_ms   the median step
  jitter_pct  the mean |step / median of its 9 neighbours - 1| (the step and
              4 on each side), in %: how far a step strays from the speed
              the machine had at that moment. This VM's speed drifts over
              seconds, so a whole-burst spread would mostly measure drift;
              the rolling median follows it.
  p90_over_median  the 90th percentile step over the median (the slow tail)

Writes bursts.csv (one row per burst), jitter.png (jitter by batch size,
each burst a dot and the mean a line) and prints a table of the means per
batch and build. The speed comparison that drift affects least is the
paired one: each round's head burst over the base burst just before it
(head/base, the median over rounds, and in how many rounds head was faster).

Usage: compare.py --base BIN --head BIN [--batches 1,4,8,16,24]
                  [--seconds 6] [--rounds 4] --out DIR
       compare.py --summarize DIR   (the table and plot again, from DIR/bursts.csv)
"""
import argparse
import csv
import os
import statistics
import subprocess
import sys

NEIGHBOURS = 4  # on each side of a step: the rolling median spans 9 steps
WARMUP_STEPS = 2  # the first steps of a burst (cold caches) are dropped


def jitter_pct(steps):
    """Mean |step / rolling median - 1| in %, over the steps that have
    NEIGHBOURS on each side."""
    devs = []
    for i in range(NEIGHBOURS, len(steps) - NEIGHBOURS):
        window = sorted(steps[i - NEIGHBOURS:i + NEIGHBOURS + 1])
        devs.append(abs(steps[i] / window[NEIGHBOURS] - 1))
    if not devs:
        raise ValueError(f"a burst of {len(steps)} steps is too short: "
                         f"it needs at least {2 * NEIGHBOURS + 1}")
    return 100 * sum(devs) / len(devs)


def burst_stats(steps):
    """median_ms, jitter_pct and p90_over_median of one burst's steps (ms)."""
    median = statistics.median(steps)
    ordered = sorted(steps)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return {"median_ms": median, "jitter_pct": jitter_pct(steps), "p90_over_median": p90 / median}


def read_steps(csv_text):
    """The step_ms column of servesim_decode_steps' output, warm-up dropped."""
    rows = list(csv.DictReader(csv_text.splitlines()))
    if not rows or "step_ms" not in rows[0]:
        raise ValueError("servesim_decode_steps wrote no step_ms column")
    return [float(r["step_ms"]) for r in rows][WARMUP_STEPS:]


def run_burst(binary, batch, seconds):
    done = subprocess.run([binary, "--batch", str(batch), "--seconds", str(seconds)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{binary} --batch {batch} failed: {done.stderr.strip()}")
    return read_steps(done.stdout)


def summarize(bursts):
    """Means over rounds per (batch, build): rows sorted by batch, base first."""
    groups = {}
    for b in bursts:
        groups.setdefault((b["batch"], b["build"]), []).append(b)
    rows = []
    for (batch, build), group in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] != "base")):
        rows.append({"batch": batch, "build": build, "bursts": len(group),
                     **{k: statistics.mean(g[k] for g in group)
                        for k in ("median_ms", "jitter_pct", "p90_over_median")}})
    return rows


def paired_speed(bursts):
    """Per batch: (median over rounds of head's median step / base's in the
    same round, rounds in which head was faster, rounds)."""
    pairs = {}
    for b in bursts:
        pairs.setdefault((b["batch"], b["round"]), {})[b["build"]] = b["median_ms"]
    ratios = {}
    for (batch, _), p in pairs.items():
        if "base" in p and "head" in p:
            ratios.setdefault(batch, []).append(p["head"] / p["base"])
    return {batch: (statistics.median(v), sum(r < 1 for r in v), len(v)) for batch, v in ratios.items()}


def format_table(rows, bursts=()):
    paired = paired_speed(bursts)
    lines = [f"{'batch':>5} {'build':>5} {'bursts':>6} {'median ms':>10} {'jitter %':>9} {'p90/median':>10}"
             f"  head/base (rounds head faster)"]
    for r in rows:
        line = (f"{r['batch']:>5} {r['build']:>5} {r['bursts']:>6} {r['median_ms']:>10.2f} "
                f"{r['jitter_pct']:>9.2f} {r['p90_over_median']:>10.3f}")
        if r["build"] == "head" and r["batch"] in paired:
            ratio, faster, rounds = paired[r["batch"]]
            line += f"  {ratio:.3f} ({faster} of {rounds})"
        lines.append(line)
    overall = {}
    for r in rows:
        overall.setdefault(r["build"], []).append(r["jitter_pct"])
    lines.append("mean jitter over batch sizes: " +
                 ", ".join(f"{build} {statistics.mean(v):.2f}%" for build, v in overall.items()))
    return "\n".join(lines)


def read_bursts(path):
    """bursts.csv as compare.py wrote it, numbers parsed."""
    try:
        with open(path) as f:
            rows = list(csv.DictReader(f))
    except FileNotFoundError:
        sys.exit(f"{path}: no such file (run compare.py with --base, --head and --out first)")
    try:
        return [{"round": int(r["round"]), "batch": int(r["batch"]), "build": r["build"],
                 **{k: float(r[k]) for k in ("median_ms", "jitter_pct", "p90_over_median")}} for r in rows]
    except (KeyError, ValueError) as e:
        sys.exit(f"{path}: not a bursts.csv of compare.py ({e})")


def plot(bursts, rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.4, 4))
    for build, colour, shift in (("base", "tab:red", -0.15), ("head", "tab:blue", 0.15)):
        batches = sorted({r["batch"] for r in rows})
        xs = [batches.index(b["batch"]) + shift for b in bursts if b["build"] == build]
        ax.scatter(xs, [b["jitter_pct"] for b in bursts if b["build"] == build], color=colour, alpha=0.5, s=14)
        means = [r["jitter_pct"] for r in rows if r["build"] == build]
        ax.plot([i + shift for i in range(len(means))], means, color=colour, label=f"{build} (mean)")
    ax.set_xticks(range(len(batches)), [str(b) for b in batches])
    ax.set_xlabel("decode batch (sequences)")
    ax.set_ylabel("step jitter: mean |step / 9-step median - 1| (%)")
    ax.set_ylim(bottom=0)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", help="servesim_decode_steps built from the base")
    ap.add_argument("--head", help="servesim_decode_steps built from the change")
    ap.add_argument("--summarize", metavar="DIR", help="no runs: the table and plot from DIR/bursts.csv")
    ap.add_argument("--batches", default="1,4,8,16,24")
    ap.add_argument("--seconds", type=float, default=6)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.summarize:
        bursts = read_bursts(os.path.join(args.summarize, "bursts.csv"))
        print(format_table(summarize(bursts), bursts))
        plot(bursts, summarize(bursts), os.path.join(args.summarize, "jitter.png"))
        return
    if not (args.base and args.head and args.out):
        ap.error("--base, --head and --out are needed (or --summarize DIR)")
    try:
        batches = [int(b) for b in args.batches.split(",")]
    except ValueError:
        ap.error(f"--batches: expected comma-separated integers, got '{args.batches}'")
    if args.rounds < 1 or args.seconds <= 0 or any(b < 1 for b in batches):
        ap.error("--rounds, --seconds and each batch must be positive")
    os.makedirs(args.out, exist_ok=True)

    bursts = []
    for rnd in range(args.rounds):
        for batch in batches:
            for build, binary in (("base", args.base), ("head", args.head)):
                stats = burst_stats(run_burst(binary, batch, args.seconds))
                bursts.append({"round": rnd, "batch": batch, "build": build, **stats})
                print(f"round {rnd + 1}/{args.rounds} batch {batch:>2} {build}: median {stats['median_ms']:.2f} ms, "
                      f"jitter {stats['jitter_pct']:.2f}%", file=sys.stderr)
    with open(os.path.join(args.out, "bursts.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(bursts[0]))
        w.writeheader()
        w.writerows(bursts)
    rows = summarize(bursts)
    print(format_table(rows, bursts))
    plot(bursts, rows, os.path.join(args.out, "jitter.png"))


if __name__ == "__main__":
    main()
