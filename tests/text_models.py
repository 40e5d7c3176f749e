#!/usr/bin/python3
"""Writes PyTorch text models as test_text_torch reads them.

Usage: text_models.py OUTDIR

OUTDIR/tokens: a batch of 4 documents of 12 token ids (padding 0 after the words, one document of
a single word), raw little-endian float32; for each model NAME: OUTDIR/NAME.safetensors, its
state_dict as PyTorch names it, with seeded random weights and biases; OUTDIR/NAME.logits,
PyTorch's logits (4 x 3) for the batch in evaluation mode, raw float32. Padding is what nnlab
does with it: nn.Embedding(padding_idx=0) (row 0 zero), averages and maxima over the words
alone, recurrences over the packed words (pack_padded_sequence) where the spec passes the tokens.

The safetensors file is written with a small writer, as the safetensors package may be absent."""
import json
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.utils.rnn as rnn_utils

V, L, N, K = 50, 12, 4, 3


def save_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        data = t.detach().contiguous().cpu().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def masked_avg(x, mask):  # x (N, L, C)
    m = mask.unsqueeze(-1).float()
    return (x * m).sum(1) / m.sum(1).clamp(min=1)


def masked_max(x, mask):
    x = x.masked_fill(~mask.unsqueeze(-1), float("-inf"))
    out = x.max(1).values
    return torch.where(torch.isinf(out), torch.zeros_like(out), out)


class EmbedBag(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(V, 64, padding_idx=0)
        self.fc1 = nn.Linear(64, 64)
        self.fc2 = nn.Linear(64, K)

    def forward(self, tok):
        x = masked_avg(self.embed(tok), tok != 0)
        return self.fc2(torch.relu(self.fc1(x)))


class TextCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(V, 64, padding_idx=0)
        self.conv = nn.Conv1d(64, 128, 3, padding=1)
        self.fc = nn.Linear(128, K)

    def forward(self, tok):
        x = torch.relu(self.conv(self.embed(tok).transpose(1, 2)))  # (N, 128, L)
        return self.fc(masked_max(x.transpose(1, 2), tok != 0))


class Recurrent(nn.Module):
    def __init__(self, kind, packed, all_states):
        super().__init__()
        self.embed = nn.Embedding(V, 16, padding_idx=0)
        self.rnn = (nn.LSTM if kind == "lstm" else nn.GRU)(16, 8, batch_first=True)
        self.fc = nn.Linear(8, K)
        self.packed, self.all_states = packed, all_states

    def forward(self, tok):
        x = self.embed(tok)
        lengths = (tok != 0).sum(1)
        if self.packed:
            x = rnn_utils.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, h = self.rnn(x)
        if isinstance(h, tuple):
            h = h[0]
        if not self.all_states:
            return self.fc(h[-1])
        if self.packed:
            out, _ = rnn_utils.pad_packed_sequence(out, batch_first=True, total_length=L)
        return self.fc(masked_max(out, tok != 0))


def main():
    outdir = sys.argv[1]
    torch.manual_seed(3)
    tok = torch.zeros(N, L, dtype=torch.long)
    for s, n in enumerate([12, 7, 1, 4]):
        tok[s, :n] = torch.randint(1, V, (n,))
    with open(outdir + "/tokens", "wb") as f:
        f.write(tok.float().numpy().astype("<f4").tobytes())
    models = {
        "embedbag": EmbedBag(),
        "textcnn": TextCNN(),
        "lstm": Recurrent("lstm", False, False),
        "lstm_packed": Recurrent("lstm", True, False),
        "gru_packed": Recurrent("gru", True, False),
        "gru_all": Recurrent("gru", True, True),
    }
    for name, m in models.items():
        with torch.no_grad():
            for pname, p in m.named_parameters():
                p.uniform_(-0.5, 0.5)
            m.embed.weight[0].zero_()
        m.eval()
        with torch.no_grad():
            logits = m(tok)
        save_safetensors(f"{outdir}/{name}.safetensors", m.state_dict())
        with open(f"{outdir}/{name}.logits", "wb") as f:
            f.write(logits.numpy().astype("<f4").tobytes())


main()
