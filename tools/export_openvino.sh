#!/usr/bin/env bash
# Export SmolLM2 (or any GGUF / HF checkpoint) to an OpenVINO IR for the `openvino:` responder.
#
#   bash tools/export_openvino.sh [PYTHON] [MODEL]      (defaults: .venv/bin/python, smollm2)
#
# optimum-intel (the HF -> OpenVINO IR exporter of a stateful LLM) pins transformers < 5.6 and
# pulls a CUDA torch through torchvision, which would break the project's venv (transformers
# 5.x, torch CPU). So the exporter lives in its own overlay, .venv-ov/site (git-ignored, made
# once, about 40 MB): a pip --target directory with optimum-intel, optimum, nncf and the pinned
# transformers/huggingface_hub/tokenizers, put before the venv's site-packages on PYTHONPATH only
# for the export step; torch, openvino and openvino-tokenizers come from the venv. The export
# itself runs once and is cached under results/cache/models/openvino/ (dpmv_lib/generate/responders/
# openvino_export.py: GGUF -> HF checkpoint -> OpenVINO IR, each stage logged).
set -euo pipefail
PY=${1:-.venv/bin/python}
MODEL=${2:-smollm2}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OVL=${DPMV_OV_OVERLAY:-$ROOT/.venv-ov/site}
PINS=(optimum-intel==2.2.0 optimum==2.3.0 nncf==3.4.0 transformers==5.5.4 huggingface_hub==1.21.0
      tokenizers==0.22.2 typer==0.25.1 ninja==1.13.2 pydot==4.0.1)
STAMP="$OVL/.pins"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "${PINS[*]}" ]; then
  echo "export_openvino: installing the exporter overlay into $OVL (once)" >&2
  rm -rf "$OVL.tmp" && mkdir -p "$OVL.tmp"
  "$PY" -m pip install -q --no-deps --target "$OVL.tmp" "${PINS[@]}"
  rm -rf "$OVL" && mv "$OVL.tmp" "$OVL"
  echo "${PINS[*]}" > "$STAMP"
fi
"$PY" -c 'import openvino, openvino_tokenizers' 2>/dev/null || {
  echo "export_openvino: openvino / openvino-tokenizers missing from $PY; install the extra: pip install -e '.[openvino]'" >&2; exit 2; }
cd "$ROOT"
# Stage 1 (GGUF -> HF checkpoint) needs the venv's transformers; stage 2 runs in the overlay.
HF_DIR=$("$PY" -m dpmv_lib.generate.responders.openvino_export hf "$MODEL")
PYTHONPATH="$OVL${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m dpmv_lib.generate.responders.openvino_export ir "$MODEL" "$HF_DIR"
