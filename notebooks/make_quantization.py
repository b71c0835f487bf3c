#!/usr/bin/python3
"""Writes notebooks/quantization.ipynb (kept so the notebook's source is reviewable as Python)."""
import os
import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

cells = [
    new_markdown_cell(
        "# What quantization buys (datasheet predictions)\n\n"
        "`experiments/quantization/run.py`: `servesim simulate` with the roofline and the default efficiencies "
        "of docs/quantization.md, for llama-3.1-8b and llama-3.1-70b on one h100-sxm and one h200, weights "
        "{bf16, fp8, w8a16, w4a16} x KV cache {bf16, fp8}. Predictions, not measurements.\n\n"
        "Set `SERVESIM_RESULTS` to read another results folder and `SERVESIM_FIGURES` to write the PNGs elsewhere."),
    new_code_cell(
        "import json, os\n"
        "import matplotlib\n"
        "matplotlib.use('Agg')\n"
        "import matplotlib.pyplot as plt\n"
        "import pandas as pd\n\n"
        "results = os.environ.get('SERVESIM_RESULTS', '../experiments/results/quantization')\n"
        "figures = os.environ.get('SERVESIM_FIGURES', results)\n"
        "os.makedirs(figures, exist_ok=True)\n"
        "read = lambda name: pd.read_csv(os.path.join(results, name))\n"
        "capacity, tpot, ttft, slo, trt = (read(f) for f in ['capacity.csv', 'tpot_vs_batch.csv', "
        "'ttft_vs_prompt.csv', 'slo.csv', 'trtllm.csv'])\n"
        "meta = json.load(open(os.path.join(results, 'metadata.json')))\n"
        "meta"),
    new_markdown_cell("## What fits, and how many sequences of 4096 tokens the KV cache holds"),
    new_code_cell(
        "capacity.pivot_table(index=['model', 'hardware'], columns=['weights', 'kv_cache'], values='max_batch_at_4096')"),
    new_markdown_cell(
        "## TPOT against the batch\n\n"
        "Closed loops of B sequences (1024-token prompts, 256-token outputs). Weight-only int4 pays at small "
        "batches and stops paying where the GEMMs turn compute-bound; an fp8 KV cache changes little at this "
        "context."),
    new_code_cell(
        "fig, axes = plt.subplots(1, 3, figsize=(14, 4), sharey=False)\n"
        "panels = [('llama-3.1-8b', 'h100-sxm'), ('llama-3.1-8b', 'h200'), ('llama-3.1-70b', 'h200')]\n"
        "for ax, (m, h) in zip(axes, panels):\n"
        "    for (w, kv), g in tpot[(tpot.model == m) & (tpot.hardware == h)].groupby(['weights', 'kv_cache']):\n"
        "        ax.plot(g.batch, g.tpot_p50_ms, marker='o', ms=3, ls='-' if kv == 'auto' else '--',\n"
        "                label=f'{w} / KV {kv}')\n"
        "    ax.set_xscale('log', base=2); ax.set_xlabel('sequences in the batch'); ax.set_ylabel('TPOT P50 (ms)')\n"
        "    ax.set_title(f'{m} on {h}', fontsize=10); ax.grid(alpha=0.3)\n"
        "axes[0].legend(fontsize=7)\n"
        "fig.suptitle(f\"datasheet predictions, commit {meta['commit']}\", fontsize=9)\n"
        "fig.tight_layout()\n"
        "fig.savefig(os.path.join(figures, 'tpot_vs_batch.png'), dpi=110)"),
    new_markdown_cell("## Speedup of each configuration over bf16 weights and KV, by batch"),
    new_code_cell(
        "base = tpot[(tpot.weights == 'none') & (tpot.kv_cache == 'auto')].set_index(['model', 'hardware', 'batch'])\n"
        "t = tpot.join(base.tpot_p50_ms.rename('bf16_ms'), on=['model', 'hardware', 'batch'])\n"
        "t['speedup'] = t.bf16_ms / t.tpot_p50_ms\n"
        "t[t.model == 'llama-3.1-8b'].pivot_table(index=['hardware', 'weights', 'kv_cache'], columns='batch',\n"
        "                                        values='speedup').round(2)"),
    new_markdown_cell("## TTFT against the prompt length (one request alone)"),
    new_code_cell(
        "fig, ax = plt.subplots(figsize=(6, 4))\n"
        "for (w, kv), g in ttft[(ttft.model == 'llama-3.1-8b') & (ttft.hardware == 'h200')].groupby(['weights', 'kv_cache']):\n"
        "    ax.plot(g.prompt, g.ttft_p50_ms, marker='o', ms=3, ls='-' if kv == 'auto' else '--', label=f'{w} / KV {kv}')\n"
        "ax.set_xscale('log', base=2); ax.set_yscale('log'); ax.grid(alpha=0.3)\n"
        "ax.set_xlabel('prompt tokens'); ax.set_ylabel('TTFT (ms)'); ax.set_title('llama-3.1-8b on h200', fontsize=10)\n"
        "ax.legend(fontsize=7); fig.tight_layout()\n"
        "fig.savefig(os.path.join(figures, 'ttft_vs_prompt.png'), dpi=110)"),
    new_markdown_cell("## Throughput at a TPOT P50 of 30 ms"),
    new_code_cell("slo[slo.fits == 1].set_index(['model', 'hardware', 'weights', 'kv_cache'])"),
    new_markdown_cell(
        "## Against TensorRT-LLM 1.0's published FP8 throughput\n\n"
        "Llama-3.1-8B-Instruct-FP8 on one H100 SXM, fixed lengths, every request at once (TensorRT-LLM's "
        "perf-overview.md); servesim's prediction with fp8 weights and KV cache, 1000 requests, one scheduler "
        "setting for every row (max 1024 sequences, 8192 tokens per step), the default efficiencies."),
    new_code_cell(
        "print(trt.to_string(index=False))\n"
        "assert len(trt) == 5 and (trt.predicted_output_tokens_per_s > 0).all()\n"
        "assert capacity.fits.sum() > 0 and len(tpot) > 0"),
]
nb = new_notebook(cells=cells, metadata={
    "kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"},
    "language_info": {"name": "python"}})
nbformat.write(nb, os.path.join(os.path.dirname(os.path.abspath(__file__)), "quantization.ipynb"))
