#!/usr/bin/python3
"""Writes torchvision's resnet18 and mobilenet_v2 as test_torchvision reads them.

Usage: torchvision_models.py OUTDIR [SIZE]

For each model NAME: OUTDIR/NAME.safetensors, its state_dict exactly as PyTorch names it
(num_batches_tracked included, as int64); OUTDIR/NAME.input, a batch of 2 images 3xSIZExSIZE as
raw little-endian float32; OUTDIR/NAME.logits, PyTorch's logits (2 x 1000) for that batch in
evaluation mode, raw float32. The weights are torchvision's random initialisation (seeded); the
batchnorm running statistics are then measured on a few random batches, as training would leave
them, so that evaluation uses statistics that differ from 0 and 1 and the logits stay of order 1.

The safetensors file is written here with a small writer (8-byte header length, JSON header,
raw data) because the safetensors package may be absent."""
import json
import struct
import sys

import torch
import torchvision


def save_safetensors(path, tensors):
    dtypes = {torch.float32: "F32", torch.int64: "I64"}
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        data = t.detach().contiguous().cpu().numpy().tobytes()
        header[name] = {"dtype": dtypes[t.dtype], "shape": list(t.shape),
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


def main():
    out = sys.argv[1]
    size = int(sys.argv[2]) if len(sys.argv) > 2 else 32
    torch.manual_seed(7)
    for name in ("resnet18", "mobilenet_v2"):
        model = getattr(torchvision.models, name)()
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.momentum = None  # a cumulative average over the calibration batches
                with torch.no_grad():
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-0.2, 0.2)
        model.train()
        with torch.no_grad():
            for _ in range(4):
                model(torch.randn(8, 3, size, size))
        model.eval()
        x = torch.randn(2, 3, size, size)
        with torch.no_grad():
            logits = model(x)
        save_safetensors("%s/%s.safetensors" % (out, name), model.state_dict())
        with open("%s/%s.input" % (out, name), "wb") as f:
            f.write(x.numpy().astype("<f4").tobytes())
        with open("%s/%s.logits" % (out, name), "wb") as f:
            f.write(logits.numpy().astype("<f4").tobytes())


if __name__ == "__main__":
    main()
