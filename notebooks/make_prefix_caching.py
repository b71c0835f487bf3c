#!/usr/bin/python3
"""Writes notebooks/prefix_caching.ipynb (kept so the notebook's source is reviewable as Python)."""
import os
import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

cells = [
    new_markdown_cell(
        "# What prefix caching buys\n\n"
        "servesim's roofline simulator, Llama-3.1-8B on the h200 datasheet, chunked prefill "
        "(`experiments/prefix_caching/run.py`; docs/prefix-caching.md has the rules):\n\n"
        "* **The Mooncake conversation trace against KV cache size**, caching on and off: the hit rate "
        "climbs with the cache until it meets what the trace can give (computed from the trace alone, "
        "and beside the paper's cache ratio), and TTFT falls with it.\n"
        "* **Capacity at an SLO against the shared share of each prompt**: the highest request rate that "
        "keeps P99 TTFT under 500 ms and P50 TPOT under 30 ms.\n\n"
        "Set `SERVESIM_RESULTS` to read another results folder and `SERVESIM_FIGURES` to write the PNGs elsewhere."),
    new_code_cell(
        "import json, os\n"
        "import matplotlib\n"
        "matplotlib.use('Agg')\n"
        "import matplotlib.pyplot as plt\n"
        "import pandas as pd\n\n"
        "results = os.environ.get('SERVESIM_RESULTS', '../experiments/results/prefix_caching')\n"
        "figures = os.environ.get('SERVESIM_FIGURES', results)\n"
        "os.makedirs(figures, exist_ok=True)\n"
        "kv = pd.read_csv(os.path.join(results, 'mooncake_kv_size.csv'))\n"
        "cap = pd.read_csv(os.path.join(results, 'shared_prefix_capacity.csv'))\n"
        "meta = json.load(open(os.path.join(results, 'metadata.json')))\n"
        "meta"),
    new_code_cell(
        "light, full = kv[kv.rate_scale == 0.25], kv[kv.rate_scale == 1.0]\n"
        "on, off = light[light.prefix_caching == 1], light[light.prefix_caching == 0]\n"
        "full_on, full_off = full[full.prefix_caching == 1], full[full.prefix_caching == 0]\n"
        "h200_blocks = 52852  # the datasheet H200 at --gpu-memory-utilization 0.9\n"
        "fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(15, 4))\n"
        "ax1.plot(on.kv_gib, on.hit_rate, marker='o', label='simulated, at 0.25x the trace rate')\n"
        "ax1.plot(full_on.kv_gib, full_on.hit_rate, marker='s', label='simulated, at 1x (saturated)')\n"
        "ax1.axhline(meta['mooncake']['unbounded_hit_rate_from_trace'], color='gray', ls='--',\n"
        "            label='unbounded cache, from the trace')\n"
        "ax1.axhline(meta['mooncake']['paper_cache_ratio'], color='tab:red', ls=':', label='paper: cache ratio 40%')\n"
        "ax1.set(xlabel='KV cache (GiB)', ylabel='prompt tokens found in the cache', ylim=(0, 0.5),\n"
        "        title='Hit rate against KV cache size')\n"
        "for name, col in (('P50', 'ttft_p50_s'), ('P99', 'ttft_p99_s')):\n"
        "    ax2.plot(on.kv_gib, on[col], marker='o', label=f'TTFT {name}, caching on')\n"
        "    ax2.plot(off.kv_gib, off[col], marker='x', ls='--', label=f'TTFT {name}, caching off')\n"
        "ax2.set(xlabel='KV cache (GiB)', ylabel='TTFT (s)', title='TTFT at 0.25x the trace rate', yscale='log')\n"
        "ax3.plot(full_on.kv_gib, full_on.requests_per_s, marker='o', label='caching on')\n"
        "ax3.plot(full_off.kv_gib, full_off.requests_per_s, marker='x', ls='--', label='caching off')\n"
        "ax3.set(xlabel='KV cache (GiB)', ylabel='completed requests/s',\n"
        "        title='Throughput at 1x the trace rate (saturated)', ylim=(0, None))\n"
        "for ax in (ax1, ax2, ax3):\n"
        "    ax.set_xscale('log'); ax.grid(alpha=0.3); ax.legend(fontsize=7)\n"
        "    ax.axvline(kv[kv.num_gpu_blocks == h200_blocks].kv_gib.iloc[0], color='k', lw=0.6)\n"
        "fig.suptitle(f\"Mooncake conversation trace, Llama-3.1-8B on the h200 datasheet; \"\n"
        "             f\"the thin line: one H200's KV cache; commit {meta['commit']}\")\n"
        "fig.tight_layout()\n"
        "fig.savefig(os.path.join(figures, 'mooncake_kv_size.png'), dpi=110)"),
    new_code_cell(
        "fig, ax = plt.subplots(figsize=(6, 4))\n"
        "for caching, g in cap.groupby('prefix_caching'):\n"
        "    ax.plot(g.shared_share * 100, g.max_rate_per_s, marker='o' if caching else 'x', ls='-' if caching else '--',\n"
        "            label='caching on' if caching else 'caching off')\n"
        "slo = meta['capacity']['slo']\n"
        "ax.set(xlabel='shared prefix (% of each 2048-token prompt)', ylabel='requests/s within the SLO',\n"
        "       title=f\"Capacity at P99 TTFT <= {slo['ttft_p99_s'] * 1e3:.0f} ms, P50 TPOT <= {slo['tpot_p50_s'] * 1e3:.0f} ms\")\n"
        "ax.grid(alpha=0.3); ax.legend()\n"
        "fig.tight_layout()\n"
        "fig.savefig(os.path.join(figures, 'shared_prefix_capacity.png'), dpi=110)\n"
        "cap.pivot(index='shared_share', columns='prefix_caching', values='max_rate_per_s')"),
    new_markdown_cell("The shapes, checked (the notebook fails if the results stop showing them):"),
    new_code_cell(
        "on_i = on.set_index('num_gpu_blocks'); off_i = off.set_index('num_gpu_blocks')\n"
        "# The hit rate grows with the cache and meets the trace's own bound.\n"
        "assert on_i.hit_rate.is_monotonic_increasing, on_i.hit_rate\n"
        "bound = meta['mooncake']['unbounded_hit_rate_from_trace']\n"
        "assert abs(on_i.hit_rate.iloc[-1] - bound) < 0.02, (on_i.hit_rate.iloc[-1], bound)\n"
        "assert (off_i.hit_rate == 0).all()\n"
        "# Caching never makes TTFT worse here, and with the largest cache it cuts the median.\n"
        "assert (on_i.ttft_p50_s <= off_i.ttft_p50_s * 1.001).all()\n"
        "assert on_i.ttft_p50_s.iloc[-1] < 0.8 * off_i.ttft_p50_s.iloc[-1]\n"
        "# Saturated, caching serves more: the throughput grows with the hit rate.\n"
        "f_on, f_off = full_on.set_index('num_gpu_blocks'), full_off.set_index('num_gpu_blocks')\n"
        "assert f_on.requests_per_s.iloc[-1] > 1.2 * f_off.requests_per_s.iloc[-1]\n"
        "# Capacity: equal without sharing, and growing with the shared share when caching is on.\n"
        "c = cap.pivot(index='shared_share', columns='prefix_caching', values='max_rate_per_s')\n"
        "assert abs(c[1][0.0] - c[0][0.0]) <= 0.02 * c[0][0.0]\n"
        "assert c[1].is_monotonic_increasing and c[1][0.9] > 2 * c[0][0.9]\n"
        "print('shapes hold: hit rate', round(on_i.hit_rate.iloc[-1], 3), 'of', round(bound, 3),\n"
        "      '; saturated throughput x', round(f_on.requests_per_s.iloc[-1] / f_off.requests_per_s.iloc[-1], 2),\n"
        "      '; capacity x', round(c[1][0.9] / c[0][0.9], 2), 'at a 90% shared prefix')"),
]
nb = new_notebook(cells=cells, metadata={
    "kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"},
    "language_info": {"name": "python"}})
nbformat.write(nb, os.path.join(os.path.dirname(os.path.abspath(__file__)), "prefix_caching.ipynb"))
