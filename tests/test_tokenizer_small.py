"""Tokenizer tests on small GGUF files written here: merges, BOS/EOS flags, clean_spaces,
chat templates (ChatML default, HF helpers, BOS stripping), pre-type regexes, errors."""
from __future__ import annotations

from pathlib import Path

import gguf
import jinja2
import pytest
from tokenizers import Regex, pre_tokenizers

from llamapy.chat_template import CHATML_TEMPLATE
from llamapy.tokenizer import Tokenizer, _byte_decoder
from llamapy.tokenizer.bpe import PRE_TYPES

_BYTE_CHARS = sorted(_byte_decoder(), key=lambda c: _byte_decoder()[c])


def _write_bpe_gguf(path: Path, pre: str = "gpt-2", template: str | None = None,
                    add_bos: bool | None = None, add_eos: bool | None = None) -> Path:
    tokens = ["<|endoftext|>", "<|im_start|>", "<s>"] + _BYTE_CHARS + ["ll", "llo", "Ġw", "Ġwo"]
    types = [gguf.TokenType.CONTROL] * 3 + [gguf.TokenType.NORMAL] * (len(tokens) - 3)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(["l l", "ll o", "Ġ w", "Ġw o"])
    w.add_bos_token_id(2)
    w.add_eos_token_id(0)
    if add_bos is not None:
        w.add_add_bos_token(add_bos)
    if add_eos is not None:
        w.add_add_eos_token(add_eos)
    if template is not None:
        w.add_chat_template(template)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_tiny_bpe_merges_flags_and_default_template(tmp_path):
    tok = Tokenizer.from_gguf(_write_bpe_gguf(tmp_path / "t.gguf", add_bos=True, add_eos=True))
    t2i = tok.vocab.token_to_id
    ids = tok.tokenize("hello wo", add_special=False)
    assert ids == [t2i["h"], t2i["e"], t2i["llo"], t2i["Ġwo"]]
    assert tok.tokenize("hello wo") == [tok.bos, *ids, tok.eos]
    assert tok.detokenize([tok.bos, *ids, tok.eos], remove_special=True) == "hello wo"
    assert tok.detokenize([tok.bos, *ids], unparse_special=True) == "<s>hello wo"
    assert tok.chat.is_default and tok.chat.source == CHATML_TEMPLATE
    text = tok.apply_chat_template([{"role": "user", "content": "x"}])
    assert text == "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n"
    assert tok.tokenize("<|im_start|>", add_special=False, parse_special=True) == [1]
    assert tok.is_eog(0) and not tok.is_eog(1)


def test_tiny_bpe_clean_spaces_as_llamacpp(tmp_path):
    """pre "gpt-2" keeps llama.cpp's detokenize clean-up: no space before ? ! . , and
    before 's 'm 're 've; " ' " collapses; 't 'd 'll keep their space."""
    tok = Tokenizer.from_gguf(_write_bpe_gguf(tmp_path / "t.gguf"))
    assert tok.vocab.clean_spaces and not tok.vocab.add_bos
    ids = tok.tokenize("a , b . c ? d ! it 's I 'm we 're ve 've don 't x ' y", add_special=False)
    assert tok.detokenize(ids) == "a, b. c? d! it's I'm we're ve've don 't x'y"


def test_template_env_matches_hf_helpers(tmp_path):
    src = ("{{ messages | tojson }}|{{ strftime_now('%Y') | length }}"
           "{% if messages | length > 1 %}{{ raise_exception('too many: ' ~ messages | length) }}{% endif %}")
    tok = Tokenizer.from_gguf(_write_bpe_gguf(tmp_path / "t.gguf", template=src))
    out = tok.apply_chat_template([{"role": "user", "content": "<é>"}])
    assert out == '[{"role": "user", "content": "<é>"}]|4'
    with pytest.raises(jinja2.TemplateError, match="too many: 2"):
        tok.apply_chat_template([{"role": "a", "content": ""}] * 2)


def test_rendered_bos_is_not_doubled(tmp_path):
    """As llama.cpp's chat apply: a template that writes bos_token itself loses it when the
    vocab adds BOS, so the tokenized prompt starts with exactly one BOS."""
    src = "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}"
    tok = Tokenizer.from_gguf(_write_bpe_gguf(tmp_path / "t.gguf", template=src, add_bos=True))
    text = tok.apply_chat_template([{"role": "user", "content": "hello"}])
    assert text == "hello"
    ids = tok.tokenize(text, add_special=True, parse_special=True)
    assert ids[0] == tok.bos and ids.count(tok.bos) == 1
    plain = Tokenizer.from_gguf(_write_bpe_gguf(tmp_path / "u.gguf", template=src, add_bos=False))
    assert plain.apply_chat_template([{"role": "user", "content": "hello"}]) == "<s>hello"


def test_every_pre_type_regex_compiles():
    for name, pt in PRE_TYPES.items():
        for r in pt.regexes:
            pre_tokenizers.Split(Regex(r), behavior="isolated").pre_tokenize_str("ab 12 ,x\n")


def test_errors_name_the_key(tmp_path):
    with pytest.raises(ValueError, match="tokenizer.ggml.pre = 'no-such-pre'"):
        Tokenizer.from_gguf(_write_bpe_gguf(tmp_path / "t.gguf", pre="no-such-pre"))
    tok = Tokenizer.from_gguf(_write_bpe_gguf(tmp_path / "u.gguf"))
    with pytest.raises(ValueError, match="out of range"):
        tok.token_to_piece(tok.n_vocab)
    w = gguf.GGUFWriter(str(tmp_path / "v.gguf"), "llama")
    w.add_tokenizer_model("rwkv")
    w.add_token_list(["a"])
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    with pytest.raises(ValueError, match="tokenizer.ggml.model = 'rwkv'"):
        Tokenizer.from_gguf(tmp_path / "v.gguf")
