"""Constrained decoding in the engine: the vocabulary as llguidance sees it, compilation and
its cache, masks before the sampler chain, drafts checked against the grammar, dead ends,
and `llamapy run --grammar / --json-schema`."""
from __future__ import annotations

import json
import subprocess
import sys

import jsonschema
import pytest
import torch
from structured_cases import GRAMMARS, SCHEMAS
from test_speculative import FixedDraft

from llamapy import Context, ContextParams
from llamapy.generate import GenTimings, generate
from llamapy.grammar import GrammarCompiler, GrammarDeadEnd, GrammarError, GrammarSpec
from llamapy.grammar.compiler import closed_objects
from llamapy.grammar.vocab import token_pieces
from llamapy.sampling import Sampler, SamplingParams
from llamapy.speculative import SpecParams, Speculator, make_speculator


def _chat_ids(model, text: str) -> list[int]:
    msgs = [{"role": "system", "content": "Reply with JSON only."}, {"role": "user", "content": text}]
    return model.tokenize(model.tokenizer.apply_chat_template(msgs), add_special=True, parse_special=True)


def _gen(model, ids: list[int], n: int, constraint=None, spec=None, temp: float = 0.0, seed: int = 3):
    ctx = Context(model, ContextParams(n_ctx=1024, n_batch=512))
    tm = GenTimings()
    out = list(generate(ctx, Sampler(SamplingParams(temp=temp, seed=seed), grammar=constraint), ids, n, timings=tm, spec=spec))
    return out, tm


@pytest.mark.parametrize("which", ["tiny", "smollm2"])
def test_pieces_are_the_detokenizers_bytes(request, which):
    model = request.getfixturevalue(which)
    tok = model.tokenizer
    pieces, special = token_pieces(tok)
    assert len(pieces) == tok.n_vocab
    for i, p in enumerate(pieces):
        want = tok.token_to_piece(i, special=True)
        assert p == (b"\xff" + want if i in special else want), i
    assert tok.eos in special or tok.eos is None


def test_pieces_spm_gemma(gemma3_path):
    from llamapy.tokenizer import Tokenizer

    tok = Tokenizer.from_gguf(gemma3_path)
    pieces, special = token_pieces(tok)
    sp = set(special)
    for i in range(0, tok.n_vocab, 97):  # a spread of the 262k ids: byte, control, normal
        want = tok.token_to_piece(i, special=True)
        assert pieces[i] == (b"\xff" + want if i in sp else want), i
    assert pieces[tok.vocab.tokens.index("▁the")] == b" the"


def test_compile_cache_and_errors(smollm2):
    c = GrammarCompiler(smollm2.tokenizer, smollm2.n_vocab)
    s1 = GrammarSpec.json_schema(SCHEMAS[0][1])
    s2 = GrammarSpec.json_schema(json.dumps(SCHEMAS[0][1]))  # the same schema as text
    assert s1 == s2
    a, b = c.constraint(s1), c.constraint(s2)
    assert c.n_compiled == 1 and a.matcher is not b.matcher
    a.advance(smollm2.tokenize("{", add_special=False)[0])
    assert b.n_tokens == 0 and not b.allowed().equal(a.allowed())  # copies are independent
    with pytest.raises(GrammarError, match="undefined"):
        c.compile(GrammarSpec("gbnf", "root ::= undefined"))
    with pytest.raises(GrammarError, match="not"):
        c.compile(GrammarSpec.json_schema({"type": "object", "not": {}}))
    with pytest.raises(GrammarError, match="not valid JSON"):
        GrammarSpec.json_schema("{nope")


def test_closed_objects():
    s = {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {}}}, "c": {"additionalProperties": True, "properties": {}}},
         "allOf": [{"properties": {"z": {}}}], "$defs": {"d": {"properties": {"q": {}}}}, "const": {"properties": 1}}
    out = closed_objects(s)
    assert out["additionalProperties"] is False and out["properties"]["a"]["additionalProperties"] is False
    assert out["properties"]["c"]["additionalProperties"] is True
    assert "additionalProperties" not in out["allOf"][0] and out["$defs"]["d"]["additionalProperties"] is False
    assert out["const"] == {"properties": 1} and "additionalProperties" not in s  # input untouched


def test_mask_applies_before_the_chain(smollm2):
    """Every sampled token (greedy and at temperature 1) continues a string the grammar
    allows; the disallowed logits are -inf and the rest unchanged."""
    c = GrammarCompiler(smollm2.tokenizer, smollm2.n_vocab)
    g = c.constraint(GrammarSpec("gbnf", 'root ::= ("cat" | "dog") " " [0-9]{2}'))
    logits = torch.randn(smollm2.n_vocab)
    out = g.apply(logits)
    ok = torch.isfinite(out)
    assert 0 < int(ok.sum()) < 50 and torch.equal(out[ok], logits[ok])
    for i in ok.nonzero().flatten().tolist():
        piece = smollm2.tokenizer.token_to_piece(i).decode()
        assert "cat 00"[: len(piece)] == piece or "dog 00"[: len(piece)] == piece
    ids = smollm2.tokenize("Pet and age:", add_special=True)
    for temp in (0.0, 1.0):
        g = c.constraint(GrammarSpec("gbnf", 'root ::= ("cat" | "dog") " " [0-9]{2}'))
        out, tm = _gen(smollm2, ids, 20, g, temp=temp)
        text = smollm2.detokenize(out)
        assert tm.stop == "eog" and text[:4] in ("cat ", "dog ") and text[4:].isdigit() and len(text) == 6, text


