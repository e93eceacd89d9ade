"""A training-style loop over tfshard.Dataset, without any framework: converts the table
the repo ships into shards, then fits a linear model that predicts the last of the 8
floats of `x` from the other seven, by minibatch gradient descent: three epochs, each in
a new shuffle order, the later ones from the cache the first filled.

    pip install target/wheels/tfshard-*.whl
    python examples/python/train_loop.py /tmp/small-shards

With PyTorch, hand the same Dataset to a DataLoader with ``batch_size=None`` (the
batches are made already); each DataLoader worker then reads its own share.
"""

import sys
from pathlib import Path

import numpy as np

import tfshard

root = Path(__file__).resolve().parents[2]
out = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/tfshard-train-loop")

summary = tfshard.convert(root / "testdata" / "small.parquet", out, target_shard_size="100KB", overwrite=True)
print(f"converted {summary['records']} records into {summary['shards']} shards")

data = tfshard.Dataset(out, batch_size=64, shuffle_buffer=1000, seed=42, columns=["x"], cache=True)
weights, bias, rate = np.zeros(7), 0.0, 0.002
for epoch in range(1, 4):
    losses = []
    for batch in data:
        x = batch["x"].astype(np.float64)  # [64, 8]
        inputs, target = x[:, :7], x[:, 7]
        error = inputs @ weights + bias - target
        losses.append(float(np.mean(error**2)))
        weights -= rate * 2 * inputs.T @ error / len(x)
        bias -= rate * 2 * float(np.mean(error))
    print(f"epoch {epoch}: {len(losses)} batches (len {len(data)}), mean squared error {np.mean(losses):.4f}")
