#!/usr/bin/python3
"""Writes notebooks/capacity.ipynb (kept so the notebook's source is reviewable as Python)."""
import os
import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

cells = [
    new_markdown_cell(
        "# How many H200s for Llama-3.1-70B chat at TTFT 1 s / TPOT 50 ms (datasheet predictions)\n\n"
        "`experiments/capacity/run.py`: `servesim capacity --search` over tensor parallelism {1, 2, 4, 8} x "
        "weights {bf16, fp8} x max-num-seqs {64, 256} for llama-3.1-70b on h200, prompt and output lengths "
        "resampled from the Azure 2023 conversation trace, Poisson arrivals; each point's capacity is the highest "
        "rate at which 99% of requests meet both SLOs (median of 3 seeds). Then `servesim capacity --target-rate "
        "100 --gpu-hour-price 3.5` for the configuration with the most req/s per GPU (the price is an "
        "illustrative assumption). The roofline with its default efficiencies and the h200 preset's analytic "
        "nvlink4 all-reduce: predictions, not measurements.\n\n"
        "Set `SERVESIM_RESULTS` to read another results folder and `SERVESIM_FIGURES` to write the PNGs elsewhere."),
    new_code_cell(
        "import json, os\n"
        "import matplotlib\n"
        "matplotlib.use('Agg')\n"
        "import matplotlib.pyplot as plt\n"
        "import pandas as pd\n\n"
        "results = os.environ.get('SERVESIM_RESULTS', '../experiments/results/capacity')\n"
        "figures = os.environ.get('SERVESIM_FIGURES', results)\n"
        "os.makedirs(figures, exist_ok=True)\n"
        "read = lambda name: pd.read_csv(os.path.join(results, name), keep_default_na=False, na_values=[''])\n"
        "search, by_tp, fleet = (read(f) for f in ['search.csv', 'rate_vs_tp.csv', 'fleet.csv'])\n"
        "fleet_json = json.load(open(os.path.join(results, 'fleet.json')))\n"
        "meta = json.load(open(os.path.join(results, 'metadata.json')))\n"
        "search['error'] = search.error.fillna('')\n"
        "precision = lambda q: 'bf16' if q == 'none' else q\n"
        "search['label'] = [f'TP{t} {precision(q)} {m}' for t, q, m in\n"
        "                   zip(search.tensor_parallel_size, search.quantization, search.max_num_seqs)]\n"
        "ok = search[search.error == ''].copy()\n"
        "ok['tokens_per_s_per_user'] = 1 / ok.tpot_p50_s\n"
        "meta"),
    new_markdown_cell(
        "## Every point of the grid\n\n"
        "Capacity (req/s, median of 3 seeds; `rate_min`..`rate_max` their range), per GPU, output tokens/s per "
        "GPU and the latencies at capacity; `limiting_slo` is the SLO most requests miss just above capacity. "
        "TP 1 in bf16 is refused: 141 GB of weights do not fit 90% of one H200's 141 GB."),
    new_code_cell(
        "cols = ['label', 'gpus', 'max_request_rate', 'rate_min', 'rate_max', 'rate_per_gpu',\n"
        "        'output_tokens_per_s_per_gpu', 'ttft_p50_s', 'tpot_p50_s', 'limiting_slo', 'bound_by', 'pareto_tpot']\n"
        "print(search[cols].to_string(index=False))\n"
        "for _, r in search[search.error != ''].iterrows():\n"
        "    print(f'{r.label}: {r.error}')"),
    new_markdown_cell(
        "## Throughput per GPU against speed per user\n\n"
        "As AIConfigurator draws it: output tokens/s per GPU at capacity against tokens/s per user (1 / TPOT P50 "
        "at capacity). The line joins servesim's TPOT Pareto front (`pareto_tpot`): no other point has both more "
        "tokens/s per GPU and a lower TPOT. Points with identical results (max-num-seqs 64 and 256 where fewer "
        "than 64 sequences run at capacity) share one label."),
    new_code_cell(
        "fig, ax = plt.subplots(figsize=(7.5, 5))\n"
        "colors = {'none': 'tab:blue', 'fp8': 'tab:orange'}\n"
        "markers = {1: 'v', 2: 's', 4: 'o', 8: 'D'}\n"
        "for (t, q), g in ok.groupby(['tensor_parallel_size', 'quantization']):\n"
        "    ax.scatter(g.tokens_per_s_per_user, g.output_tokens_per_s_per_gpu, color=colors[q], marker=markers[t],\n"
        "               s=45, zorder=3, label=f'TP{t} {precision(q)}')\n"
        "for _, g in ok.groupby(['tensor_parallel_size', 'quantization', 'output_tokens_per_s_per_gpu', 'tpot_p50_s']):\n"
        "    r = g.iloc[0]\n"
        "    name = f'TP{r.tensor_parallel_size} {precision(r.quantization)} ' + '/'.join(str(m) for m in g.max_num_seqs)\n"
        "    left, below = r.tensor_parallel_size == 4, len(g) == 1 and r.max_num_seqs == 256  # apart from neighbours\n"
        "    ax.annotate(name, (r.tokens_per_s_per_user, r.output_tokens_per_s_per_gpu), fontsize=7,\n"
        "                xytext=(-5 if left else 5, -11 if below else 4), textcoords='offset points',\n"
        "                ha='right' if left else 'left')\n"
        "front = ok[ok.pareto_tpot == 1].sort_values('tokens_per_s_per_user')\n"
        "ax.plot(front.tokens_per_s_per_user, front.output_tokens_per_s_per_gpu, color='gray', lw=1, zorder=2,\n"
        "        label='Pareto front')\n"
        "ax.set_xlabel('tokens/s per user (1 / TPOT P50 at capacity)')\n"
        "ax.set_ylabel('output tokens/s per GPU at capacity')\n"
        "ax.grid(alpha=0.3); ax.legend(fontsize=7, ncol=2)\n"
        "ax.set_title('llama-3.1-70b on h200, Azure conversation lengths, TTFT <= 1 s and TPOT <= 50 ms for 99%',\n"
        "             fontsize=9)\n"
        "fig.suptitle(f\"datasheet predictions, commit {meta['commit']}\", fontsize=8)\n"
        "fig.tight_layout()\n"
        "fig.savefig(os.path.join(figures, 'pareto.png'), dpi=100)"),
    new_markdown_cell(
        "## Capacity per GPU by configuration\n\n"
        "The bar is the median seed's capacity divided by the GPUs; the whisker the seeds' range. The bars "
        "that differ by less than the search's 2% tolerance are ties."),
    new_code_cell(
        "fig, ax = plt.subplots(figsize=(7.5, 5))\n"
        "y = range(len(search))[::-1]\n"
        "rate = search.rate_per_gpu.fillna(0)\n"
        "lo = (search.rate_per_gpu - search.rate_min / search.gpus).fillna(0)\n"
        "hi = (search.rate_max / search.gpus - search.rate_per_gpu).fillna(0)\n"
        "best = fleet.iloc[0]\n"
        "is_best = ((search.tensor_parallel_size == best.tensor_parallel_size) & (search.quantization == best.quantization)\n"
        "           & (search.max_num_seqs == best.max_num_seqs))\n"
        "ax.barh(list(y), rate, xerr=[lo, hi], capsize=2,\n"
        "        color=['tab:green' if b else colors[q] for b, q in zip(is_best, search.quantization)])\n"
        "for yi, (_, r) in zip(y, search.iterrows()):\n"
        "    if r.error:\n"
        "        ax.text(0.01, yi, 'does not fit one H200', va='center', fontsize=7, transform=ax.get_yaxis_transform())\n"
        "    else:\n"
        "        ax.text(r.rate_max / r.gpus + 0.03, yi, f'{r.rate_per_gpu:.2f}', va='center', fontsize=7)\n"
        "ax.set_yticks(list(y)); ax.set_yticklabels(search.label, fontsize=8)\n"
        "ax.set_xlabel('req/s per GPU within the SLOs'); ax.grid(axis='x', alpha=0.3)\n"
        "ax.set_title('capacity per GPU (green: the most; whiskers: range over 3 seeds)', fontsize=9)\n"
        "fig.tight_layout()\n"
        "fig.savefig(os.path.join(figures, 'capacity_per_gpu.png'), dpi=100)"),
    new_markdown_cell(
        "## Per TP degree and precision, and what 100 req/s takes\n\n"
        "The better max-num-seqs of each pair; replicas = ceil(100 / capacity), GPUs = replicas x TP (load split "
        "evenly between replicas)."),
    new_code_cell(
        "t = by_tp[by_tp.fits == 1].copy()\n"
        "t['precision'] = t.quantization.map(precision)\n"
        "ints = ['max_num_seqs', 'replicas_for_target', 'gpus_for_target']\n"
        "t[ints] = t[ints].astype(int)\n"
        "print(t[['tensor_parallel_size', 'precision', 'max_num_seqs', 'max_request_rate', 'rate_per_gpu',\n"
        "         'rate_per_gpu_over_best', 'replicas_for_target', 'gpus_for_target']].to_string(index=False))"),
    new_markdown_cell(
        "## The fleet for 100 req/s\n\n"
        "`servesim capacity --target-rate 100 --gpu-hour-price 3.5` on the configuration with the most req/s per "
        "GPU. The price per GPU-hour is an illustrative assumption, not a quote."),
    new_code_cell(
        "print(fleet.T.to_string(header=False))\n"
        "print(fleet_json['limit']['explanation'])\n"
        "assert fleet.gpus[0] == fleet.replicas[0] * fleet.tensor_parallel_size[0]\n"
        "assert fleet.replicas[0] * fleet.max_request_rate[0] >= fleet.target_rate[0]\n"
        "assert is_best.sum() == 1 and search[is_best].rate_per_gpu.iloc[0] == ok.rate_per_gpu.max()\n"
        "assert len(search) == 16 and len(ok) == 14 and front.shape[0] > 0"),
]
nb = new_notebook(cells=cells, metadata={
    "kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"},
    "language_info": {"name": "python"}})
nbformat.write(nb, os.path.join(os.path.dirname(os.path.abspath(__file__)), "capacity.ipynb"))
