#!/usr/bin/env python3
"""Writes the two tiny byte-level BPE tokenizer.json fixtures of
tests/engine/test_tokenizer.cpp (run from anywhere; deterministic):

  tiny_gpt2.json    GPT-2 style: pre_tokenizer ByteLevel (use_regex true),
                    merges as "a b" strings, added token <|endoftext|> = 274
  tiny_llama3.json  Llama-3 style: Sequence [Split (Llama-3's regex),
                    ByteLevel (use_regex false)], merges as ["a", "b"] arrays,
                    ignore_merges true, Llama-3's special tokens 280..284

Both: ids 0..255 are the 256 bytes in GPT-2's order (the printable bytes
'!'..'~', '¡'..'¬', '®'..'ÿ' first, then the other 68 in byte order, so
'a' = 64, ' ' ("Ġ") = 220, '\\n' ("Ċ") = 198), then the merged tokens
256.. below in merge order, then "Ġhello" = 273, a vocab entry that no
merge reaches (ignore_merges makes " hello" one token)."""
import json
import os


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return bs, [chr(c) for c in cs]


MERGES = [  # rank: (left, right) -> id 256 + rank
    ("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o"),
    ("Ġ", "w"), ("o", "r"), ("Ġw", "or"), ("l", "d"), ("Ġwor", "ld"),
    ("Ġ", "t"), ("Ġt", "he"), ("1", "2"), ("12", "3"),
    ("Ċ", "Ċ"), ("Ġ", "Ġ"), ("'", "s"), ("i", "n"),
]

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def vocab():
    _, chars = bytes_to_unicode()
    v = {c: i for i, c in enumerate(chars)}
    for rank, (a, b) in enumerate(MERGES):
        v[a + b] = 256 + rank
    v["Ġhello"] = 273
    return v


def added(tokens):
    return [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True} for i, c in tokens]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    gpt2 = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": added([(274, "<|endoftext|>")]),
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                  "vocab": vocab(), "merges": ["%s %s" % m for m in MERGES]},
    }
    llama3 = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": added([(280, "<|begin_of_text|>"), (281, "<|end_of_text|>"),
                               (282, "<|start_header_id|>"), (283, "<|end_header_id|>"),
                               (284, "<|eot_id|>")]),
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3_REGEX}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": True, "vocab": vocab(), "merges": [list(m) for m in MERGES]},
    }
    for name, doc in (("tiny_gpt2.json", gpt2), ("tiny_llama3.json", llama3)):
        with open(os.path.join(here, name), "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
