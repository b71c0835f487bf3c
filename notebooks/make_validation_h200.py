#!/usr/bin/python3
"""Writes notebooks/validation_h200.ipynb (kept so the notebook's source is reviewable as Python)."""
import os
import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

cells = [
    new_markdown_cell(
        "# Predicted against measured on an H200\n\n"
        "`experiments/gpu/run.sh` calibrated llama-3.2-1b and llama-3.1-8b on a lent H200, served three "
        "loads with the continuous and chunked schedulers for real, and predicted them from the profiles "
        "(**replay**: the real run's iterations re-costed; **predict**: an independent simulation). The "
        "per-point files are in `results.tar.gz`; this notebook unpacks it into a temporary folder.\n\n"
        "Set `SERVESIM_RESULTS` to read another results folder and `SERVESIM_FIGURES` to write the PNGs elsewhere."),
    new_code_cell(
        "import os, tarfile, tempfile\n"
        "import numpy as np\n"
        "import matplotlib\n"
        "matplotlib.use('Agg')\n"
        "import matplotlib.pyplot as plt\n"
        "import pandas as pd\n\n"
        "results = os.environ.get('SERVESIM_RESULTS', '../experiments/results/h200')\n"
        "figures = os.environ.get('SERVESIM_FIGURES', results)\n"
        "os.makedirs(figures, exist_ok=True)\n"
        "unpacked = tempfile.mkdtemp(prefix='servesim-h200-')\n"
        "with tarfile.open(os.path.join(results, 'results.tar.gz')) as tar:\n"
        "    tar.extractall(unpacked, filter='data') if hasattr(tarfile, 'data_filter') else tar.extractall(unpacked)\n"
        "models = ['llama-3.2-1b', 'llama-3.1-8b']\n"
        "summary = {m: pd.read_csv(os.path.join(results, m, 'summary.csv')) for m in models}\n"
        "points = [f'{s}_{l}' for s, l in summary[models[0]][['scheduler', 'load']].drop_duplicates().itertuples(index=False)]\n"
        "def point_csv(model, point, name):\n"
        "    return pd.read_csv(os.path.join(unpacked, 'validation', model, point, name))\n"
        "iters = {(m, p): point_csv(m, p, 'iterations.csv') for m in models for p in points}\n"
        "reqs = {(m, p): point_csv(m, p, 'requests.csv') for m in models for p in points}\n"
        "print(open(os.path.join(results, 'machine.txt')).read())"),
    new_markdown_cell("## Errors per point (%)"),
    new_code_cell(
        "table = pd.concat({m: s.set_index(['scheduler', 'load', 'mode'])[[\n"
        "    'iteration_mape_all', 'ttft_p50_rel_error', 'ttft_p90_rel_error', 'tpot_p50_rel_error',\n"
        "    'tpot_p90_rel_error']] for m, s in summary.items()})\n"
        "(table * 100).round(1)"),
    new_markdown_cell("## Per-iteration time: predicted against measured"),
    new_code_cell(
        "fig, axes = plt.subplots(len(models), len(points), figsize=(3.0 * len(points), 3.0 * len(models)))\n"
        "colors = {'decode': 'tab:blue', 'prefill': 'tab:orange', 'mixed': 'tab:green'}\n"
        "for row, m in enumerate(models):\n"
        "    for col, p in enumerate(points):\n"
        "        ax, it = axes[row, col], iters[(m, p)]\n"
        "        for kind, g in it.groupby('kind'):\n"
        "            ax.scatter(g.measured_s * 1e3, g.predicted_s * 1e3, s=3, alpha=0.4, color=colors.get(kind), label=kind)\n"
        "        lo = min(it.measured_s.min(), it.predicted_s.min()) * 1e3\n"
        "        hi = max(it.measured_s.max(), it.predicted_s.max()) * 1e3\n"
        "        ax.plot([lo, hi], [lo, hi], 'k--', lw=0.8)\n"
        "        ax.set_title(f'{m}\\n{p}', fontsize=7); ax.tick_params(labelsize=7)\n"
        "        if row == len(models) - 1: ax.set_xlabel('measured (ms)')\n"
        "        if col == 0: ax.set_ylabel('predicted (ms)')\n"
        "axes[0, 0].legend(fontsize=6)\n"
        "fig.tight_layout()\n"
        "fig.savefig(os.path.join(figures, 'iteration_scatter.png'), dpi=100)"),
    new_markdown_cell(
        "## Decode steps: predicted over measured by batch size\n\n"
        "The median over each point's decode-only iterations, by their number of sequences. The "
        "calibration's decode-step factor was measured at 1, 4, 16, 64 and 256 sequences."),
    new_code_cell(
        "edges = [0, 1, 2, 4, 8, 16, 32, 64, 128, 256]\n"
        "fig, ax = plt.subplots(figsize=(6, 3.4))\n"
        "for m, marker in zip(models, ['o', 's']):\n"
        "    dec = pd.concat([iters[(m, p)] for p in points])\n"
        "    dec = dec[dec.kind == 'decode']\n"
        "    ratio = (dec.predicted_s / dec.measured_s).groupby(pd.cut(dec.sequences, edges)).median().dropna()\n"
        "    ax.plot([i.right for i in ratio.index], ratio.values, marker=marker, label=m)\n"
        "ax.axhline(1, color='k', lw=0.8); ax.axhspan(0.97, 1.03, color='0.9')\n"
        "ax.set_xscale('log', base=2); ax.set_xlabel('sequences in the step (bucket upper edge)')\n"
        "ax.set_ylabel('predicted / measured'); ax.legend(fontsize=8); ax.grid(alpha=0.3)\n"
        "fig.tight_layout()\n"
        "fig.savefig(os.path.join(figures, 'decode_ratio_by_batch.png'), dpi=100)"),
    new_markdown_cell("## TTFT and TPOT distributions (llama-3.1-8b): measured, replay and predict"),
    new_code_cell(
        "m = 'llama-3.1-8b'\n"
        "fig, axes = plt.subplots(2, len(points), figsize=(3.0 * len(points), 5.6))\n"
        "for col, p in enumerate(points):\n"
        "    r = reqs[(m, p)]\n"
        "    for row, metric in enumerate(['ttft', 'tpot']):\n"
        "        ax = axes[row, col]\n"
        "        for source, style in [('measured', '-'), ('replay', ':'), ('predict', '--')]:\n"
        "            v = np.sort(r[f'{source}_{metric}_s'].dropna().to_numpy()) * 1e3\n"
        "            if len(v): ax.step(v, np.arange(1, len(v) + 1) / len(v), style, where='post', label=source)\n"
        "        ax.set_xlabel(f'{metric.upper()} (ms)'); ax.set_title(p, fontsize=7); ax.grid(alpha=0.3)\n"
        "        if col == 0: ax.set_ylabel('CDF')\n"
        "axes[0, 0].legend(fontsize=6)\n"
        "fig.tight_layout()\n"
        "fig.savefig(os.path.join(figures, 'ttft_tpot_cdfs_8b.png'), dpi=100)"),
    new_markdown_cell("Sanity of the results (the notebook fails if they are malformed):"),
    new_code_cell(
        "for m, s in summary.items():\n"
        "    assert set(s['mode']) == {'replay', 'predict'}, m\n"
        "    assert s[['iteration_mape_all', 'ttft_p50_rel_error', 'tpot_p50_rel_error']].notna().all().all(), m\n"
        "for key, it in iters.items():\n"
        "    assert (it.measured_s > 0).all() and (it.predicted_s > 0).all(), key\n"
        "print(len(iters), 'points,', sum(len(i) for i in iters.values()), 'iterations')"),
]
nb = new_notebook(cells=cells, metadata={
    "kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"},
    "language_info": {"name": "python"}})
nbformat.write(nb, os.path.join(os.path.dirname(os.path.abspath(__file__)), "validation_h200.ipynb"))
