"""The digits training split as a Parquet table, for the Ray Data form of the example.

``python -m examples.digits.data DEST`` writes it to DEST: a local directory, or an
``s3://bucket/prefix`` (credentials and endpoint from the usual AWS environment variables and
``AWS_ENDPOINT_URL``). Columns: ``p0`` ... ``p63`` (pixels scaled to [0, 1], float32) and
``label`` (int64). examples/digits-data.yaml reads it as ``datasets.train``.
"""

from __future__ import annotations

import sys

import numpy as np
import pyarrow as pa

PIXELS = [f"p{i}" for i in range(64)]


def digits_table(seed: int = 0) -> pa.Table:
    """The same training split examples.digits.train uses for its in-memory loader."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    x_tr, _, y_tr, _ = train_test_split(x, y, test_size=0.25, random_state=seed, stratify=y)
    columns = {name: x_tr[:, i] for i, name in enumerate(PIXELS)}
    columns["label"] = y_tr.astype(np.int64)
    return pa.table(columns)


def write(dest: str, seed: int = 0, files: int = 4) -> int:
    """Write the table to ``dest`` in ``files`` Parquet files; return the row count."""
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    table = digits_table(seed)
    fs, root = pafs.FileSystem.from_uri(dest if "://" in dest else f"file://{dest}")
    fs.create_dir(root, recursive=True)
    step = -(-table.num_rows // files)
    for i in range(files):
        pq.write_table(table.slice(i * step, step), f"{root}/part-{i}.parquet", filesystem=fs)
    return int(table.num_rows)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m examples.digits.data DEST (a directory or s3://bucket/prefix)")
    print(f"wrote {write(sys.argv[1])} rows to {sys.argv[1]}")
