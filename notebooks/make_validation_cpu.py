#!/usr/bin/python3
"""Writes notebooks/validation_cpu.ipynb (kept so the notebook's source is reviewable as Python)."""
import os
import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

cells = [
    new_markdown_cell(
        "# Predicted against measured on this CPU\n\n"
        "`experiments/validation_cpu/run.py` calibrates a device profile for small-110m, then serves "
        "three loads with the continuous and chunked schedulers for real and predicts them from the "
        "profile, in two modes: **replay** (the real run's own iterations re-costed: the cost model's "
        "error alone) and **predict** (an independent simulation of the same workload: what a what-if "
        "relies on).\n\n"
        "Set `SERVESIM_RESULTS` to read another results folder and `SERVESIM_FIGURES` to write the PNGs elsewhere."),
    new_code_cell(
        "import json, os\n"
        "import numpy as np\n"
        "import matplotlib\n"
        "matplotlib.use('Agg')\n"
        "import matplotlib.pyplot as plt\n"
        "import pandas as pd\n\n"
        "results = os.environ.get('SERVESIM_RESULTS', '../experiments/results/cpu')\n"
        "figures = os.environ.get('SERVESIM_FIGURES', results)\n"
        "os.makedirs(figures, exist_ok=True)\n"
        "summary = pd.read_csv(os.path.join(results, 'summary.csv'))\n"
        "meta = json.load(open(os.path.join(results, 'metadata.json')))\n"
        "points = [f'{s}_{l}' for s, l in summary[['scheduler', 'load']].drop_duplicates().itertuples(index=False)]\n"
        "iters = {p: pd.read_csv(os.path.join(results, p, 'iterations.csv')) for p in points}\n"
        "reqs = {p: pd.read_csv(os.path.join(results, p, 'requests.csv')) for p in points}\n"
        "meta"),
    new_markdown_cell("## Errors per point"),
    new_code_cell(
        "table = summary.set_index(['scheduler', 'load', 'mode'])[[\n"
        "    'iteration_mape_all', 'iteration_mape_decode', 'iteration_mape_prefill', 'iteration_mape_mixed',\n"
        "    'ttft_p50_rel_error', 'ttft_p90_rel_error', 'tpot_p50_rel_error', 'tpot_p90_rel_error']]\n"
        "(table * 100).round(1)"),
    new_markdown_cell("## Per-iteration time: predicted against measured"),
    new_code_cell(
        "fig, axes = plt.subplots(1, len(points), figsize=(3.2 * len(points), 3.4), sharex=True, sharey=True)\n"
        "colors = {'decode': 'tab:blue', 'prefill': 'tab:orange', 'mixed': 'tab:green'}\n"
        "for ax, p in zip(np.atleast_1d(axes), points):\n"
        "    it = iters[p]\n"
        "    for kind, g in it.groupby('kind'):\n"
        "        ax.scatter(g.measured_s * 1e3, g.predicted_s * 1e3, s=4, alpha=0.5, color=colors.get(kind), label=kind)\n"
        "    lo = min(it.measured_s.min(), it.predicted_s.min()) * 1e3; hi = max(it.measured_s.max(), it.predicted_s.max()) * 1e3\n"
        "    ax.plot([lo, hi], [lo, hi], 'k--', lw=0.8)\n"
        "    ax.set_xscale('log'); ax.set_yscale('log'); ax.set_title(p, fontsize=8)\n"
        "    ax.set_xlabel('measured (ms)')\n"
        "np.atleast_1d(axes)[0].set_ylabel('predicted (ms)'); np.atleast_1d(axes)[0].legend(fontsize=7)\n"
        "fig.suptitle(f\"per-iteration time, profile cost model, commit {meta['commit']}\")\n"
        "fig.tight_layout()\n"
        "fig.savefig(os.path.join(figures, 'iteration_scatter.png'), dpi=110)"),
    new_markdown_cell("## TTFT and TPOT distributions: measured, replay and predict"),
    new_code_cell(
        "fig, axes = plt.subplots(2, len(points), figsize=(3.2 * len(points), 6))\n"
        "axes = np.array(axes).reshape(2, len(points))\n"
        "for col, p in enumerate(points):\n"
        "    r = reqs[p]\n"
        "    for row, metric in enumerate(['ttft', 'tpot']):\n"
        "        ax = axes[row, col]\n"
        "        for source, style in [('measured', '-'), ('replay', ':'), ('predict', '--')]:\n"
        "            v = np.sort(r[f'{source}_{metric}_s'].dropna().to_numpy()) * 1e3\n"
        "            if len(v): ax.step(v, np.arange(1, len(v) + 1) / len(v), style, where='post', label=source)\n"
        "        ax.set_xlabel(f'{metric.upper()} (ms)'); ax.set_title(p, fontsize=8); ax.grid(alpha=0.3)\n"
        "        if col == 0: ax.set_ylabel('CDF')\n"
        "axes[0, 0].legend(fontsize=7)\n"
        "fig.tight_layout()\n"
        "fig.savefig(os.path.join(figures, 'ttft_tpot_cdfs.png'), dpi=110)"),
    new_markdown_cell("Sanity of the results file (the notebook fails if it is malformed):"),
    new_code_cell(
        "assert set(summary['mode']) == {'replay', 'predict'}\n"
        "assert summary[['iteration_mape_all', 'ttft_p50_rel_error', 'tpot_p50_rel_error']].notna().all().all()\n"
        "for p in points:\n"
        "    assert (iters[p].measured_s > 0).all() and (iters[p].predicted_s > 0).all(), p\n"
        "print(len(points), 'points,', sum(len(i) for i in iters.values()), 'iterations')"),
]
nb = new_notebook(cells=cells, metadata={
    "kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"},
    "language_info": {"name": "python"}})
nbformat.write(nb, os.path.join(os.path.dirname(os.path.abspath(__file__)), "validation_cpu.ipynb"))
