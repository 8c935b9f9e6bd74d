"""Benchmarks that run ckpt side by side with peer checkpoint stores (see bench/README.md).

Every benchmark runs ckpt as an installed ckpt runs: from compiled bytecode. Where
PYTHONDONTWRITEBYTECODE is set (some CI images and sandboxes set it), each `ckpt`
process would compile the package from source again, 50-100 ms of every command that a
user's install never pays, and a cost that grows with the number of modules rather than
with the work measured. It is unset here, for this process and every child.
"""

import os
import sys

os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False
