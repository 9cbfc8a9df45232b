"""Named parameter sets (papermill profiles). Every notebook's parameters cell has ``profile``;
notebooks call :func:`get_profile` and read what they need from it."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ..core.errors import ParameterError


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    pairs: int | dict[str, int] | None  # PairedMem pairs evaluated (None = all 320; {split: n}: n of
                                        # that split and every pair of the others, rq1.select_pairs)
    transfer_pairs: int | None   # transfer pairs evaluated (None = all 67)
    responder: str               # "surrogate" | "smollm2" | "hf:<path>" | "llamacpp[:<gguf>][@f16]"
                                 # | "openai:<base_url>|<model>"
    encoder: str                 # auditor + rubric-judge encoder: "hashing" | "minilm[-ov][@fp32|@bf16]"
                                 # | "st[-ov]:<path>[@...]"
                                 # (no suffix: bf16 on CPUs with avx512_bf16/amx_bf16, else fp32; the
                                 # auditor embeds each whole response, exactly C.5)
    judge: str                   # "rubric" | "llm:<spec>"
    em_seeds: tuple[int, ...] = (0, 1, 2)
    response_models: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)
    # notebook parameters the runner sets under this profile, in every notebook whose parameters
    # cell declares them (a -p override on the command line wins)
    notebook_defaults: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def for_seed(self, seed: int) -> "Profile":
        """This profile under run seed ``seed``: the EM seeds move to a disjoint block
        (``e + seed * (max + 1)``; seed 0 keeps them), so ``--seed`` reruns the mechanism's
        randomness. The surrogate, the splits of subsets and the bootstrap take ``seed`` directly."""
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ParameterError(f"seed must be an int >= 0, got {seed!r}")
        if seed == 0:
            return self
        step = max(self.em_seeds) + 1
        return replace(self, em_seeds=tuple(e + seed * step for e in self.em_seeds))


PROFILES: dict[str, Profile] = {
    "smoke": Profile("smoke", "tests and CI: every notebook end to end in seconds",
                     pairs=16, transfer_pairs=8, responder="surrogate", encoder="hashing",
                     judge="rubric", em_seeds=(0, 1)),
    # MiniLM run by OpenVINO (bf16 where the CPU has it, else f32): on the full default profile it
    # kept every verdict of notebooks 03-05, every AUC within 0.007, the judge's agreement kappas
    # unchanged and U's held-out kappas within 0.005 of PyTorch (benchmarks/results/encoder_decision.md);
    # PyTorch stays selectable as "minilm" ("minilm@fp32" for full precision).
    "default": Profile("default", "the main job on a laptop CPU, all tables",
                       pairs=None, transfer_pairs=None, responder="surrogate", encoder="minilm-ov",
                       judge="rubric"),
    # SmolLM2 through OpenVINO f32 (the batch-invariant engine measured fastest without AMX,
    # benchmarks/results/generation.md), EM seeds {0, 1, 2}, T = 16. Sized to about 6 hours of
    # generation at the measured 1.9 responses/s (README, `--plan`: 41,131 distinct requests):
    # every validation and test pair (the reported ones) and 96 of the 193 PairedMem train pairs,
    # which only fit the auditors (all 320 pairs: 55,023 requests, 8.0 h); horizons stop at T = 16
    # (T_max): notebook 04's curves to T = 32 would about double its distinct prompts.
    "llm": Profile("llm", "real offline generation with SmolLM2-135M-Instruct (OpenVINO f32): every validation, "
                   "test and transfer pair, 96 train pairs, no network",
                   pairs={"train": 96}, transfer_pairs=None, responder="openvino:smollm2@f32", encoder="minilm-ov",
                   judge="rubric", notebook_defaults={"T_max": 16}),
    "llm-smoke": Profile("llm-smoke", "the llm profile's code path end to end on 16 + 4 pairs, one EM seed",
                         pairs=16, transfer_pairs=4, responder="openvino:smollm2@f32", encoder="minilm-ov",
                         judge="rubric", em_seeds=(0,), notebook_defaults={"T_max": 16}),
    "paper": Profile("paper", "the paper's setting on GPUs: HF model paths or OpenAI-compatible servers",
                     pairs=None, transfer_pairs=None, responder="openai",
                     encoder="st:sentence-transformers/all-mpnet-base-v2",
                     judge="llm", response_models=("Qwen2.5-7B-Instruct", "Llama-3.1-8B-Instruct", "gemma-2-9b-it")),
}


def get_profile(name: str, **overrides: Any) -> Profile:
    """The named profile, with optional field overrides. Unknown names list the valid ones."""
    if name not in PROFILES:
        raise ParameterError(f"unknown profile {name!r}; valid profiles: {', '.join(PROFILES)}")
    prof = PROFILES[name]
    bad = set(overrides) - set(prof.to_dict())
    if bad:
        raise ParameterError(f"unknown profile fields {sorted(bad)}; valid: {sorted(prof.to_dict())}")
    return replace(prof, **overrides) if overrides else prof
