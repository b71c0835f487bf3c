#!/usr/bin/python3
"""Writes notebooks/speculative.ipynb (kept so the notebook's source is reviewable as Python)."""
import os
import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

cells = [
    new_markdown_cell(
        "# Choosing the draft length k\n\n"
        "`experiments/speculative/run.py` sweeps k = 0..8 against the acceptance rate a at batch sizes "
        "1, 8, 32 and 128 (closed loop at that concurrency) with `servesim sweep`, on the H200 datasheet "
        "(Llama-3.1-8B, Llama-3.2-1B draft) and on device profiles of this CPU (small-110m, tiny-15m draft), "
        "and checks the CPU predictions against real speculative runs of the built-in decoder.\n\n"
        "Expected shape (Leviathan et al. 2023): at batch 1 the step emits (1 - a^(k+1)) / (1 - a) tokens "
        "for the price of k draft passes and one verification, so the best k grows with a; as the batch "
        "grows the verification of B(k+1) tokens stops being free (the target turns compute-bound) and "
        "speculation stops paying.\n\n"
        "Set `SERVESIM_RESULTS` to read another results folder and `SERVESIM_FIGURES` to write the PNGs elsewhere."),
    new_code_cell(
        "import json, os\n"
        "import numpy as np\n"
        "import matplotlib\n"
        "matplotlib.use('Agg')\n"
        "import matplotlib.pyplot as plt\n"
        "import pandas as pd\n\n"
        "results = os.environ.get('SERVESIM_RESULTS', '../experiments/results/speculative')\n"
        "figures = os.environ.get('SERVESIM_FIGURES', results)\n"
        "os.makedirs(figures, exist_ok=True)\n"
        "sweep = pd.read_csv(os.path.join(results, 'sim_sweep.csv'))\n"
        "best = pd.read_csv(os.path.join(results, 'best_k.csv'))\n"
        "meta = json.load(open(os.path.join(results, 'metadata.json')))\n"
        "platforms = list(dict.fromkeys(sweep.platform))\n"
        "batches = sorted(sweep.batch.unique())\n"
        "meta"),
    new_markdown_cell("## P50 TPOT against k, one line per acceptance rate (dashed: k = 0)"),
    new_code_cell(
        "for metric, label, fname in [('tpot_p50_s', 'P50 TPOT (ms)', 'tpot_vs_k.png'),\n"
        "                             ('output_tokens_per_s', 'output tokens/s', 'throughput_vs_k.png')]:\n"
        "    fig, axes = plt.subplots(len(platforms), len(batches), figsize=(3.3 * len(batches), 3 * len(platforms)),\n"
        "                             squeeze=False)\n"
        "    for i, plat in enumerate(platforms):\n"
        "        for j, b in enumerate(batches):\n"
        "            ax = axes[i, j]\n"
        "            d = sweep[(sweep.platform == plat) & (sweep.batch == b)]\n"
        "            scale = 1e3 if metric.endswith('_s') else 1\n"
        "            for a, g in d.groupby('alpha'):\n"
        "                g = g.sort_values('k')\n"
        "                ax.plot(g.k, g[metric] * scale, marker='o', ms=3, label=f'a = {a}')\n"
        "            ax.axhline(d[d.k == 0][metric].iloc[0] * scale, color='k', ls='--', lw=0.8)\n"
        "            ax.set_title(f'{plat}, batch {b}', fontsize=9); ax.set_xlabel('k'); ax.grid(alpha=0.3)\n"
        "            if j == 0: ax.set_ylabel(label)\n"
        "    axes[0, 0].legend(fontsize=7)\n"
        "    fig.tight_layout()\n"
        "    fig.savefig(os.path.join(figures, fname), dpi=110)"),
    new_markdown_cell("## The best k for P50 TPOT, and the speed-up it buys over k = 0"),
    new_code_cell(
        "table = best.pivot_table(index=['platform', 'batch'], columns='alpha', values=['best_k', 'speedup'])\n"
        "table.round(2)"),
    new_code_cell(
        "fig, axes = plt.subplots(1, len(platforms), figsize=(4.5 * len(platforms), 3.2), squeeze=False)\n"
        "for ax, plat in zip(axes[0], platforms):\n"
        "    d = best[best.platform == plat].pivot(index='batch', columns='alpha', values='speedup')\n"
        "    im = ax.imshow(d.values, cmap='RdYlGn', vmin=0.5, vmax=2.5, aspect='auto')\n"
        "    k = best[best.platform == plat].pivot(index='batch', columns='alpha', values='best_k')\n"
        "    for (r, c), v in np.ndenumerate(d.values):\n"
        "        ax.text(c, r, f'k={k.values[r, c]}\\n{v:.2f}x', ha='center', va='center', fontsize=7)\n"
        "    ax.set_xticks(range(len(d.columns)), d.columns); ax.set_yticks(range(len(d.index)), d.index)\n"
        "    ax.set_xlabel('acceptance rate a'); ax.set_ylabel('batch'); ax.set_title(f'{plat}: best k, TPOT speed-up')\n"
        "fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8)\n"
        "fig.savefig(os.path.join(figures, 'best_k.png'), dpi=110, bbox_inches='tight')"),
    new_markdown_cell(
        "## Checked on this CPU: predicted against measured P50 TPOT\n\n"
        "Each point is one `servesim validate` run: small-110m served for real with speculation (a tiny-15m "
        "draft at a controlled acceptance rate, or a 2-layer self-draft with exact acceptance) and predicted "
        "from the device profiles; predict mode is an independent simulation drawing acceptance from the "
        "controlled rate or the run's measured histogram."),
    new_code_cell(
        "vpath = os.path.join(results, 'validation.csv')\n"
        "if os.path.exists(vpath):\n"
        "    v = pd.read_csv(vpath)\n"
        "    fig, ax = plt.subplots(figsize=(4.5, 4))\n"
        "    for b, g in v.groupby('batch'):\n"
        "        ax.scatter(g.measured_tpot_p50_s * 1e3, g.predicted_tpot_p50_s * 1e3, label=f'batch {b}')\n"
        "        for _, r in g.iterrows():\n"
        "            ax.annotate(r.point, (r.measured_tpot_p50_s * 1e3, r.predicted_tpot_p50_s * 1e3), fontsize=6)\n"
        "    lo, hi = v[['measured_tpot_p50_s', 'predicted_tpot_p50_s']].min().min() * 1e3 * 0.8, \\\n"
        "             v[['measured_tpot_p50_s', 'predicted_tpot_p50_s']].max().max() * 1e3 * 1.2\n"
        "    ax.plot([lo, hi], [lo, hi], 'k--', lw=0.8)\n"
        "    ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color='grey', alpha=0.15, label='+-10%')\n"
        "    ax.set_xlabel('measured P50 TPOT (ms)'); ax.set_ylabel('predicted P50 TPOT (ms)'); ax.legend(fontsize=7)\n"
        "    fig.tight_layout(); fig.savefig(os.path.join(figures, 'validation_tpot.png'), dpi=110)\n"
        "    display(v[['point', 'measured_tpot_p50_s', 'predicted_tpot_p50_s', 'predict_tpot_p50_rel_error',\n"
        "               'replay_tpot_p50_rel_error', 'measured_tokens_per_step', 'predicted_tokens_per_step']].round(4))\n"
        "else:\n"
        "    print('no validation.csv: run experiments/speculative/run.py --part cpu')"),
    new_markdown_cell("Sanity of the results files (the notebook fails if they are malformed):"),
    new_code_cell(
        "assert set(sweep.k) == set(range(9)), sorted(set(sweep.k))\n"
        "assert (sweep.tpot_p50_s > 0).all() and (sweep.tokens_per_step >= 1).all()\n"
        "# k = 0 does not depend on a; k >= 1 emits more tokens per step at higher a.\n"
        "for (p, b), g in sweep.groupby(['platform', 'batch']):\n"
        "    assert g[g.k == 0].tpot_p50_s.nunique() == 1, (p, b)\n"
        "    k4 = g[g.k == 4].sort_values('alpha')\n"
        "    assert k4.tokens_per_step.is_monotonic_increasing, (p, b)\n"
        "assert len(best) == len(platforms) * len(batches) * sweep.alpha.nunique()\n"
        "print(len(sweep), 'sweep points')"),
]
nb = new_notebook(cells=cells, metadata={
    "kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"},
    "language_info": {"name": "python"}})
nbformat.write(nb, os.path.join(os.path.dirname(os.path.abspath(__file__)), "speculative.ipynb"))
