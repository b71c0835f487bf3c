#!/usr/bin/env python3
"""Writes split_cases.json: texts and their pre-tokens under the GPT-2,
Llama-3 and Qwen2 split patterns, as the `regex` module (pip; not in Debian) (which has \\p{L},
(?i:...) and look-ahead, like Hugging Face's Oniguruma) splits them. The
test checks engine/text/byte_level_pretokenizer.cpp's hand-written matcher
against them. Deterministic; run from anywhere."""
import json
import os
import random

import regex

PATTERNS = {
    "gpt2": r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
    "llama3": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
}

# Pieces random texts are made of: words, digits, contractions, whitespace
# of every kind, punctuation, and letters, marks and numbers beyond ASCII.
PIECES = ["hello", "World", "a", "I", "x", "123", "4567", "7", "'s", "'S", "'re", "'LL", "'d", "'x", "'",
          " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\u00a0", "\u3000", "\u2009",
          ".", ",", "!?", "(", ")", "--", "...", "\"", "$", "_", "+=", "#",
          "é", "naïve", "ß", "Ωμέγα", "привет", "日本語", "한국어", "ก", "א", "ع", "e\u0301", "\u0301",
          "²", "½", "٣", "Ⅻ", "①", "😀", "👍🏽", "\u200d", "ſ"]

FIXED = ["Hello world", "it's", "IT'S", "we'll", "4123", "a  b", "a   ", "a\n\nb", "  x", "\n", " ",
         "(hello", "¡hola!", "x\t\ty", "line\r\n\r\nnext", "1234567", "héllo wörld", "😀😀 ok", "'ſTS", ""]


def main():
    rng = random.Random(31)
    texts = list(FIXED)
    for _ in range(300):
        texts.append("".join(rng.choice(PIECES) for _ in range(rng.randint(1, 8))))
    compiled = {k: regex.compile(p) for k, p in PATTERNS.items()}
    cases = []
    for t in texts:
        case = {"text": t}
        for k, r in compiled.items():
            parts = r.findall(t)
            assert "".join(parts) == t, (k, t)
            case[k] = parts
        cases.append(case)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "split_cases.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print("%s: %d cases" % (path, len(cases)))


if __name__ == "__main__":
    main()
