#!/usr/bin/python3
"""servesim's datasheet predictions beside published measurements.

Each row of measurements.csv is one published number (its source, URL,
engine, setting) with the `servesim simulate` arguments that predict it
(servesim_args), the summary.json value that is the prediction
(summary_key, times scale: seconds to ms) and nothing else: the roofline
with its default efficiencies, nothing fitted to these rows.

Writes into --out:
  results.csv      id, group, engine, metric, unit, published, predicted, error_pct
                   ((predicted - published) / published, in %), note (empty: every row is predicted), command
  metadata.json    the commit, the machine, the command, the date, the run time
With --what-if also (the README's "What the misses teach"; none of these is applied to the defaults):
  whatif.csv       each what-if: its id, the row, the flags it sets on the row's command (replacing the row's own
                   value of a flag it has), the published value, the prediction and its error, the row's error
                   without them, the preemptions, the command
  diagnostics.csv  the other simulated figures the README cites: preemptions and running sequences of the
                   TensorRT-LLM rows, one decode step at 480 sequences, the offline rows' prefill share of the
                   simulated time and decode batch; each with its command

Usage: experiments/published/run.py [--servesim BIN] [--out DIR] [--what-if] [--scratch DIR]
(about 6 s with --what-if on a 2-core VM: every row simulates in well under a second)
"""
import argparse
import csv
import datetime
import json
import math
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
import provenance  # noqa: E402

TRTLLM = ["trtllm-128-128", "trtllm-128-2048", "trtllm-2048-128", "trtllm-2048-2048", "trtllm-1000-1000"]
TRTLLM_LONG = ["trtllm-128-2048", "trtllm-2048-2048", "trtllm-1000-1000"]
TRTLLM_SHORT = ["trtllm-128-128", "trtllm-2048-128"]
A100_TPOT = ["sglang-rps4-tpot", "vllm-rps4-tpot", "sglang-rps8-tpot", "vllm-rps8-tpot"]
OFFLINE = ["sglang-offline", "vllm-offline"]


def fixed(args, flag):
    """N of `flag fixed:N` in args."""
    value = args[args.index(flag) + 1]
    if not value.startswith("fixed:"):
        sys.exit(f"{flag} {value}: a what-if needs fixed lengths")
    return int(value[len("fixed:"):])


def no_evict_admission(args, summary):
    """--max-num-seqs = the whole sequences (prompt + output) the KV cache holds: with every request of the same
    lengths, what TensorRT-LLM's GUARANTEED_NO_EVICT admits; servesim has no such policy of its own."""
    block = summary["config"]["scheduler"]["block_size"]
    per_sequence = math.ceil((fixed(args, "--prompt-len") + fixed(args, "--output-len")) / block)
    seqs = summary["config"]["scheduler"]["num_gpu_blocks"] // per_sequence
    return ["--max-num-seqs", str(min(seqs, int(args[args.index("--max-num-seqs") + 1])))]


def board_80gib(args, summary):
    """--num-gpu-blocks that servesim's memory rule gives a board of 80 GiB instead of the preset's 80 GB."""
    c = summary["config"]
    budget = 80 * 2**30 * c["scheduler"]["gpu_memory_utilization"] - c["model"]["weight_bytes"]
    return ["--num-gpu-blocks", str(math.floor(budget / (c["scheduler"]["block_size"] *
                                                           c["model"]["kv_bytes_per_token"])))]


