#!/usr/bin/python3
"""An independent reference forward pass of a Llama / Qwen2 decoder in numpy.

Written from the Hugging Face model definitions (LlamaForCausalLM,
Qwen2ForCausalLM), not from servesim's C++ code, so that it can serve as an
oracle for the built-in decoder. Computes in float64.

    llama_numpy.py MODEL_DIR --tokens 5,17,3,...

reads MODEL_DIR/config.json and MODEL_DIR/model.safetensors and prints
{"logits": [[...V floats...] for every token]} as JSON to stdout: the logits
at every position of the causal (full-sequence) forward pass.

Only the python standard library and numpy are used.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np


# ---------------------------------------------------------------- safetensors
# File layout: u64 little-endian header size N; N bytes of JSON mapping each
# tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
# relative to the first byte after the header), plus an optional
# "__metadata__" entry; then the raw little-endian tensor data.

def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (header_len,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + header_len].decode("utf-8"))
    data = blob[8 + header_len:]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = data[begin:end]
        dtype = info["dtype"]
        if dtype == "F32":
            values = np.frombuffer(raw, dtype="<f4").astype(np.float64)
        elif dtype == "F16":
            values = np.frombuffer(raw, dtype="<f2").astype(np.float64)
        elif dtype == "BF16":
            # bfloat16 is the top half of an IEEE float32.
            bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            values = bits.view(np.float32).astype(np.float64)
        else:
            raise ValueError(f"{path}: tensor {name}: unsupported dtype {dtype}")
        shape = tuple(info["shape"])
        tensors[name] = values.reshape(shape)
    return tensors


# ---------------------------------------------------------------- the model

def rms_norm(x, weight, eps):
    # LlamaRMSNorm / Qwen2RMSNorm: x / sqrt(mean(x^2) + eps) * weight
    variance = np.mean(x * x, axis=-1, keepdims=True)
    return x / np.sqrt(variance + eps) * weight


def linear(x, weight, bias=None):
    # nn.Linear: weight is [out_features, in_features]
    y = x @ weight.T
    if bias is not None:
        y = y + bias
    return y


def silu(x):
    return x / (1.0 + np.exp(-x))


def rotate_half(x):
    half = x.shape[-1] // 2
    x1 = x[..., :half]
    x2 = x[..., half:]
    return np.concatenate([-x2, x1], axis=-1)


def rope_cos_sin(positions, head_dim, theta):
    inv_freq = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    angles = np.outer(positions.astype(np.float64), inv_freq)      # [T, dh/2]
    emb = np.concatenate([angles, angles], axis=-1)                 # [T, dh]
    return np.cos(emb), np.sin(emb)


def apply_rope(x, cos, sin):
    # x: [heads, T, dh]; cos, sin: [T, dh]
    return x * cos[None, :, :] + rotate_half(x) * sin[None, :, :]


def softmax(x, axis=-1):
    x = x - np.max(x, axis=axis, keepdims=True)
    e = np.exp(x)
    return e / np.sum(e, axis=axis, keepdims=True)


def forward(config, w, tokens):
    d = config["hidden_size"]
    H = config["num_attention_heads"]
    Hkv = config.get("num_key_value_heads") or H
    dh = config.get("head_dim") or d // H
    L = config["num_hidden_layers"]
    eps = config.get("rms_norm_eps", 1e-6)
    theta = config.get("rope_theta", 10000.0)
    tied = config.get("tie_word_embeddings", False)
    n_rep = H // Hkv
    model_type = config.get("model_type", "llama")
    # Qwen2 always has biases on q, k, v (not on o); Llama and Mistral have
    # them on q, k, v and o when attention_bias is set.
    qkv_bias = model_type == "qwen2" or config.get("attention_bias", False)
    o_bias = model_type != "qwen2" and config.get("attention_bias", False)

    tokens = np.asarray(tokens, dtype=np.int64)
    T = len(tokens)
    positions = np.arange(T)
    cos, sin = rope_cos_sin(positions, dh, theta)
    causal = np.triu(np.full((T, T), -np.inf), k=1)  # key j > query i is masked

    h = w["model.embed_tokens.weight"][tokens]  # [T, d]
    for l in range(L):
        p = f"model.layers.{l}."
        # --- self-attention block
        x = rms_norm(h, w[p + "input_layernorm.weight"], eps)
        bq = w[p + "self_attn.q_proj.bias"] if qkv_bias else None
        bk = w[p + "self_attn.k_proj.bias"] if qkv_bias else None
        bv = w[p + "self_attn.v_proj.bias"] if qkv_bias else None
        q = linear(x, w[p + "self_attn.q_proj.weight"], bq)
        k = linear(x, w[p + "self_attn.k_proj.weight"], bk)
        v = linear(x, w[p + "self_attn.v_proj.weight"], bv)
        q = q.reshape(T, H, dh).transpose(1, 0, 2)    # [H, T, dh]
        k = k.reshape(T, Hkv, dh).transpose(1, 0, 2)  # [Hkv, T, dh]
        v = v.reshape(T, Hkv, dh).transpose(1, 0, 2)
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
        # repeat_kv: KV head g serves query heads g*n_rep .. g*n_rep + n_rep - 1
        k = np.repeat(k, n_rep, axis=0)  # [H, T, dh]
        v = np.repeat(v, n_rep, axis=0)
        scores = q @ k.transpose(0, 2, 1) / np.sqrt(dh) + causal[None, :, :]  # [H, T, T]
        attn = softmax(scores, axis=-1) @ v                                   # [H, T, dh]
        attn = attn.transpose(1, 0, 2).reshape(T, H * dh)
        bo = w[p + "self_attn.o_proj.bias"] if o_bias else None
        h = h + linear(attn, w[p + "self_attn.o_proj.weight"], bo)
        # --- MLP block
        x = rms_norm(h, w[p + "post_attention_layernorm.weight"], eps)
        gate = linear(x, w[p + "mlp.gate_proj.weight"])
        up = linear(x, w[p + "mlp.up_proj.weight"])
        h = h + linear(silu(gate) * up, w[p + "mlp.down_proj.weight"])

    h = rms_norm(h, w["model.norm.weight"], eps)
    lm_head = w["model.embed_tokens.weight"] if tied else w["lm_head.weight"]
    return linear(h, lm_head)  # [T, V]


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("--tokens", required=True, help="comma-separated token ids")
    args = ap.parse_args(argv)

    with open(os.path.join(args.model_dir, "config.json")) as f:
        config = json.load(f)
    weights = read_safetensors(os.path.join(args.model_dir, "model.safetensors"))
    tokens = [int(t) for t in args.tokens.split(",")]
    logits = forward(config, weights, tokens)
    json.dump({"logits": logits.tolist()}, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
