"""Encoders: hashing determinism and norms, disk cache (content-addressed, corrupt shards ignored),
spec parsing, and the offline MiniLM model (real model, no hub)."""
from __future__ import annotations

import numpy as np
import pytest

from dpmv_lib.encoders import CachedEncoder, HashingEncoder, get_encoder, text_key
from dpmv_lib.errors import ParameterError


def test_hashing_deterministic_unit_norm_and_lexical():
    e = HashingEncoder(256)
    a = e.encode(["Keep your blood sugar steady with fibre.", "keep your BLOOD sugar steady with fibre",
                  "The train leaves at noon.", ""])
    assert a.shape == (4, 256) and a.dtype == np.float32
    assert np.allclose(np.linalg.norm(a[:3], axis=1), 1.0, atol=1e-5)
    assert np.all(a[3] == 0)  # empty text -> zero vector, no NaN
    assert a[0] @ a[1] > 0.9 and abs(a[0] @ a[2]) < 0.3
    assert np.array_equal(a, HashingEncoder(256).encode(["Keep your blood sugar steady with fibre.",
                                                         "keep your BLOOD sugar steady with fibre",
                                                         "The train leaves at noon.", ""]))


def test_bad_specs_and_inputs():
    with pytest.raises(ParameterError, match="unknown encoder spec"):
        get_encoder("bert")
    with pytest.raises(ParameterError, match="hashing"):
        get_encoder("hashing:abc")
    with pytest.raises(ParameterError, match="not one string"):
        HashingEncoder().encode("a single string")
    with pytest.raises(ParameterError, match="dim"):
        HashingEncoder(2)


class CountingEncoder:
    def __init__(self):
        self.inner = HashingEncoder(64)
        self.id, self.dim, self.calls = "count-64", 64, []

    def encode(self, texts):
        self.calls.append(list(texts))
        return self.inner.encode(texts)


def test_cache_reuses_embeddings_across_instances(tmp_path):
    base = CountingEncoder()
    c1 = CachedEncoder(base, tmp_path)
    x1 = c1.encode(["alpha", "beta", "alpha"])
    assert base.calls == [["alpha", "beta"]]            # each distinct text once
    c2 = CachedEncoder(base, tmp_path)                   # a new process would load the shards
    x2 = c2.encode(["beta", "alpha", "gamma"])
    assert base.calls[-1] == ["gamma"]
    assert np.allclose(x2[0], x1[1]) and np.allclose(x2[1], x1[0])
    assert c2.hits == 2 and c2.misses == 1


def test_corrupt_shard_is_ignored_not_used(tmp_path):
    base = CountingEncoder()
    CachedEncoder(base, tmp_path).encode(["alpha"])
    shard_dir = tmp_path / "count-64"
    bad = shard_dir / "broken.npz"
    bad.write_bytes(b"not a zip file")
    # a shard with the right key but a wrong-shaped embedding is also refused
    np.savez(shard_dir / "wrong.npz", keys=np.frombuffer(text_key("beta"), np.uint8).reshape(1, 16),
             emb=np.ones((1, 3), np.float32))
    with pytest.warns(UserWarning, match="corrupt"):
        c = CachedEncoder(base, tmp_path)
    assert len(c.bad_shards) == 2
    x = c.encode(["beta"])
    assert base.calls[-1] == ["beta"]                    # re-encoded, not taken from the bad shard
    assert x.shape == (1, 64)


@pytest.mark.slow
def test_minilm_offline_semantic():
    e = get_encoder("minilm")
    x = e.encode(["Pick high-fibre dishes with little added sugar.",
                  "Choose meals rich in fibre and low in sugar.",
                  "Your phone bill can be lowered by switching plans."])
    assert x.shape == (3, 384)
    assert np.allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-4)
    assert x[0] @ x[1] > 0.6 > 0.2 > x[0] @ x[2]
