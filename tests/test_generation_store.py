"""The committed generation store (shards), the cache in front of it, the llm profiles' plan and
generation in chunks: a killed chunk resumes, a corrupted entry is regenerated, a complete store
generates nothing. A small deterministic fake model stands in for SmolLM2 (no model load)."""
from __future__ import annotations

import gzip
import json

import pytest

from generation_toy import toy_benchmark

from dpmv_lib.core.errors import GenerationError, ParameterError
from dpmv_lib.experiments.generation_plan import build_plan, generate_missing
from dpmv_lib.generate.cache import GenerationCache
from dpmv_lib.generate.generation import GenerationStats, generate_transcripts
from dpmv_lib.generate.responders import DecodingConfig, Prompt, Responder
from dpmv_lib.generate.store import ENV, GenerationStore, default_store, entry_checksum, make_entry
from dpmv_lib import run as R


class Fake(Responder):
    """Deterministic text from the rendered messages; counts the prompts that reach it; can be
    told to die (like a killed process) after ``die_after`` calls."""

    backend, name, model_id, revision = "fake", "fake", "fake-model", "r1"

    def __init__(self, decoding=None, die_after=None):
        self.decoding = decoding or DecodingConfig()
        self.calls, self.prompts, self.die_after = 0, 0, die_after

    def respond(self, prompts):
        if self.die_after is not None and self.calls >= self.die_after:
            raise KeyboardInterrupt("killed")
        self.calls += 1
        self.prompts += len(prompts)
        return [f"answer to {p.query} | {len(p.conditioning)}\nline two" for p in prompts]


def shard_lines(directory):
    out = []
    for p in sorted(directory.glob("shard-*.jsonl.gz")):
        with gzip.open(p, "rt", encoding="utf-8") as f:
            out += [json.loads(x) for x in f]
    return out


def toy_run(tmp_path, store_dir, responder, **kw):
    cache = GenerationCache(tmp_path / "local.sqlite", store=store_dir)
    st = GenerationStats()
    df = generate_transcripts(toy_benchmark(), responder, ("RawReadSet", "GenericOnly"), seeds=(0,), turns=6,
                              cache=cache, progress=False, stats=st, **kw)
    cache.close()
    return df, st


def test_entries_are_readable_checksummed_json_lines(tmp_path):
    d = tmp_path / "gen"
    df, st = toy_run(tmp_path, d, Fake())
    lines = shard_lines(d)
    assert len(lines) == st.unique_requests == df["request"].nunique() > 0
    e = lines[0]
    assert set(e) == {"address", "backend", "model", "revision", "decoding", "messages_sha256", "text", "checksum"}
    assert e["model"] == "fake-model" and e["decoding"] == DecodingConfig().to_dict()
    assert e["checksum"] == entry_checksum(e)
    assert {x["address"] for x in lines} == set(df["request"])
    assert dict(zip(df["request"], df["response"])) == {x["address"]: x["text"] for x in lines}


def test_a_complete_store_generates_nothing_and_reproduces_the_table(tmp_path):
    d = tmp_path / "gen"
    first, _ = toy_run(tmp_path / "a", d, Fake())
    fake = Fake()
    again, st = toy_run(tmp_path / "b", d, fake)      # a fresh SQLite cache: only the store is shared
    assert fake.prompts == 0 and st.generated == 0 and st.cache_hits == st.unique_requests
    assert again.equals(first)


