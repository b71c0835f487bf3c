#!/usr/bin/python3
"""Write a llama-architecture GGUF file of random weights with a model's shape,
so llama.cpp can serve the model that servesim simulates and serves.

The shape comes from a Hugging Face config.json (`servesim models --model
small-110m --config-json` prints one for a preset). The file follows the GGUF
v3 layout of ggml's docs/gguf.md: a header, key-value metadata, tensor infos
(dimensions innermost first, as ggml's ne[]), then tensor data aligned to
`general.alignment`. Weights are F16 (the presets' torch_dtype is 2 bytes),
the RMSNorm weights F32 ones, as llama.cpp's converter writes them.

The vocabulary is a SentencePiece ("llama") one of `vocab_size` entries:
<unk>, <s>, </s>, the 256 byte tokens <0x00>..<0xFF>, then filler pieces.
Prompts are sent as token ids, so the vocabulary's text does not matter.

Standard library only (no numpy): random F16 values are made from SHAKE-256
bytes whose high byte is remapped so every value is finite, of magnitude
2^-7..2^-3, with a random sign.

Usage: write_gguf.py --config config.json --out model.gguf [--seed 1]
"""
import argparse
import hashlib
import json
import struct
import sys

ALIGNMENT = 32
GGML_F32, GGML_F16 = 0, 1
# GGUF metadata value types (ggml docs/gguf.md)
UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY = 4, 5, 6, 7, 8, 9
TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_BYTE = 1, 2, 3, 6


def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def kv(key, vtype, value):
    out = gguf_string(key) + struct.pack("<I", vtype)
    if vtype == UINT32:
        return out + struct.pack("<I", value)
    if vtype == FLOAT32:
        return out + struct.pack("<f", value)
    if vtype == BOOL:
        return out + struct.pack("<?", value)
    if vtype == STRING:
        return out + gguf_string(value)
    raise ValueError(vtype)


def kv_array(key, etype, values):
    out = gguf_string(key) + struct.pack("<IIQ", ARRAY, etype, len(values))
    if etype == STRING:
        return out + b"".join(gguf_string(v) for v in values)
    if etype == FLOAT32:
        return out + struct.pack(f"<{len(values)}f", *values)
    if etype == INT32:
        return out + struct.pack(f"<{len(values)}i", *values)
    raise ValueError(etype)


# F16 high byte: sign | 5 exponent bits | 2 mantissa bits. Keep the sign and
# mantissa bits, draw the biased exponent from 8..11 (2^-7..2^-4 times 1.x).
HIGH_BYTE = bytes((b & 0x83) | ((8 + ((b >> 2) & 3)) << 2) for b in range(256))


def random_f16(count, seed, name):
    raw = hashlib.shake_256(f"{seed}:{name}".encode()).digest(2 * count)
    out = bytearray(raw)
    out[1::2] = raw[1::2].translate(HIGH_BYTE)
    return bytes(out)


def ones_f32(count):
    return struct.pack("<f", 1.0) * count