# (id, rows, flags: a list, or a function of the row's arguments and its summary that returns one)
WHAT_IFS = [
    ("memory-0.95-compute-0.85", TRTLLM_LONG, ["--memory-efficiency", "0.95", "--compute-efficiency", "0.85"]),
    ("compute-0.85", TRTLLM_SHORT, ["--compute-efficiency", "0.85"]),
    ("no-evict-admission", TRTLLM, no_evict_admission),
    ("iteration-overhead-0", TRTLLM, ["--iteration-overhead", "0us"]),
    ("board-80gib", TRTLLM, board_80gib),
    ("kv-cache-bf16", TRTLLM, ["--kv-cache-dtype", "auto"]),
    ("memory-0.70", ["gptfast-tp1", *A100_TPOT, *OFFLINE], ["--memory-efficiency", "0.70"]),
    ("memory-0.70-overhead-1ms", A100_TPOT, ["--memory-efficiency", "0.70", "--iteration-overhead", "1ms"]),
    ("memory-0.70-compute-0.60", OFFLINE, ["--memory-efficiency", "0.70", "--compute-efficiency", "0.60"]),
]
# One decode step of TensorRT-LLM's 128/2048 setting at 480 sequences (about that row's running batch): every
# prompt prefilled first (--scheduler continuous), then decode steps of all 480 at a context of prompt + 1.
DECODE_STEP_ROW = "trtllm-128-2048"
DECODE_STEP_SEQUENCES = 480
DECODE_STEP_CONTEXTS = [1100, 20]


def read_measurements(path=os.path.join(HERE, "measurements.csv")):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def simulate(servesim, args, out=None):
    cmd = [servesim, "simulate", "--quiet", "--json", *args, *(["--out", out] if out else [])]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr}")
    return json.loads(p.stdout)


def lookup(summary, key):
    """summary['a']['b'] for key 'a.b'."""
    for part in key.split("."):
        summary = summary[part]
    return summary


def with_flags(args, flags):
    """args with each `--flag value` of flags set: the row's own value replaced, or appended."""
    args = list(args)
    for flag, value in zip(flags[::2], flags[1::2]):
        if flag in args:
            args[args.index(flag) + 1] = value
        else:
            args += [flag, value]
    return args


def command(args):
    return "servesim simulate --quiet --json " + " ".join(args)


def iterations(folder):
    with open(os.path.join(folder, "iterations.csv"), newline="") as f:
        return list(csv.DictReader(f))


