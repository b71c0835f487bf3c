#!/usr/bin/python3
"""Writes notebooks/published.ipynb (kept so the notebook's source is reviewable as Python)."""
import os
import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

cells = [
    new_markdown_cell(
        "# servesim's datasheet predictions beside published measurements\n\n"
        "`experiments/published/run.py`: each published number of `experiments/published/measurements.csv` "
        "(TensorRT-LLM 1.0's perf overview, gpt-fast's README, SGLang's v0.3.0-vs-vLLM-0.6.0 benchmark) beside "
        "`servesim simulate`'s prediction of it: the roofline with its default efficiencies, nothing fitted to "
        "these rows. Error = (predicted - published) / published. Sources, settings and what the misses teach: "
        "`experiments/published/README.md`.\n\n"
        "Set `SERVESIM_RESULTS` to read another results folder and `SERVESIM_FIGURES` to write the PNGs elsewhere."),
    new_code_cell(
        "import json, os\n"
        "import matplotlib\n"
        "matplotlib.use('Agg')\n"
        "import matplotlib.pyplot as plt\n"
        "import pandas as pd\n\n"
        "results = os.environ.get('SERVESIM_RESULTS', '../experiments/published')\n"
        "figures = os.environ.get('SERVESIM_FIGURES', results)\n"
        "os.makedirs(figures, exist_ok=True)\n"
        "r = pd.read_csv(os.path.join(results, 'results.csv'))\n"
        "meta_path = os.path.join(results, 'metadata.json')\n"
        "meta = json.load(open(meta_path)) if os.path.exists(meta_path) else {'commit': '?'}\n\n"
        "def bars(ax, g, labels, unit):\n"
        "    \"\"\"Published and predicted side by side per row of g, each prediction labelled with its error.\"\"\"\n"
        "    x = range(len(g))\n"
        "    ax.bar([i - 0.2 for i in x], g.published, 0.4, label='published', color='0.6')\n"
        "    ax.bar([i + 0.2 for i in x], g.predicted.fillna(0), 0.4, label='servesim', color='tab:blue')\n"
        "    for i, (p, e) in enumerate(zip(g.predicted, g.error_pct)):\n"
        "        ax.annotate('n/a' if pd.isna(p) else f'{e:+.0f}%', (i + 0.2, 0 if pd.isna(p) else p),\n"
        "                    ha='center', va='bottom', fontsize=8)\n"
        "    ax.set_xticks(list(x)); ax.set_xticklabels(labels, fontsize=8); ax.set_ylabel(unit)\n"
        "    ax.grid(axis='y', alpha=0.3)\n\n"
        "r[['id', 'metric', 'unit', 'published', 'predicted', 'error_pct', 'note']]"),
    new_markdown_cell(
        "## TensorRT-LLM 1.0, Llama-3.1-8B-Instruct-FP8 on one H100 SXM\n\n"
        "Fixed input/output lengths, every request at once, output tokens/s; servesim with fp8 weights and KV "
        "cache and, per row, the batch and token limits trtllm-bench's heuristic picks."),
    new_code_cell(
        "g = r[r.group == 'trtllm']\n"
        "fig, ax = plt.subplots(figsize=(7, 3.8))\n"
        "bars(ax, g, [i.replace('trtllm-', '').replace('-', ' / ') for i in g.id], 'output tokens/s')\n"
        "ax.set_title('TensorRT-LLM 1.0 perf overview (ISL / OSL)', fontsize=10); ax.legend(fontsize=8)\n"
        "fig.tight_layout(); fig.savefig(os.path.join(figures, 'trtllm.png'), dpi=110)"),
    new_markdown_cell(
        "## gpt-fast at batch 1, Llama-3.1-8B bf16 on A100 80GB (power-capped to 330 W), TP 1-8\n\n"
        "5-token prompt, 200 generated tokens; tokens/s over the whole call."),
    new_code_cell(
        "g = r[r.group == 'gpt-fast']\n"
        "fig, ax = plt.subplots(figsize=(6, 3.8))\n"
        "bars(ax, g, [i.replace('gptfast-', '').upper() for i in g.id], 'tokens/s (batch 1)')\n"
        "ax.set_title('gpt-fast README: tokens/s against tensor parallelism', fontsize=10); ax.legend(fontsize=8)\n"
        "fig.tight_layout(); fig.savefig(os.path.join(figures, 'gpt_fast.png'), dpi=110)"),
    new_markdown_cell(
        "## SGLang 0.3.0 and vLLM 0.6.0, Llama-3.1-8B-Instruct bf16 on one A100 80GB, ShareGPT\n\n"
        "Poisson 4 and 8 req/s (median TTFT and TPOT), and 5000 prompts at once (request throughput). servesim has "
        "no ShareGPT file: lengths are lognormal approximations with ShareGPT's published mean token counts "
        "(README)."),
    new_code_cell(
        "fig, axes = plt.subplots(1, 3, figsize=(13, 3.8), gridspec_kw={'width_ratios': [2, 2, 1]})\n"
        "online = r[r.group == 'sharegpt-online']\n"
        "for ax, m in zip(axes, ['median TTFT', 'median TPOT']):\n"
        "    g = online[online.metric == m]\n"
        "    bars(ax, g, [i.rsplit('-', 1)[0].replace('-rps', '\\n') + ' req/s' for i in g.id], m + ' (ms)')\n"
        "    ax.set_title(m, fontsize=10)\n"
        "g = r[r.group == 'sharegpt-offline']\n"
        "bars(axes[2], g, list(g.engine), 'requests/s'); axes[2].set_title('offline, 5000 prompts', fontsize=10)\n"
        "axes[0].legend(fontsize=8)\n"
        "fig.suptitle('SGLang benchmark_vllm_060 (A100 80GB, ShareGPT)', fontsize=10)\n"
        "fig.tight_layout(); fig.savefig(os.path.join(figures, 'sglang_vllm.png'), dpi=110)"),
    new_markdown_cell("## Every row's error"),
    new_code_cell(
        "g = r.dropna(subset=['predicted'])\n"
        "colors = {'trtllm': 'tab:green', 'gpt-fast': 'tab:orange', 'sharegpt-online': 'tab:blue',\n"
        "          'sharegpt-offline': 'tab:purple'}\n"
        "fig, ax = plt.subplots(figsize=(7, 0.3 * len(g) + 1))\n"
        "ax.barh(range(len(g)), g.error_pct, color=[colors.get(x, '0.5') for x in g.group])\n"
        "ax.set_yticks(range(len(g))); ax.set_yticklabels(g.id, fontsize=8); ax.invert_yaxis()\n"
        "ax.axvline(0, color='k', lw=0.8); ax.grid(axis='x', alpha=0.3)\n"
        "ax.set_xlabel('(predicted - published) / published, %')\n"
        "ax.set_title(f\"default efficiencies, nothing fitted; commit {meta['commit']}\", fontsize=9)\n"
        "fig.tight_layout(); fig.savefig(os.path.join(figures, 'errors.png'), dpi=110)"),
    new_code_cell(
        "assert len(r) >= 19 and (r.published > 0).all()\n"
        "done = r.predicted.notna()\n"
        "assert (done | r.note.notna()).all(), 'a row without a prediction says why'\n"
        "err = 100 * (r.predicted[done] - r.published[done]) / r.published[done]\n"
        "assert ((err - r.error_pct[done]).abs() < 0.06).all()\n"
        "print(f'{done.sum()} of {len(r)} rows predicted; median |error| {r.error_pct[done].abs().median():.1f}%')"),
]
nb = new_notebook(cells=cells, metadata={
    "kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"},
    "language_info": {"name": "python"}})
nbformat.write(nb, os.path.join(os.path.dirname(os.path.abspath(__file__)), "published.ipynb"))
