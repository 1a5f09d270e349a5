import time, numpy as np, sys
sys.path.insert(0, "src")
from supergrep.bench.search import _synthetic_codec
from supergrep.index.codec import ResidualCodec
rng = np.random.default_rng(0)
c = _synthetic_codec(384, 32768, 2, rng, 128)
n = 200_000
codes = rng.integers(0, 32768, n).astype(np.uint16); packed = rng.integers(0, 256, (n, c.residual_bytes), dtype=np.uint8)
t = time.perf_counter(); new = c.scales(codes, packed); tn = time.perf_counter() - t
old = np.empty(n, np.float16)
t = time.perf_counter()
for s in range(0, n, 1024):
    x = c.decode(codes[s:s+1024], packed[s:s+1024]); old[s:s+1024] = 1 / np.sqrt(np.einsum("ij,ij->i", x, x))
to = time.perf_counter() - t
print(f"{n} vectors: via decode {to:.2f} s, in coded coordinates {tn:.2f} s ({to/tn:.1f}x); max rel diff {np.abs(new.astype(float)/old.astype(float)-1).max():.1e}")