def test_run_schemas_and_grammars(smollm2):
    """generate() with a schema: a valid object that ends at end-of-generation; a GBNF
    grammar from the server tests, too."""
    c = GrammarCompiler(smollm2.tokenizer, smollm2.n_vocab)
    for prompt, schema in (SCHEMAS[2], SCHEMAS[16]):
        out, tm = _gen(smollm2, _chat_ids(smollm2, prompt), 200, c.constraint(GrammarSpec.json_schema(schema)))
        assert tm.stop == "eog"
        jsonschema.validate(json.loads(smollm2.detokenize(out)), schema)
    prompt, grammar = GRAMMARS["date"]
    out, tm = _gen(smollm2, smollm2.tokenize(prompt, add_special=True), 60, c.constraint(GrammarSpec("gbnf", grammar)))
    assert tm.stop == "eog" and smollm2.detokenize(out).startswith("DATE 20")


def test_drafts_checked_against_the_grammar(smollm2):
    """With speculation, the constrained output is the same tokens; a draft the grammar
    rejects is never verified (trimmed to the prefix the grammar accepts)."""
    c = GrammarCompiler(smollm2.tokenizer, smollm2.n_vocab)
    prompt, schema = SCHEMAS[12]
    spec = GrammarSpec.json_schema(schema)
    ids = _chat_ids(smollm2, prompt)
    plain, _ = _gen(smollm2, ids, 120, c.constraint(spec))
    sp = make_speculator(SpecParams(type="ngram-simple", ngram_size_n=2, ngram_size_m=6), smollm2)
    out, tm = _gen(smollm2, ids, 120, c.constraint(spec), spec=sp)
    assert out == plain and tm.n_accepted > 0
    bad = smollm2.tokenize("Hello world, no JSON here", add_special=False)
    sp = Speculator(FixedDraft(bad), 4, backoff=None)
    out, tm = _gen(smollm2, ids, 120, c.constraint(spec), spec=sp)
    assert out == plain and tm.n_drafted == 0


def test_dead_end_is_a_stop_with_a_reason(smollm2):
    c = GrammarCompiler(smollm2.tokenizer, smollm2.n_vocab)
    g = c.constraint(GrammarSpec("gbnf", 'root ::= "yes"'))
    eog = sorted(smollm2.tokenizer.vocab.eog_ids)
    for t in smollm2.tokenize("yes", add_special=False):
        g.advance(t)
    logits = torch.zeros(smollm2.n_vocab)
    assert torch.isfinite(g.apply(logits)).nonzero().flatten().tolist() == eog
    logits[eog] = float("-inf")  # ignore_eos
    with pytest.raises(GrammarDeadEnd, match="banned"):
        g.apply(logits)


def _llamapy(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llamapy", *args], capture_output=True, text=True, timeout=300)


def test_cli_flags(smollm2_path, tmp_path):
    prompt, schema = SCHEMAS[0]
    f = tmp_path / "s.json"
    f.write_text(json.dumps(schema))
    p = "<|im_start|>user\n" + prompt + " Reply with JSON.<|im_end|>\n<|im_start|>assistant\n"
    for flags in (["-j", json.dumps(schema)], ["-jf", str(f)]):
        r = _llamapy("run", "-m", str(smollm2_path), "-p", p, "-n", "100", "--temp", "0", "-c", "1024", *flags)
        assert r.returncode == 0, r.stderr
        jsonschema.validate(json.loads(r.stdout[len(p):]), schema)
    g = tmp_path / "g.gbnf"
    g.write_text('root ::= "- " [a-z]+ "\\n"')
    r = _llamapy("run", "-m", str(smollm2_path), "-p", "A word:", "-n", "20", "--temp", "0", "-c", "1024", "--grammar-file", str(g))
    assert r.returncode == 0 and r.stdout.startswith("A word:- ") and r.stdout.endswith("\n\n"), r.stdout
    r = _llamapy("run", "-m", str(smollm2_path), "-p", "x", "--grammar", "root ::= nothere")
    assert r.returncode == 1 and "nothere" in r.stderr and "Traceback" not in r.stderr
    r = _llamapy("run", "-m", str(smollm2_path), "-p", "x", "--grammar", "root ::= [a]", "-j", "{}")
    assert r.returncode == 2 and "not allowed with" in r.stderr


def test_gemma_spm_vocab_json(gemma3_path):
    """Gemma 3 (SPM pieces, 262k ids, <end_of_turn> as end-of-generation): a valid object."""
    from llamapy.model.model import Model

    model = Model.load(gemma3_path)
    c = GrammarCompiler(model.tokenizer, model.n_vocab)
    prompt, schema = SCHEMAS[3]
    msgs = [{"role": "user", "content": prompt + " Reply with JSON."}]
    ids = model.tokenize(model.tokenizer.apply_chat_template(msgs), add_special=True, parse_special=True)
    out, tm = _gen(model, ids, 60, c.constraint(GrammarSpec.json_schema(schema)))
    assert tm.stop == "eog"
    jsonschema.validate(json.loads(model.detokenize(out)), schema)
