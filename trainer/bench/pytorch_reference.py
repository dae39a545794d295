"""PyTorch reference of kfaws-trainer's training step, for the throughput ratio of `make bench`.

Same network (the PyTorch CIFAR-10 tutorial's LeNet, 1x28x28 input), same data (Fashion-MNIST
IDX, normalised with mean 0.2860 / std 0.3530), same batch size, SGD(lr=0.02, momentum=0.9),
cross-entropy, same thread count. `--device cuda` trains on the GPU as kfaws-trainer does with
`backend=nccl` (each batch built on the host, then copied). Prints one line:
bench=pytorch_train_throughput device=cpu batch_size=64 steps=200 threads=2 images_per_sec=N
"""
import argparse
import gzip
import os
import struct
import time

import numpy as np
import torch
from torch import nn


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    magic = struct.unpack(">I", data[:4])[0]
    dims = struct.unpack(">" + "I" * (magic & 0xFF), data[4 : 4 + 4 * (magic & 0xFF)])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * len(dims)).reshape(dims)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 4 * 4, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = self.pool(torch.relu(self.conv1(x)))
        x = self.pool(torch.relu(self.conv2(x)))
        x = torch.flatten(x, 1)
        x = torch.relu(self.fc1(x))
        x = torch.relu(self.fc2(x))
        return self.fc3(x)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    images = read_idx(os.path.join(args.data_dir, "train-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(args.data_dir, "train-labels-idx1-ubyte.gz"))
    device = torch.device(args.device)
    model = Net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    n = len(labels)
    started = time.perf_counter()
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            if args.device == "cuda":
                torch.cuda.synchronize()
            started = time.perf_counter()
        lo = (step * args.batch_size) % (n - args.batch_size)
        # Normalisation inside the timed loop, as kfaws-trainer builds each batch from bytes.
        x = torch.from_numpy(images[lo : lo + args.batch_size].astype(np.float32) / 255.0)
        x = ((x - 0.2860) / 0.3530).unsqueeze(1).to(device)
        y = torch.from_numpy(labels[lo : lo + args.batch_size].astype(np.int64)).to(device)
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
    if args.device == "cuda":
        torch.cuda.synchronize()
    secs = time.perf_counter() - started
    print(
        f"bench=pytorch_train_throughput device={args.device} batch_size={args.batch_size} steps={args.steps} "
        f"threads={args.threads} torch={torch.__version__} images_per_sec={args.steps * args.batch_size / secs:.0f}"
    )


if __name__ == "__main__":
    main()