def test_corrupted_and_mismatched_entries_are_reported_and_regenerated(tmp_path, caplog):
    d = tmp_path / "gen"
    first, st = toy_run(tmp_path / "a", d, Fake())
    (shard,) = d.glob("shard-*.jsonl.gz")
    lines = shard_lines(d)
    lines[0]["text"] = "tampered"                          # checksum no longer matches
    lines[1] = make_entry(lines[1]["address"], "other model", dict(lines[1], model="not-fake"))  # valid, mismatched
    shard.write_bytes(gzip.compress("".join(json.dumps(x) + "\n" for x in lines).encode()))
    fake = Fake()
    with caplog.at_level("WARNING"):
        again, st2 = toy_run(tmp_path / "b", d, fake)
    assert fake.prompts == 2 and st2.generated == 2
    assert again.equals(first)                              # regenerated, never used
    assert "checksum mismatch" in caplog.text and "does not match its request (model differ)" in caplog.text
    assert "tampered" not in set(again["response"]) and "other model" not in set(again["response"])
    fake3 = Fake()
    toy_run(tmp_path / "c", d, fake3)                       # the regenerated entries are in a new shard
    assert fake3.prompts == 0 and len(list(d.glob("shard-*.jsonl.gz"))) == 2


def test_a_torn_last_gzip_member_keeps_the_earlier_batches(tmp_path, caplog):
    d = tmp_path / "gen"
    _, st = toy_run(tmp_path / "a", d, Fake(), batch_size=5)
    (shard,) = d.glob("shard-*.jsonl.gz")
    shard.write_bytes(shard.read_bytes()[:-60])            # a kill in the middle of the last write
    store = GenerationStore(d)
    with caplog.at_level("WARNING"):
        n = len(store)
    last = st.unique_requests % 5 or 5
    assert st.unique_requests - last <= n < st.unique_requests     # only the last batch is lost
    assert len(store.report.torn) == 1 and "unreadable" in caplog.text
    fake = Fake()
    toy_run(tmp_path / "b", d, fake)
    assert fake.prompts == st.unique_requests - n


def test_sqlite_hits_are_copied_into_the_store(tmp_path):
    toy_run(tmp_path, None, Fake())                        # an old run: SQLite only
    fake = Fake()
    _, st = toy_run(tmp_path, tmp_path / "gen", fake)      # same SQLite, a new store
    assert fake.prompts == 0 and len(GenerationStore(tmp_path / "gen")) == st.unique_requests


def test_store_rejects_bad_entries_and_meta(tmp_path):
    s = GenerationStore(tmp_path)
    with pytest.raises(GenerationError, match="lacks"):
        make_entry("a" * 64, "t", {"model": "m"})
    e = make_entry("a" * 64, "t", dict(backend="b", model="m", revision="r", decoding={}, messages_sha256="h"))
    with pytest.raises(GenerationError, match="wrong checksum"):
        s.append([dict(e, text="x")])
    with GenerationCache(tmp_path / "c.sqlite", store=tmp_path / "st") as c, \
            pytest.raises(GenerationError, match="meta"):
        c.put_many([("a" * 64, "t")])


def test_the_run_store_comes_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    assert default_store() is None
    monkeypatch.setenv(ENV, str(tmp_path / "g"))
    assert default_store().directory == tmp_path / "g"
    with GenerationCache(tmp_path / "c.sqlite") as c:
        assert c.store is not None and c.store.directory == tmp_path / "g"


# ---- the plan and generation in chunks (llm-smoke's notebooks, a fake model) --------------------
def smoke_plan(tmp_path, fake, only=("04", "07")):
    notebooks = R.select_notebooks(R.discover_notebooks(), only)
    return build_plan("llm-smoke", notebooks, tmp_path / "res" / "generations", responder_factory=lambda spec: fake,
                      workers=1, progress=False, log=lambda m: None)


@pytest.fixture(scope="module")
def plan_counts(tmp_path_factory):
    t = smoke_plan(tmp_path_factory.mktemp("p"), Fake()).table()
    return dict(zip(t["notebook"], t["requests"]))


def test_plan_counts_the_distinct_requests_per_notebook(tmp_path, plan_counts):
    assert plan_counts["07_memview_playground"] == 18     # 16 turns x 2 sides, less the equal prompts
    # 07's pair and method are among 04's (same EM seed): its requests add nothing to the total
    assert plan_counts["total (distinct)"] == plan_counts["04_rq2_safeguards"] > 18


