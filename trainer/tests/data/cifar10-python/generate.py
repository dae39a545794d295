"""Writes the CIFAR-10 python-version fixtures read by trainer/src/data/cifar_python.rs's tests.

Each file is one batch shaped like the official archive's (a dict with b"batch_label",
b"labels", b"data" and b"filenames"; data a uint8 numpy array, one channel-major 3,072-byte
row per image), holding 3 images: image i has label LABELS[i] and pixel j equal to
(7 * i + j) % 256. The official files are Python 2 protocol-2 pickles; protocol 2 from
Python 3 spells bytes as _codecs.encode(...), protocol 4 as BINBYTES, so both are covered.

Regenerate with any Python 3 that has numpy: python3 generate.py
"""
import pickle

import numpy as np

LABELS = [3, 8, 0]
data = np.array(
    [[(7 * i + j) % 256 for j in range(3072)] for i in range(len(LABELS))], dtype=np.uint8
)
batch = {
    b"batch_label": b"fixture batch 1 of 1",
    b"labels": LABELS,
    b"data": data,
    b"filenames": [b"fixture_%d.png" % i for i in range(len(LABELS))],
}
for protocol in (2, 4):
    with open(f"batch-protocol{protocol}.pickle", "wb") as f:
        pickle.dump(batch, f, protocol=protocol)