def write(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


def what_ifs(servesim, measurements, summaries, rows):
    out = []
    for name, ids, flags in WHAT_IFS:
        for id_ in ids:
            m = measurements[id_]
            args = m["servesim_args"].split()
            set_flags = flags(args, summaries[tuple(args)]) if callable(flags) else flags
            new_args = with_flags(args, set_flags)
            print(f"what-if {name}: {id_}", file=sys.stderr, flush=True)
            s = simulate(servesim, new_args)
            published = float(m["published"])
            predicted = lookup(s, m["summary_key"]) * float(m["scale"])
            out.append({"whatif": name, "row": id_, "flags": " ".join(set_flags), "published": m["published"],
                        "predicted": f"{predicted:.6g}",
                        "error_pct": f"{100 * (predicted - published) / published:.1f}",
                        "row_error_pct": rows[id_]["error_pct"], "preemptions": s["preemptions"],
                        "command": command(new_args)})
    return out


def diagnostics(servesim, measurements, summaries, scratch):
    out = []

    def add(id_, row, what, value, unit, args):
        out.append({"id": id_, "row": row, "what": what, "value": value, "unit": unit, "command": command(args)})

    for id_ in TRTLLM:
        args = measurements[id_]["servesim_args"].split()
        s = summaries[tuple(args)]
        add(f"{id_}-preemptions", id_, "preemptions (recompute)", s["preemptions"], "", args)
        add(f"{id_}-running", id_, "mean running sequences per step", f"{s['mean_batch']['sequences']:.4g}",
            "sequences", args)

    base = measurements[DECODE_STEP_ROW]["servesim_args"].split()
    n = str(DECODE_STEP_SEQUENCES)
    for context in DECODE_STEP_CONTEXTS:
        args = with_flags(base, ["--concurrency", n, "--num-requests", n, "--prompt-len", f"fixed:{context}",
                                 "--output-len", "fixed:3", "--scheduler", "continuous", "--max-num-seqs", n,
                                 "--max-num-batched-tokens", "8192"])
        folder = os.path.join(scratch, f"decode_step_{context}")
        simulate(servesim, args, folder)
        step = next(float(i["duration_s"]) for i in iterations(folder)
                    if i["kind"] == "decode" and i["decode_sequences"] == n)
        add(f"decode-step-{n}x{context}", DECODE_STEP_ROW,
            f"one decode step of {n} sequences at a context of {context} + 1 (the first such step)",
            f"{1e3 * step:.4g}", "ms", args)

    for id_ in OFFLINE:
        args = measurements[id_]["servesim_args"].split()
        folder = os.path.join(scratch, id_)
        simulate(servesim, args, folder)
        its = iterations(folder)
        total = sum(float(i["duration_s"]) for i in its)
        prefill = sum(float(i["duration_s"]) for i in its if int(i["prefill_tokens"]) > 0)
        decode = [int(i["decode_sequences"]) for i in its if int(i["prefill_tokens"]) == 0]
        add(f"{id_}-prefill-share", id_, "share of the simulated time in iterations with prefill tokens",
            f"{prefill / total:.4g}", "", args)
        add(f"{id_}-decode-batch", id_, "mean sequences of a decode-only iteration",
            f"{sum(decode) / len(decode):.4g}", "sequences", args)
        add(f"{id_}-preemptions", id_, "preemptions (recompute)", summaries[tuple(args)]["preemptions"], "", args)
    return out


def main():
    # Before anything is written: the study's own outputs are tracked files too.
    checkout_modified = provenance.tracked_files_modified()
    started = time.monotonic()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servesim", default=os.path.join(ROOT, "build/me/cli/servesim"))
    ap.add_argument("--out", default=HERE)
    ap.add_argument("--what-if", action="store_true", help="also write whatif.csv and diagnostics.csv")
    ap.add_argument("--scratch", default="/tmp/servesim_published",
                    help="with --what-if: servesim's outputs (iterations.csv) for diagnostics.csv")
    opts = ap.parse_args()
    os.makedirs(opts.out, exist_ok=True)

    measurements = {m["id"]: m for m in read_measurements()}
    summaries, results = {}, {}
    for m in measurements.values():
        args = m["servesim_args"].split()
        published = float(m["published"])
        key = tuple(args)
        if key not in summaries:
            print(f"{m['id']}: simulating", file=sys.stderr, flush=True)
            summaries[key] = simulate(opts.servesim, args)
        predicted = lookup(summaries[key], m["summary_key"]) * float(m["scale"])
        results[m["id"]] = {"id": m["id"], "group": m["group"], "engine": m["engine"], "metric": m["metric"],
                            "unit": m["unit"], "published": m["published"], "predicted": f"{predicted:.6g}",
                            "error_pct": f"{100 * (predicted - published) / published:.1f}", "note": "",
                            "command": "servesim simulate --quiet --json " + m["servesim_args"]}
    write(os.path.join(opts.out, "results.csv"), list(results.values()))
    if opts.what_if:
        write(os.path.join(opts.out, "whatif.csv"), what_ifs(opts.servesim, measurements, summaries, results))
        write(os.path.join(opts.out, "diagnostics.csv"),
              diagnostics(opts.servesim, measurements, summaries, opts.scratch))

    with open(os.path.join(opts.out, "metadata.json"), "w") as f:
        json.dump({"command": " ".join(sys.argv), "date": datetime.datetime.now(datetime.timezone.utc)
                   .isoformat(timespec="seconds"), "commit": provenance.commit(),
                   "tracked_files_modified": checkout_modified, "machine": provenance.machine(),
                   "servesim": opts.servesim, "what_if": opts.what_if,
                   "wall_s": round(time.monotonic() - started, 1),
                   "note": "datasheet predictions (roofline, default efficiencies); the machine only ran the "
                           "simulator"}, f, indent=2)
        f.write("\n")

    print(f"{'id':<20} {'metric':<20} {'unit':<11} {'published':>10} {'predicted':>10} {'error':>8}")
    for r in results.values():
        print(f"{r['id']:<20} {r['metric']:<20} {r['unit']:<11} {r['published']:>10} {r['predicted']:>10} "
              f"{r['error_pct'] + '%':>8}")
    print(f"wrote {os.path.join(opts.out, 'results.csv')}"
          + (", whatif.csv, diagnostics.csv" if opts.what_if else ""), file=sys.stderr)


if __name__ == "__main__":
    main()
