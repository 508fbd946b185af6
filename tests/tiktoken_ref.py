"""tiktoken_ref.py: the reference side of tests/test_tiktoken.sh.

  tiktoken_ref.py torture OUT          writes the Unicode torture text (bytes, some invalid UTF-8)
  tiktoken_ref.py long OUT             writes text of very long pieces (letters, digits, punctuation)
  tiktoken_ref.py encode RANKS PATTERN MODE IN OUT
                                       tiktoken's tokens for IN (decoded as UTF-8 with errors="replace")
                                       as little-endian uint32; MODE ordinary or special
  tiktoken_ref.py llmc RANKS OUT       llm.c's gpt2_tokenizer.bin for GPT-2's ranks (as llm.c writes it)
The encodings are built from the rank files here, so nothing is fetched.
"""
import struct
import sys

import tiktoken
from tiktoken.load import load_tiktoken_bpe

PATTERNS = {
    "gpt2": r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s""",
    "cl100k": r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",
    "llama3": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
}
SPECIALS = {
    "gpt2": {"<|endoftext|>": 50256},
    "cl100k": {"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
               "<|fim_suffix|>": 100260, "<|endofprompt|>": 100276},
}


def encoding(ranks_path, pattern):
    ranks = load_tiktoken_bpe(ranks_path)
    specials = SPECIALS.get(pattern, {})
    if pattern == "llama3":  # cl100k's ranks under Llama 3's pattern and specials (Meta's ranks are not public)
        named = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
                 "<|finetune_right_pad_id|>", "<|step_id|>", "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>",
                 "<|eot_id|>", "<|python_tag|>"]
        named += ["<|reserved_special_token_%d|>" % i for i in range(2, 2 + 256 - len(named))]
        specials = {t: 128000 + i for i, t in enumerate(named)}
    return tiktoken.Encoding(name=pattern, pat_str=PATTERNS[pattern], mergeable_ranks=ranks, special_tokens=specials)


def torture():
    parts = [
        "Hello, world! It's a test: don't, won't, I'LL, we'Re, they'VE, she'D, it'S, O'Neil's '' 's 'll\n",
        "Curly: it\u2019s, l\u2019homme; long s after apostrophe: 'ſ 'ſt; Kelvin \u212a 'K\n",
        "Ελληνικά κείμενα, Русский текст, עברית, العربية مع تشكيل: مَرْحَبًا, हिन्दी में लिखा, ไทยภาษา, 日本語のテキスト、中文文本。한국어 텍스트\n",
        "Combining: e\u0301 a\u0300\u0316 Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319 n\u0303 \u0301alone\n",
        "Emoji: 😀😃 👍🏽 👨‍👩‍👧‍👦 🇫🇷🇯🇵 ❤️ 🏳️‍🌈 a😀b 1😀2\n",
        "Digits: 0 12 345 6789 1234567890123456789 3.14159 1,000,000 ١٢٣٤ １２３ ²³ ½ Ⅻ 2024-05-22T10:00\n",
        "Whitespace:" + " " * 1000 + "x\t\t\t\ty" + "\n" * 7 + "z \r\n\r\n  \n\t \u00a0\u00a0a\u3000\u3000b\u2028c\u0085d\u2003e" + " " * 37 + "\n",
        "Code: def f(x):\n    return x**2  # comment\n\tif (a<=b && c!=d) { y += 1; }\n",
        "Specials as text: <|endoftext|> and <|fim_prefix|>x<|fim_suffix|><|endofprompt|> <|end\n",
        "Llama: <|begin_of_text|>hi<|eot_id|><|reserved_special_token_246|><|reserved_special_token_247|>\n",
        "Punctuation runs: !!!??? ... --- *** ((()))  \"quoted\" «guillemets» — – …\n",
        "Mixed: abc123def ABC_def-ghi.jkl/mno\\pqr ÀÉÎõü straße ǅ ǈ ǲ ﬁ ﬂ\n",
    ]
    text = "".join(parts).encode("utf-8")
    bad = [b"\x80", b"\xbf\xbf", b"\xc0\xaf", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xf0\x9f\x98", b"\xf4\x90\x80\x80",
           b"\xf5", b"\xff\xfe", b"\xe2\x82", b"\xc3"]
    text += b"Invalid UTF-8:" + b" x".join(bad) + b" ok\n"
    text += "tail   ".encode() + b"\xe2\x82"  # ends inside a sequence
    return text


def long_pieces():
    import random
    rng = random.Random(18)
    letters = "".join(rng.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJ") for _ in range(30000))
    accents = "".join(rng.choice("éèàçüößñøåæœЖжλΩ") for _ in range(5000))
    digits = "".join(rng.choice("0123456789") for _ in range(8000))
    punct = "".join(rng.choice("!?.,;:-_=+*/\\()[]{}<>|#@$%^&~`\"") for _ in range(6000))
    return (letters + " " + accents + " " + digits + " " + punct + "\n" + " " * 5000 + "end\n").encode()


def main():
    cmd = sys.argv[1]
    if cmd == "torture":
        open(sys.argv[2], "wb").write(torture())
    elif cmd == "long":
        open(sys.argv[2], "wb").write(long_pieces())
    elif cmd == "encode":
        ranks, pattern, mode, src, dst = sys.argv[2:7]
        enc = encoding(ranks, pattern)
        text = open(src, "rb").read().decode("utf-8", errors="replace")
        toks = enc.encode(text, allowed_special="all") if mode == "special" else enc.encode_ordinary(text)
        open(dst, "wb").write(struct.pack("<%dI" % len(toks), *toks))
    elif cmd == "llmc":
        enc = encoding(sys.argv[2], "gpt2")
        with open(sys.argv[3], "wb") as f:
            header = [20240328, 2, enc.n_vocab, enc.eot_token] + [0] * 252
            f.write(struct.pack("<256I", *header))
            for i in range(enc.n_vocab):
                b = enc.decode_single_token_bytes(i)
                f.write(struct.pack("<B", len(b)) + b)
    else:
        sys.exit("tiktoken_ref.py: unknown command " + cmd)


if __name__ == "__main__":
    main()