def test_a_killed_chunk_resumes_and_a_complete_store_generates_nothing(tmp_path, plan_counts):
    total = plan_counts["total (distinct)"]
    dying = Fake(die_after=3)
    with pytest.raises(KeyboardInterrupt):
        generate_missing(smoke_plan(tmp_path, dying), minutes=10, batch_size=16, sqlite=None, log=lambda m: None)
    plan = smoke_plan(tmp_path, Fake())
    t = plan.table()
    assert t["in_store"].iloc[-1] == 3 * 16 and t["left"].iloc[-1] == total - 48   # three whole batches kept
    fake = Fake()
    res = generate_missing(smoke_plan(tmp_path, fake), minutes=10, batch_size=16, sqlite=None, log=lambda m: None)
    assert res.generated == fake.prompts == total - 48 and res.left == 0
    fake2 = Fake()
    res2 = generate_missing(smoke_plan(tmp_path, fake2), minutes=10, sqlite=None, log=lambda m: None)
    assert fake2.prompts == 0 and res2.generated == 0 and res2.stopped == "nothing left"
    # the notebooks' own calls find every request in the store: 07's responses come from it
    from dpmv_lib.experiments import playground
    from dpmv_lib.bench.datasets import load_benchmark
    bench = load_benchmark("pairedmem")
    pair = {p.pair_id: p for p in bench.pairs}["pm-diabetes-000"]
    rep = playground.replay(pair, bench.policy(pair), turns=16)
    fake3 = Fake()
    cache = GenerationCache(tmp_path / "fresh.sqlite", store=tmp_path / "res" / "generations")
    from dpmv_lib.generate.generation import generate_responses
    rs = playground.Responses(fake3)
    texts = generate_responses([rs.prompt(rep, s, t) for t in range(16) for s in ("M", "M'")], fake3, cache=cache,
                               progress=False)
    assert fake3.prompts == 0 and len(texts) == 32


def test_generation_stops_at_the_time_limit_and_after_max_batches(tmp_path):
    fake = Fake()
    res = generate_missing(smoke_plan(tmp_path, fake, only=("07",)), minutes=10, batch_size=4, max_batches=2,
                           sqlite=None, log=lambda m: None)
    assert res.generated == fake.prompts == 8 and res.left == 10 and "batch" in res.stopped
    with pytest.raises(ParameterError, match="minutes"):
        generate_missing(smoke_plan(tmp_path, fake, only=("07",)), minutes=0, sqlite=None)


def test_cli_plan_and_generate_only(tmp_path, capsys):
    assert R.main(["--profile", "smoke", "--plan"]) == 0
    assert "surrogate is not stored" in capsys.readouterr().out
    assert R.main(["--profile", "llm-smoke", "--plan", "--rate", "2", "--only", "07", "--workers", "1",
                   "--results-dir", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "07_memview_playground" in out and "total (distinct)" in out and "hours_left" in out
    assert R.main(["--profile", "llm-smoke", "--generate-only", "--only", "07"]) == 2   # no --minutes


def test_decoding_repetition_controls(tmp_path):
    assert DecodingConfig().to_dict() == {"max_new_tokens": 128, "temperature": 0.0, "top_p": 1.0}
    d = DecodingConfig(repetition_penalty=1.2, no_repeat_ngram_size=4)
    assert d.to_dict()["repetition_penalty"] == 1.2 and d.to_dict()["no_repeat_ngram_size"] == 4
    assert d.repetition_control and not DecodingConfig().repetition_control
    assert DecodingConfig(frequency_penalty=0.5).to_dict()["frequency_penalty"] == 0.5
    for bad in (dict(repetition_penalty=0.5), dict(repetition_penalty=True), dict(no_repeat_ngram_size=-1),
                dict(no_repeat_ngram_size=2.0), dict(frequency_penalty=-0.1), dict(frequency_penalty=3)):
        with pytest.raises(ParameterError):
            DecodingConfig(**bad)
    p = Prompt("q?", "notes")
    assert Fake(d).request(p) == Fake().request(p)            # same messages; the decoding is in the identity
    assert Fake(d).identity() != Fake().identity()
