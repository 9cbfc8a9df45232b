"""The OpenVINO GenAI backend with the real SmolLM2 model, and the responder specs of every engine.

The model tests need the ``openvino`` extra (skipped, saying so, where it is missing) and export
the packaged GGUF once through tools/export_openvino.sh (cached under results/cache/models/openvino/;
about 35 s on 2 cores the first time, the exporter overlay included)."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from dpmv_lib.core.errors import GenerationError, ParameterError
from dpmv_lib.generate.interfaces import render_guidance, render_memory
from dpmv_lib.generate.responders import (DecodingConfig, OpenVINOResponder, Prompt, TransformersResponder,
                                          make_responder)
from dpmv_lib.generate.responders.openvino_backend import openvino_capabilities
from dpmv_lib.generate.responders.openvino_export import IR_FILES, ir_dir, missing_files

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parent.parent

PROMPTS = [
    Prompt("Any ideas for dinner?", render_guidance(["Keep preparation under 20 minutes."]), ("p", 0, 0)),
    Prompt("How do I save money?", "", ("p", 1, 0)),
    Prompt("Plan my weekend.", render_memory(["I work as a teacher at the local school."]), ("p", 2, 0)),
    Prompt("What should I pack for a trip?", render_guidance(["Suggest light options."]), ("p", 3, 0)),
    Prompt("Recommend a book.", render_memory(["I love hiking in the mountains."]), ("p", 4, 0)),
    Prompt("How can I sleep better?", render_guidance(["Be concise.", "Avoid medication advice."]), ("p", 5, 0)),
    Prompt("What's a good workout?", "", ("p", 6, 0)),
    Prompt("Help me write a note to my landlord.", render_memory(["My rent is due on the first."]), ("p", 7, 0))]


@pytest.fixture(scope="module")
def ir() -> Path:
    """The exported IR of the packaged SmolLM2 (exported here once when missing)."""
    if importlib.util.find_spec("openvino_genai") is None:
        pytest.skip("openvino-genai is not installed (the `openvino` extra: pip install -e '.[openvino]')")
    path = ir_dir("smollm2")
    if missing_files(path):
        run = subprocess.run(["bash", str(ROOT / "tools" / "export_openvino.sh"), sys.executable, "smollm2"],
                             cwd=ROOT, capture_output=True, text=True, timeout=1200)
        if run.returncode != 0 or missing_files(path):
            pytest.fail(f"tools/export_openvino.sh failed (code {run.returncode}):\n{run.stderr[-3000:]}")
    return path


def _ov(max_new_tokens=16, **kw) -> OpenVINOResponder:
    return OpenVINOResponder("smollm2", DecodingConfig(max_new_tokens=max_new_tokens), **{"threads": 2, **kw})


def test_specs_select_every_engine_and_precision():
    r = make_responder("openvino")
    assert isinstance(r, OpenVINOResponder) and r.precision == "f32" and r.name == "smollm2"
    b = make_responder("openvino:smollm2@bf16", batch_size=8)
    assert (b.precision, b.batch_size) == ("bf16", 8)
    assert r.revision.endswith("+openvino-f32") and b.revision.endswith("+openvino-bf16")
    assert r.revision.split("+")[0] == b.revision.split("+")[0]        # same weights, other cache entry
    assert make_responder("smollm2@bf16").dtype == "bfloat16"
    assert make_responder("smollm2").dtype == "float32"
    assert isinstance(make_responder("smollm2@f32"), TransformersResponder)
    for gone in ("llamacpp", "llamacpp:smollm2@f16", "auto"):     # engines no profile uses
        with pytest.raises(ParameterError, match="unknown responder spec"):
            make_responder(gone)


def test_bad_specs_and_options_name_the_problem(tmp_path):
    with pytest.raises(GenerationError, match="precision must be one of"):
        make_responder("openvino:smollm2@f16")
    with pytest.raises(ParameterError, match="transformers precision"):
        make_responder("smollm2@int3")
    with pytest.raises(GenerationError, match="does not exist"):
        make_responder(f"openvino:{tmp_path / 'none.gguf'}")
    with pytest.raises(GenerationError, match="batch_size"):
        OpenVINOResponder("smollm2", batch_size=0)
    with pytest.raises(ParameterError, match="unknown responder spec"):
        make_responder("openvinox")


def test_an_ignored_no_repeat_ngram_size_is_refused():
    with pytest.raises(GenerationError, match="no_repeat_ngram_size"):
        OpenVINOResponder("smollm2", DecodingConfig(no_repeat_ngram_size=4))


def test_a_missing_export_is_a_clear_error(tmp_path):
    r = OpenVINOResponder("smollm2", ir=str(tmp_path))
    with pytest.raises(GenerationError) as exc:
        r.respond(PROMPTS[:1])
    msg = str(exc.value)
    if importlib.util.find_spec("openvino_genai") is None:
        assert "pip install -e '.[openvino]'" in msg
    else:
        assert str(tmp_path) in msg and "openvino_model.xml" in msg and "tools/export_openvino.sh" in msg


def test_export_writes_every_ir_file(ir):
    assert not missing_files(ir)
    assert set(IR_FILES) <= {p.name for p in ir.iterdir()}
    assert not list(ir.parent.glob("*.tmp"))                            # nothing half-written left


def test_prompt_is_the_chat_template_of_the_model(ir):
    """The rendered prompt equals the transformers tokenizer's chat template (as the other backends)."""
    from transformers import AutoTokenizer
    hf = AutoTokenizer.from_pretrained(str(ir), local_files_only=True)
    r = _ov()
    for p in PROMPTS[:3]:
        from dpmv_lib.generate.responders import build_messages
        assert r.render(p) == hf.apply_chat_template(build_messages(p), tokenize=False, add_generation_prompt=True)