def read_config(path):
    with open(path) as f:
        c = json.load(f)
    need = ["hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size"]
    missing = [k for k in need if not isinstance(c.get(k), int) or c[k] <= 0]
    if missing:
        sys.exit(f"{path}: missing or not a positive integer: {', '.join(missing)}")
    if c.get("model_type", "llama") not in ("llama", "mistral"):
        sys.exit(f"{path}: model_type '{c.get('model_type')}': only llama-architecture models are written")
    if c["vocab_size"] < 259:
        sys.exit(f"{path}: vocab_size {c['vocab_size']}: at least 259 (3 specials and 256 byte tokens)")
    c.setdefault("num_key_value_heads", c["num_attention_heads"])
    c.setdefault("head_dim", c["hidden_size"] // c["num_attention_heads"])
    return c


def tensors(c):
    """(name, dims innermost first, ggml type) of a llama model, llama.cpp's names."""
    d, ff, vocab = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    q_out = c["num_attention_heads"] * c["head_dim"]
    kv_out = c["num_key_value_heads"] * c["head_dim"]
    out = [("token_embd.weight", [d, vocab], GGML_F16), ("output_norm.weight", [d], GGML_F32)]
    if not c.get("tie_word_embeddings", False):
        out.append(("output.weight", [d, vocab], GGML_F16))
    for i in range(c["num_hidden_layers"]):
        p = f"blk.{i}."
        out += [(p + "attn_norm.weight", [d], GGML_F32),
                (p + "attn_q.weight", [d, q_out], GGML_F16),
                (p + "attn_k.weight", [d, kv_out], GGML_F16),
                (p + "attn_v.weight", [d, kv_out], GGML_F16),
                (p + "attn_output.weight", [q_out, d], GGML_F16),
                (p + "ffn_norm.weight", [d], GGML_F32),
                (p + "ffn_gate.weight", [d, ff], GGML_F16),
                (p + "ffn_up.weight", [d, ff], GGML_F16),
                (p + "ffn_down.weight", [ff, d], GGML_F16)]
    return out


def metadata(c, name):
    vocab = c["vocab_size"]
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    tokens += [f"\u2581t{i}" for i in range(vocab - len(tokens))]
    types = [TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_CONTROL] + [TOKEN_BYTE] * 256
    types += [TOKEN_NORMAL] * (vocab - len(types))
    scores = [0.0] * 259 + [-float(i) for i in range(vocab - 259)]
    a = "llama"
    return [kv("general.architecture", STRING, a),
            kv("general.name", STRING, name),
            kv("general.alignment", UINT32, ALIGNMENT),
            kv("general.file_type", UINT32, 1),  # mostly F16
            kv(f"{a}.context_length", UINT32, int(c.get("max_position_embeddings", 2048))),
            kv(f"{a}.embedding_length", UINT32, c["hidden_size"]),
            kv(f"{a}.block_count", UINT32, c["num_hidden_layers"]),
            kv(f"{a}.feed_forward_length", UINT32, c["intermediate_size"]),
            kv(f"{a}.attention.head_count", UINT32, c["num_attention_heads"]),
            kv(f"{a}.attention.head_count_kv", UINT32, c["num_key_value_heads"]),
            kv(f"{a}.attention.key_length", UINT32, c["head_dim"]),
            kv(f"{a}.attention.value_length", UINT32, c["head_dim"]),
            kv(f"{a}.rope.dimension_count", UINT32, c["head_dim"]),
            kv(f"{a}.rope.freq_base", FLOAT32, float(c.get("rope_theta", 10000.0))),
            kv(f"{a}.attention.layer_norm_rms_epsilon", FLOAT32, float(c.get("rms_norm_eps", 1e-5))),
            kv(f"{a}.vocab_size", UINT32, vocab),
            kv("tokenizer.ggml.model", STRING, "llama"),
            kv_array("tokenizer.ggml.tokens", STRING, tokens),
            kv_array("tokenizer.ggml.scores", FLOAT32, scores),
            kv_array("tokenizer.ggml.token_type", INT32, types),
            kv("tokenizer.ggml.unknown_token_id", UINT32, 0),
            kv("tokenizer.ggml.bos_token_id", UINT32, 1),
            kv("tokenizer.ggml.eos_token_id", UINT32, 2),
            kv("tokenizer.ggml.add_bos_token", BOOL, False)]


def pad(n):
    return (-n) % ALIGNMENT


def write(c, out_path, seed, name):
    ts = tensors(c)
    meta = metadata(c, name)
    infos, offset = [], 0
    for tname, dims, ttype in ts:
        count = 1
        for x in dims:
            count *= x
        nbytes = count * (4 if ttype == GGML_F32 else 2)
        infos.append(gguf_string(tname) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
                     + struct.pack("<IQ", ttype, offset))
        offset += nbytes + pad(nbytes)
    header = b"GGUF" + struct.pack("<IQQ", 3, len(ts), len(meta)) + b"".join(meta) + b"".join(infos)
    with open(out_path, "wb") as f:
        f.write(header + b"\0" * pad(len(header)))
        for tname, dims, ttype in ts:
            count = 1
            for x in dims:
                count *= x
            data = ones_f32(count) if ttype == GGML_F32 else random_f16(count, seed, tname)
            f.write(data + b"\0" * pad(len(data)))
    return offset + len(header) + pad(len(header))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True, help="a Hugging Face config.json (llama architecture)")
    ap.add_argument("--out", required=True, help="the .gguf file to write")
    ap.add_argument("--seed", type=int, default=1, help="seed of the random weights")
    ap.add_argument("--name", default="servesim-random", help="general.name")
    a = ap.parse_args()
    size = write(read_config(a.config), a.out, a.seed, a.name)
    print(f"wrote {a.out}: {size / 1e6:.1f} MB", file=sys.stderr)


if __name__ == "__main__":
    main()
