#!/usr/bin/python3
"""Writes notebooks/heldout.ipynb (kept so the notebook's source is reviewable as Python)."""
import os
import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

cells = [
    new_markdown_cell(
        "# Where the profile is wrong: the held-out suite\n\n"
        "`experiments/heldout/run.py` calibrates small-110m once, then serves workloads drawn by "
        "`experiments/heldout/workloads.py` (seeds no change was tuned on) for real and predicts each from "
        "the profile alone (`validate --host-drift off`). `validate` breaks each run's per-iteration error "
        "down by kind x number of sequences (report.json's `iteration_breakdown`); the heat map below puts "
        "the workloads side by side, so a shape the profile mispredicts shows as a coloured column.\n\n"
        "Set `SERVESIM_RESULTS` to read another results folder and `SERVESIM_FIGURES` to write the PNGs elsewhere."),
    new_code_cell(
        "import json, os\n"
        "import numpy as np\n"
        "import matplotlib\n"
        "matplotlib.use('Agg')\n"
        "import matplotlib.pyplot as plt\n"
        "from matplotlib.colors import TwoSlopeNorm\n"
        "import pandas as pd\n\n"
        "results = os.environ.get('SERVESIM_RESULTS', '../experiments/results/heldout/cpu_two_threads')\n"
        "figures = os.environ.get('SERVESIM_FIGURES', results)\n"
        "os.makedirs(figures, exist_ok=True)\n"
        "summary = pd.read_csv(os.path.join(results, 'summary.csv'))\n"
        "shapes = pd.read_csv(os.path.join(results, 'shapes.csv'), dtype={'sequences': str})\n"
        "meta = json.load(open(os.path.join(results, 'metadata.json')))\n"
        "meta"),
    new_markdown_cell("## Per workload"),
    new_code_cell(
        "cols = ['iteration_mape', 'floor', 'decode_bias', 'prefill_bias', 'worst_bucket', 'worst_bucket_median_ratio',\n"
        "        'ttft_p50_rel_error', 'ttft_p90_rel_error', 'tpot_p50_rel_error', 'tpot_p90_rel_error',\n"
        "        'mape_ok', 'buckets_ok', 'latency_ok']\n"
        "summary.set_index('workload')[cols].round(3)"),
    new_markdown_cell(
        "## Median predicted / measured by kind x sequences\n\n"
        "Red: predicted too slow; blue: too fast; blank: fewer than 10 iterations of that shape."),
    new_code_cell(
        "order = ['1', '2', '3-4', '5-8', '9-16', '17-32', '33-64', '65+']\n"
        "kinds = ['decode', 'prefill', 'mixed']\n"
        "s = shapes[shapes['count'] >= 10].copy()\n"
        "s['column'] = s['kind'] + ' x ' + s['sequences']\n"
        "columns = [f'{k} x {q}' for k in kinds for q in order if f'{k} x {q}' in set(s['column'])]\n"
        "grid = s.pivot(index='workload', columns='column', values='median_ratio').reindex(\n"
        "    index=summary['workload'], columns=columns)\n"
        "fig, ax = plt.subplots(figsize=(4.0 + 0.6 * len(columns), 1.6 + 0.42 * len(grid)))\n"
        "im = ax.imshow(grid.values, cmap='RdBu_r', norm=TwoSlopeNorm(vmin=0.7, vcenter=1.0, vmax=1.3), aspect='auto')\n"
        "for (i, j), v in np.ndenumerate(grid.values):\n"
        "    if np.isfinite(v):\n"
        "        ax.text(j, i, f'{v:.2f}', ha='center', va='center', fontsize=7)\n"
        "ax.set_xticks(range(len(columns))); ax.set_xticklabels(columns, rotation=60, ha='right', fontsize=7)\n"
        "ax.set_yticks(range(len(grid))); ax.set_yticklabels([w[:48] for w in grid.index], fontsize=7)\n"
        "fig.colorbar(im, ax=ax, label='median predicted / measured')\n"
        "ax.set_title(f\"per-iteration error by shape, commit {meta['commit']}\", fontsize=9)\n"
        "fig.tight_layout()\n"
        "fig.savefig(os.path.join(figures, 'shape_heatmap.png'), dpi=110)\n"
        "grid.round(3)"),
    new_markdown_cell("## The figure of merit: the worst workload"),
    new_code_cell(
        "worst = summary.sort_values('iteration_mape', ascending=False).iloc[0]\n"
        "print(f\"worst MAPE {worst.iteration_mape:.3f} ({worst.workload}); MAPE target met at \"\n"
        "      f\"{int(summary.mape_ok.sum())} of {len(summary)}, buckets within 5% at {int(summary.buckets_ok.sum())}, \"\n"
        "      f\"P50/P90 TTFT and TPOT within 10% at {int(summary.latency_ok.sum())}\")\n"
        "assert len(summary) == len(grid) and (summary.iterations > 0).all()"),
]
nb = new_notebook(cells=cells, metadata={
    "kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"},
    "language_info": {"name": "python"}})
nbformat.write(nb, os.path.join(os.path.dirname(os.path.abspath(__file__)), "heldout.ipynb"))
