#!/usr/bin/python3
"""Writes notebooks/latency_vs_shape.ipynb (kept so the notebook's source is reviewable as Python)."""
import os
import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

cells = [
    new_markdown_cell(
        "# Latency against prompt length and batch size\n\n"
        "The textbook shapes, as servesim's roofline simulator predicts them "
        "(`experiments/latency_vs_shape/run.py`):\n\n"
        "* **TTFT grows linearly with the prompt** once prefill is compute-bound, while TPOT stays nearly flat.\n"
        "* **TPOT against batch size** is flat while decode is bound by reading the weights, "
        "then rises as KV reads and compute take over; throughput grows almost linearly until then.\n\n"
        "Set `SERVESIM_RESULTS` to read another results folder and `SERVESIM_FIGURES` to write the PNGs elsewhere."),
    new_code_cell(
        "import json, os\n"
        "import matplotlib\n"
        "matplotlib.use('Agg')\n"
        "import matplotlib.pyplot as plt\n"
        "import pandas as pd\n\n"
        "results = os.environ.get('SERVESIM_RESULTS', '../experiments/results/latency_vs_shape')\n"
        "figures = os.environ.get('SERVESIM_FIGURES', results)\n"
        "os.makedirs(figures, exist_ok=True)\n"
        "prompt = pd.read_csv(os.path.join(results, 'prompt_length.csv'))\n"
        "batch = pd.read_csv(os.path.join(results, 'batch_size.csv'))\n"
        "meta = json.load(open(os.path.join(results, 'metadata.json')))\n"
        "meta"),
    new_code_cell(
        "fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))\n"
        "for (model, hw), g in prompt.groupby(['model', 'hardware']):\n"
        "    ax1.plot(g.prompt_tokens, g.ttft_ms, marker='o', label=f'{model} / {hw}')\n"
        "    ax2.plot(g.prompt_tokens, g.tpot_ms, marker='o', label=f'{model} / {hw}')\n"
        "ax1.set(xlabel='prompt tokens', ylabel='TTFT (ms)', title='TTFT grows linearly with the prompt')\n"
        "ax2.set(xlabel='prompt tokens', ylabel='TPOT (ms)', title='TPOT stays nearly flat', ylim=(0, None))\n"
        "for ax in (ax1, ax2):\n"
        "    ax.set_xscale('log', base=2); ax.grid(alpha=0.3)\n"
        "ax1.set_yscale('log')\n"
        "ax2.legend(fontsize=7)\n"
        "fig.suptitle(f\"one request at a time, 128 output tokens; roofline, commit {meta['commit']}\")\n"
        "fig.tight_layout()\n"
        "fig.savefig(os.path.join(figures, 'ttft_tpot_vs_prompt_length.png'), dpi=110)"),
    new_code_cell(
        "fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))\n"
        "for (model, hw), g in batch.groupby(['model', 'hardware']):\n"
        "    ax1.plot(g.batch_size, g.tpot_p50_ms, marker='o', label=f'{model} / {hw}')\n"
        "    ax2.plot(g.batch_size, g.output_tokens_per_s, marker='o', label=f'{model} / {hw}')\n"
        "ax1.set(xlabel='batch size (closed-loop concurrency)', ylabel='P50 TPOT (ms)', title='TPOT against batch size')\n"
        "ax2.set(xlabel='batch size (closed-loop concurrency)', ylabel='output tokens/s', title='Throughput against batch size')\n"
        "for ax in (ax1, ax2):\n"
        "    ax.set_xscale('log', base=2); ax.grid(alpha=0.3)\n"
        "ax2.set_yscale('log'); ax1.legend(fontsize=7)\n"
        "fig.suptitle('512-token prompts, 256 output tokens; chunked scheduler')\n"
        "fig.tight_layout()\n"
        "fig.savefig(os.path.join(figures, 'tpot_vs_batch_size.png'), dpi=110)"),
    new_markdown_cell("The shapes, checked (the notebook fails if the results stop showing them):"),
    new_code_cell(
        "for (model, hw), g in prompt.groupby(['model', 'hardware']):\n"
        "    g = g.set_index('prompt_tokens')\n"
        "    # Linear growth: doubling a long prompt about doubles TTFT.\n"
        "    ratio = g.ttft_ms[8192] / g.ttft_ms[4096]\n"
        "    assert 1.8 < ratio < 2.4, (model, hw, ratio)\n"
        "    # TPOT nearly flat: under 25% growth from 128 to 8192 prompt tokens.\n"
        "    assert g.tpot_ms[8192] / g.tpot_ms[128] < 1.25, (model, hw)\n"
        "for (model, hw), g in batch.groupby(['model', 'hardware']):\n"
        "    g = g.set_index('batch_size')\n"
        "    assert g.tpot_p50_ms[8] / g.tpot_p50_ms[1] < 1.3, (model, hw)  # weight-bound: nearly flat\n"
        "    assert g.output_tokens_per_s[64] > 20 * g.output_tokens_per_s[1], (model, hw)\n"
        "print('shapes hold for', prompt.groupby(['model', 'hardware']).ngroups, 'model/hardware pairs')"),
]
nb = new_notebook(cells=cells, metadata={
    "kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"},
    "language_info": {"name": "python"}})
nbformat.write(nb, os.path.join(os.path.dirname(os.path.abspath(__file__)), "latency_vs_shape.ipynb"))
