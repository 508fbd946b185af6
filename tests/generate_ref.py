"""generate_ref.py MODEL N IDS...: PyTorch's greedy continuation (float64, dev/reference.py's
GPT-2) of the prompt IDS by N tokens, over the last maxT tokens; prints the new ids."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "dev"))
import reference  # noqa: E402

cfg, p = reference.load_model(sys.argv[1], torch.float64)
n, toks = int(sys.argv[2]), [int(t) for t in sys.argv[3:]]
start = len(toks)
with torch.no_grad():
    for _ in range(n):
        ctx = torch.tensor([toks[-cfg["maxT"]:]])
        logits = reference.forward(cfg, p, ctx)[0, -1, :cfg["V"]]
        toks.append(int(torch.argmax(logits)))
print(" ".join(str(t) for t in toks[start:]))
