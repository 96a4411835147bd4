"""The tokenizer: llama.cpp's llama_tokenize / llama_detokenize / llama_token_to_piece over
a GGUF vocabulary (tokenizer.py), and its parts: the shared vocabulary and special-token
partition (vocab.py, special.py, hashorder.py), the byte-level BPE and SPM models (bpe.py,
spm.py), WordPiece (wpm.py), the derived-table cache (cache.py) and the build of the `tokenizers` model, whole
or for a call's words only (build.py, subset.py).

This file only re-exports; the modules import each other directly (`from .vocab import
...`), never through this package."""
from .build import ModelChooser, load_parts
from .bpe import byte_decoder as _byte_decoder
from .spm import SPACE
from .tokenizer import StreamDecoder, Tokenizer, clean_spaces
from .vocab import TokenAttr, Vocab, open_gguf

__all__ = ["SPACE", "ModelChooser", "StreamDecoder", "TokenAttr", "Tokenizer", "Vocab", "clean_spaces", "load_parts",
           "open_gguf"]