def test_f32_greedy_texts_do_not_depend_on_the_batch(ir):
    """The same text for a prompt alone, at batch 4 and 8, and in reverse order (greedy, f32)."""
    texts = {bs: _ov(batch_size=bs).respond(PROMPTS) for bs in (1, 4, 8)}
    assert all(t.strip() for t in texts[1])
    assert texts[4] == texts[1] and texts[8] == texts[1]
    assert _ov(batch_size=8).respond(PROMPTS[::-1])[::-1] == texts[1]
    r = _ov(max_new_tokens=4, batch_size=8)
    r.respond(PROMPTS)
    assert 0 < r.generated_tokens <= 4 * len(PROMPTS)


def test_repetition_control_stays_greedy_and_batch_invariant(ir):
    """With SmolLM2's repetition control (the llm profile's decoding) the texts are the same at
    batch 1 and batch 32 (32 prompts), and the control reaches the pipeline (texts change)."""
    from dpmv_lib.generate.responders import SMOLLM2_DECODING

    assert SMOLLM2_DECODING.repetition_control and SMOLLM2_DECODING.greedy
    prompts = [Prompt(p.query, p.conditioning, ("p", i, 0)) for i, p in enumerate(PROMPTS * 4)]
    prompts = [Prompt(p.query + (" Please." if i >= 16 else ""), p.conditioning, p.key) for i, p in enumerate(prompts)]
    dec = replace(SMOLLM2_DECODING, max_new_tokens=48)
    one = OpenVINOResponder("smollm2", dec, threads=2, batch_size=1).respond(prompts)
    many = OpenVINOResponder("smollm2", dec, threads=2, batch_size=32).respond(prompts)
    assert one == many and all(t.strip() for t in one)
    plain = OpenVINOResponder("smollm2", DecodingConfig(max_new_tokens=48), threads=2, batch_size=32).respond(prompts)
    assert plain != many


def test_f32_greedy_texts_do_not_depend_on_the_thread_count(ir, tmp_path, monkeypatch):
    """A long run keeps the thread count it loaded with (cores not busy then): the cached texts must
    not depend on it. The count is written to the progress log."""
    monkeypatch.setenv("DPMV_PROGRESS_LOG", str(tmp_path / "progress.log"))
    one = _ov(batch_size=8, threads=1)
    assert one.respond(PROMPTS) == _ov(batch_size=8).respond(PROMPTS)
    assert "generate (smollm2): OpenVINO f32 on 1 of " in (tmp_path / "progress.log").read_text()


@pytest.mark.skipif(importlib.util.find_spec("openvino") is None or "BF16" not in openvino_capabilities(),
                    reason="OpenVINO reports no BF16 support on this CPU (needs AVX512-BF16 or AMX)")
def test_bf16_is_deterministic_and_close_to_f32(ir):
    """bf16 inference repeats its own texts exactly at a fixed batch (no prefix cache reuse); it may
    word some responses differently from f32, and, on a CPU without AMX, with the batch size
    (both counted by benchmarks/bench_generation.py --parts engines), but not most of them."""
    a = _ov(precision="bf16", batch_size=8).respond(PROMPTS)
    assert _ov(precision="bf16", batch_size=8).respond(PROMPTS) == a
    ref = _ov(batch_size=8).respond(PROMPTS)
    assert all(t.strip() for t in a)
    assert sum(x[:20] == y[:20] for x, y in zip(a, ref)) >= len(PROMPTS) // 2


def test_seeded_sampling_is_per_prompt(ir):
    dec = DecodingConfig(max_new_tokens=8, temperature=0.8)
    r = OpenVINOResponder("smollm2", dec, threads=2, batch_size=4)
    a = r.respond(PROMPTS[:3])
    assert r.respond(PROMPTS[:3][::-1])[::-1] == a
    assert r.respond(PROMPTS[1:2]) == a[1:2]
