"""The content-addressed generation cache: addressing, reuse, corruption detection."""
from __future__ import annotations

import sqlite3

from generation_toy import toy_benchmark

from dpmv_lib.generate.cache import GenerationCache, checksum, content_address
from dpmv_lib.generate.generation import GenerationStats, generate_responses
from dpmv_lib.generate.interfaces import render_memory
from dpmv_lib.generate.responders import DecodingConfig, Prompt, SurrogateResponder

POLICY = toy_benchmark().policies["running-example"]


class Counting(SurrogateResponder):
    """The real surrogate, counting the prompts that actually reach it."""

    calls = 0

    def respond(self, prompts):
        type(self).calls += len(prompts)
        return super().respond(prompts)


def prompts(n=12):
    return [Prompt(f"Question {i % 6}?", render_memory([f"I cook cheap dinners {i % 3}."]), ("p", i % 6, 0))
            for i in range(n)]


def test_address_depends_on_every_component():
    ident = {"backend": "b", "model": "m", "revision": "r", "decoding": DecodingConfig().to_dict()}
    req = {"messages": [{"role": "user", "content": "hi"}]}
    base = content_address(ident, req)
    assert base == content_address(dict(reversed(list(ident.items()))), req)  # canonical JSON
    variants = [dict(ident, backend="x"), dict(ident, model="x"), dict(ident, revision="x"),
                dict(ident, decoding=DecodingConfig(max_new_tokens=7).to_dict())]
    assert len({content_address(v, req) for v in variants} | {base}) == 5
    assert content_address(ident, {"messages": [{"role": "user", "content": "hi!"}]}) != base
    assert content_address(ident, dict(req, key=["p", 0, 1])) != content_address(ident, dict(req, key=["p", 0, 2]))


def test_round_trip_and_rerun_reuses_cache(tmp_path):
    path = tmp_path / "gen.sqlite"
    Counting.calls = 0
    r = Counting(POLICY)
    st = GenerationStats()
    first = generate_responses(prompts(), r, cache=path, progress=False, stats=st)
    assert Counting.calls == st.unique_requests == 6 and st.requests == 12 and st.cache_hits == 0
    st2 = GenerationStats()
    again = generate_responses(prompts(), Counting(POLICY), cache=path, progress=False, stats=st2)
    assert again == first and Counting.calls == 6 and st2.cache_hits == 6 and st2.generated == 0
    with GenerationCache(path) as c:
        assert len(c) == 6
    # another decoding configuration is another address: regenerated, not reused
    generate_responses(prompts(), Counting(POLICY, DecodingConfig(max_new_tokens=9)), cache=path, progress=False)
    assert Counting.calls == 12


def test_corrupt_or_partial_entries_are_regenerated_never_used(tmp_path):
    path = tmp_path / "gen.sqlite"
    Counting.calls = 0
    first = generate_responses(prompts(), Counting(POLICY), cache=path, progress=False)
    con = sqlite3.connect(path)
    addrs = [a for (a,) in con.execute("SELECT address FROM generations ORDER BY address")]
    con.execute("UPDATE generations SET text = 'TAMPERED' WHERE address = ?", (addrs[0],))   # corrupt
    con.execute("UPDATE generations SET checksum = NULL WHERE address = ?", (addrs[1],))     # partial
    con.execute("UPDATE generations SET text = substr(text, 1, 5) WHERE address = ?", (addrs[2],))  # truncated
    con.commit()
    con.close()
    cache = GenerationCache(path)
    st = GenerationStats()
    again = generate_responses(prompts(), Counting(POLICY), cache=cache, progress=False, stats=st)
    assert again == first and "TAMPERED" not in again
    assert cache.stats["corrupt"] == 3 and st.generated == 3 and Counting.calls == 6 + 3
    assert cache.get_many(addrs) and all(cache.get(a) is not None for a in addrs)  # repaired in place
    cache.close()


def test_unreadable_cache_file_is_moved_aside(tmp_path):
    path = tmp_path / "gen.sqlite"
    path.write_bytes(b"this is not a sqlite database" * 100)
    cache = GenerationCache(path)
    cache.put_many([("a" * 64, "hello")])
    assert cache.get("a" * 64) == "hello" and cache.get("b" * 64) is None
    cache.close()
    assert list(tmp_path.glob("gen.sqlite.corrupt-*"))


def test_checksum_binds_address_and_text():
    assert checksum("a", "x") != checksum("b", "x") != checksum("a", "y")
