"""The progress log of long runs (dpmv_lib.common.progress) and its use by generation."""
from __future__ import annotations

from dpmv_lib.common.progress import ENV, ProgressLog, note
from dpmv_lib.generate.generation import generate_responses
from dpmv_lib.generate.responders.base import Prompt


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_lines_rate_and_eta(tmp_path):
    clock = FakeClock()
    path = tmp_path / "sub" / "progress.log"
    p = ProgressLog("gen", 100, path=path, every=10, clock=clock)
    clock.t = 5
    p.update(10)                      # under `every`: no line yet
    clock.t = 20
    p.update(30)                      # 40 done in 20 s: 2/s, 60 left -> 30 s
    p.close()
    lines = path.read_text().splitlines()
    assert len(lines) == 3 and lines[0].endswith("gen: start, 100 to do")
    assert "gen: 40/100 (40.0%), 2.00/s, elapsed 0:00:20, ETA 0:00:30" in lines[1]
    assert "gen: done 40/100" in lines[2]


def test_without_a_path_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    p = ProgressLog("gen", 3, every=0)
    p.update(3)
    p.close()
    assert list(tmp_path.iterdir()) == []


class Echo:
    """A minimal model backend: echoes the query (not the surrogate, so the cache is used)."""
    backend, name, seeded, batch_size = "echo", "echo", False, 2

    def identity(self):   # what Responder.identity() names (the store records each field)
        return {"backend": "echo", "model": "echo", "revision": "", "decoding": {}}

    def request(self, p):
        return {"messages": [{"role": "user", "content": p.query}], "c": p.conditioning}

    def respond(self, prompts):
        return [p.query.upper() for p in prompts]


def test_generation_writes_progress_to_the_env_path(tmp_path, monkeypatch):
    log = tmp_path / "progress.log"
    monkeypatch.setenv(ENV, str(log))
    prompts = [Prompt(query=f"q{i % 5}", conditioning="", key=("p", i, -1)) for i in range(9)]
    texts = generate_responses(prompts, Echo(), cache=tmp_path / "c.sqlite", progress=False)
    assert texts == [f"Q{i % 5}" for i in range(9)]
    lines = log.read_text().splitlines()
    assert lines[0].endswith("generate (echo): start, 5 to do")     # 5 distinct requests
    assert "done 5/5 (100.0%)" in lines[-1]
    # everything cached: no generation step, no new lines
    generate_responses(prompts, Echo(), cache=tmp_path / "c.sqlite", progress=False)
    assert log.read_text().splitlines() == lines


def test_note_appends_one_line_only_with_a_log(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    note("generate (x)", "on 1 of 2 cores")
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setenv(ENV, str(tmp_path / "r" / "progress.log"))
    note("generate (x)", "on 1 of 2 cores")
    note("generate (x)", "again")
    lines = (tmp_path / "r" / "progress.log").read_text().splitlines()
    assert [ln.split(" ", 1)[1] for ln in lines] == ["generate (x): on 1 of 2 cores", "generate (x): again"]
