"""What the tests of the held-out diagnostics share: the committed
one-thread suite, and a copy of it whose first workload's committed
prediction was altered (which a diagnostic that re-predicts the suite
must refuse)."""
import json
import os
import shutil

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SUITE = os.path.join(ROOT, "experiments", "results", "heldout", "cpu_one_thread")


def altered_suite(tmp, metric, quantile, factor):
    """A copy of SUITE under `tmp` with its first workload's predicted
    `metric` (ttft_s, tpot_s) `quantile` times `factor`; its path."""
    suite = os.path.join(tmp, "suite")
    shutil.copytree(SUITE, suite, ignore=shutil.ignore_patterns("*.png", "iteration_breakdown.csv"))
    first = sorted(d for d in os.listdir(suite) if d.startswith("heldout"))[0]
    path = os.path.join(suite, first, "report_predict.json")
    with open(path) as f:
        report = json.load(f)
    report[metric]["predicted"][quantile] *= factor
    with open(path, "w") as f:
        json.dump(report, f)
    return suite
