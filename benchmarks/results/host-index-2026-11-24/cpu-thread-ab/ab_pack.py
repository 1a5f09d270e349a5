"""benchmarks/index_stages.py with os.fsync timed apart; OLD_PACK=1 swaps the old packing (one
np.concatenate, then the cast) back in for the segment store.

    OLD_PACK={0,1} PYTHONPATH=src python ab_pack.py PATH --index-dir DIR -- --store exact
"""

import os
import sys

import numpy as np

sys.path.insert(0, "/work/wt-host/benchmarks")
import index_stages as st  # noqa: E402 - from the path above

st.STAGES.insert(0, ("os", "fsync", "os.fsync"))
if os.environ.get("OLD_PACK") == "1":
    import supergrep.arrays as arrays
    import supergrep.index.store as store

    def pack(parts, dtype, dim):
        return np.concatenate(parts).astype(dtype) if parts else np.zeros((0, dim), dtype)

    arrays.pack = pack
    store.pack = pack
st.main()
