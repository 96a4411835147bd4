"""The text corpus scripts/ref_tokenize.py runs through llama.cpp's tokenizer.

Unicode (accents, CJK, emoji with ZWJ/skin tones/flags, rare planes, zero-width and
combining characters), code with indentation and tabs, whitespace runs, numbers of many
lengths (and whitespace before them), CRLF, special-token text, HTML (Gemma's user-defined
tokens) and a few paragraphs of prose with an indented numbered list.
"""
from __future__ import annotations

PROSE = """\
The lighthouse keeper had kept a logbook for thirty-one years, and in all that time he had never missed an entry. Some days the entries were long, full of weather and ships and the small disasters of gulls; other days they were a single line: "Calm. Nothing passed." He believed that a record was only worth keeping if it was kept when nothing happened, because those were the days that made the others legible.

    When the inspectors came in the spring of 1987, they asked him why he bothered. "The light is automatic now," said the younger one, tapping the brass housing. "It doesn't need you." The keeper nodded, poured three cups of tea, and said nothing for a while. Then he opened the logbook to a page from 1962 and read aloud: 'Fog from 04:10. Horn sounded 212 times. One trawler, lights dim, passed north at 06:45.'

Nobody in the room could say what it meant, exactly; but everyone understood that it had mattered to someone, once, that the horn was sounded two hundred and twelve times, and that the trawler had made it home. It's the kind of thing you don't forget: the weight of small, careful numbers, written down by hand, in ink that has since turned brown.

    The logbook had rules, copied inside the front cover in a careful hand:
        1. Write the time first, then the weather.
        2. Never tear out a page, even a blotted one.
        10. If in doubt, sound the horn   3 times and wait.
"""

CODE_PY = """\
import os


class Cache:
    \"\"\"A tiny LRU cache.\"\"\"

    def __init__(self, capacity: int = 128) -> None:
        self.capacity = capacity
        self._items: dict[str, bytes] = {}

    def get(self, key):
        if key not in self._items:
            return None  # miss
        value = self._items.pop(key)
        self._items[key] = value
        return value
"""

CODE_C = "int main(void) {\n\tfor (int i = 0; i < 10; ++i) {\n\t\tprintf(\"%d\\n\", i);\n\t}\n\treturn 0;\n}\n"
MAKEFILE = "all: build\n\nbuild:\n\t$(CC) -O2 -o app main.c\n\t@echo \"done\"\n"

CORPUS: list[tuple[str, str]] = [
    ("hello", "Hello world"),
    ("empty", ""),
    ("space", " "),
    ("spaces2", "  "),
    ("newline", "\n"),
    ("leading_space", " leading space and  two"),
    ("trailing_ws", "trailing whitespace   \n\n"),
    ("accents", "Café naïve façade résumé Ångström über straße déjà-vu Zoë"),
    ("cjk", "日本語のテキストと中文文本，还有한국어 텍스트。東京は雨です。"),
    ("emoji", "Family: 👨‍👩‍👧‍👦, flags 🇫🇷🇯🇵, skin 👍🏽, heart ❤️, coder 🧑🏾‍💻 and 🙂🙃"),
    ("code_py", CODE_PY),
    ("code_c_tabs", CODE_C),
    ("makefile_tabs", MAKEFILE),
    ("ws_runs", "a  b   c    d\t\te\n\n\nf     \n   g \t \n\t\t\th"),
    ("ws_long", " " * 40 + "x" + "\n" * 40 + "y" + "\t" * 9),
    ("digits", "1 12 123 1234 12345 123456 1234567 12345678 3.14159 1e10 0x1F 1,000,000 ٣٤٥ ² ½"),
    ("digits_ws", "x =   5\ny =\t42\n    7 apples, 2024-05-17T08:30:00Z"),
    ("table", "| year | ships |\n|------|-------|\n| 1962 |    14 |\n| 1987 |     3 |\n"),
    ("crlf", "line one\r\nline two\r\n\r\nline three\r\n"),
    ("chatml_text", "<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n"),
    ("gemma_turns", "<start_of_turn>user\nHi!<end_of_turn>\n<start_of_turn>model\n"),
    ("special_glued", "x<|endoftext|>y<bos>z<eos><pad></s><unk>"),
    ("prose", PROSE),
    ("contractions", "I'm sure you've heard they'll say it's what we'd do, isn't it? DON'T SHOUT. 's 'S"),
    ("punct", "Well... (really?) [yes]! {ok}; a+b=c, x<y>z, ~t~ |p| `c` @u #t $5 %20 ^c & *s* — “q” ‘s’ «g»"),
    ("scripts", "Привет мир. Γειά σου κόσμε. مرحبا بالعالم. שלום עולם. नमस्ते दुनिया। สวัสดีชาวโลก"),
    ("html", "<table><tr><td>1</td><td>two</td></tr></table>\n<b>bold</b> <i>it</i> <code>x</code>"),
    ("markdown", "# Title\n\n- item 1\n- item 2\n\n```python\nprint('hi')\n```\n\n> quote\n"),
    ("url", "See https://example.com/a/b?q=1&r=two#frag or mail me@example.org."),
    ("repeats", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa !!!!!!!!!! ---------- ========== ....."),
    ("json", '{"key": [1, 2, {"nested": null}], "s": "tab\\there \\"q\\" \\\\", "u": "\\u00e9"}'),
    ("zero_width", "zero\u200bwidth\u200cnon\u200djoiner\ufeffbom a\u00a0b c\u3000d e\u2028f g\u0085h"),
    ("combining", "e\u0301 n\u0303 a\u0308 Z\u0351\u036b\u0343 \u1e9b\u0323"),
    ("rare", "𓀀𓀁 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ꙮ \U0001fae8 \U000e0041 \x1b[31mred\x1b[0m \x01\x7f"),
    ("spm_marker", "a▁b ▁▁c ▁"),
    ("clean_spaces", "Hello , world . How are you ? I ' m fine ! it 's ok , they 're here 've"),
    ("mixed_long", (PROSE[:400] + "\n\t" + CODE_C + "\n" + "日本語 " * 5 + "🙂" * 3) * 2),
]

# the entries the toy vocabularies are run on, and Phi-3-toy texts with whitespace around
# special tokens (RSTRIP)
TOY_CORPUS = ("hello", "empty", "space", "spaces2", "newline", "leading_space", "accents", "cjk",
              "emoji", "code_py", "ws_runs", "digits", "crlf", "gemma_turns", "special_glued",
              "spm_marker", "rare", "html", "contractions", "markdown")
PHI3_TEXTS = [("turns_ws", "<start_of_turn>user\n  Hi there <end_of_turn>  \n\n<start_of_turn>model\n"),
              ("html_ws", "<b>  bold</b>\t\t<i>\n it</i>   x"), ("gemma_turns", dict(CORPUS)["gemma_turns"])]
GPT2_TOY_CORPUS = TOY_CORPUS + ("clean_spaces", "punct", "prose", "table")
