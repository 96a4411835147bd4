"""llama.cpp's built-in (non-Jinja) chat templates, what llama-server renders with --no-jinja
(src/llama-chat.cpp: llm_chat_detect_template, llm_chat_apply_template): the template is
named (`--chat-template llama3`) or detected from the template text by the markers it holds,
then written by hand-made rules -- no Jinja.  Messages are (role, content) pairs (content
parts joined, common_chat_templates_apply_legacy).  The families llamapy runs are here;
detect() returns None for the rest (llama-server: "this custom template is not supported")."""
from __future__ import annotations

from typing import Any, Callable

Chat = list[tuple[str, str]]

# --chat-template names (LLM_CHAT_TEMPLATES) that apply() renders
NAMES = ("chatml", "llama2", "llama2-sys", "llama2-sys-bos", "llama2-sys-strip", "mistral-v1", "mistral-v3",
         "mistral-v3-tekken", "mistral-v7", "mistral-v7-tekken", "phi3", "phi4", "falcon3", "zephyr", "monarch",
         "gemma", "orion", "openchat", "vicuna", "vicuna-orca", "deepseek", "deepseek2", "deepseek3", "command-r",
         "llama3", "granite", "gpt-oss")


class BuiltinTemplateError(ValueError):
    """A template llama.cpp's built-ins do not know."""


def detect(tmpl: str) -> str | None:
    """llm_chat_detect_template: a built-in name, or the family its markers show (None: unknown,
    or a family not built in here)."""
    if tmpl in NAMES:
        return tmpl
    has = tmpl.__contains__
    if has("<|im_start|>"):
        return "phi4" if has("<|im_sep|>") else None if has("<end_of_utterance>") else "chatml"
    if tmpl.startswith("mistral") or has("[INST]"):
        if has("[SYSTEM_PROMPT]"):
            return "mistral-v7"
        if has("' [INST] ' + system_message") or has("[AVAILABLE_TOOLS]"):
            if has(" [INST]"):
                return "mistral-v1"
            return "mistral-v3-tekken" if has('"[INST]"') else "mistral-v3"
        if has("content.strip()"):
            return "llama2-sys-strip"
        if has("bos_token + '[INST]"):
            return "llama2-sys-bos"
        return "llama2-sys" if has("<<SYS>>") else "llama2"
    if has("<|assistant|>") and has("<|end|>"):
        return "phi3"
    if has("[gMASK]<sop>"):
        return None  # chatglm4
    if has("<|assistant|>") and has("<|user|>"):
        return None if has("<|tool_declare|>") else "falcon3" if has("</s>") else None  # exaone-moe, glmedge
    if has("<|{{ item['role'] }}|>") and has("<|begin_of_image|>"):
        return None  # glmedge
    if has("<|user|>") and has("<|endoftext|>"):
        return "zephyr"
    if has("bos_token + message['role']"):
        return "monarch"
    if has("<start_of_turn>"):
        return "gemma"
    if has("'\\n\\nAssistant: ' + eos_token"):
        return "orion"
    if has("GPT4 Correct "):
        return "openchat"
    if has("USER: ") and has("ASSISTANT: "):
        return "vicuna-orca" if has("SYSTEM: ") else "vicuna"
    if has("### Instruction:") and has("<|EOT|>"):
        return "deepseek"
    if has("<|START_OF_TURN_TOKEN|>") and has("<|USER_TOKEN|>"):
        return "command-r"
    if has("<|start_header_id|>") and has("<|end_header_id|>"):
        return "llama3"
    if has("[gMASK]sop") or has("<用户>"):
        return None  # chatglm3, minicpm
    if has("'Assistant: ' + message['content'] + eos_token"):
        return "deepseek2"
    if has("<｜Assistant｜>") and has("<｜User｜>") and has("<｜end▁of▁sentence｜>"):
        return "deepseek3"
    if has("<|start_of_role|>"):
        return None if has("<tool_call>") or has("<tools>") else "granite"  # (granite 4.x: not built in here)
    if has("<|start|>") and has("<|channel|>"):
        return "gpt-oss"  # (llama-server checks a few families not built in here before this one)
    return None


def _trim(s: str) -> str:
    return s.strip(" \t\n\r\f\v")


def _chatml(chat: Chat, ass: bool) -> str:
    return "".join(f"<|im_start|>{r}\n{c}<|im_end|>\n" for r, c in chat) + ("<|im_start|>assistant\n" if ass else "")


def _mistral_v7(name: str) -> Callable[[Chat, bool], str]:
    sp = " " if name == "mistral-v7" else ""

    def f(chat: Chat, ass: bool) -> str:
        out = []
        for r, c in chat:
            out.append(f"[SYSTEM_PROMPT]{sp}{c}[/SYSTEM_PROMPT]" if r == "system" else
                       f"[INST]{sp}{c}[/INST]" if r == "user" else f"{sp}{c}</s>")
        return "".join(out)
    return f


def _mistral_v13(name: str) -> Callable[[Chat, bool], str]:
    lead = " " if name == "mistral-v1" else ""
    trail = "" if name == "mistral-v3-tekken" else " "

    def f(chat: Chat, ass: bool) -> str:
        out, inside = [], False
        for r, c in chat:
            if not inside:
                out.append(f"{lead}[INST]{trail}")
                inside = True
            if r == "system":
                out.append(c + "\n\n")
            elif r == "user":
                out.append(f"{c}{lead}[/INST]")
            else:
                out.append(f"{trail}{_trim(c) if name == 'mistral-v3' else c}</s>")
                inside = False
        return "".join(out)
    return f


def _llama2(name: str) -> Callable[[Chat, bool], str]:
    sys_ok, bos_in, strip = name != "llama2", name == "llama2-sys-bos", name == "llama2-sys-strip"

    def f(chat: Chat, ass: bool) -> str:
        out, inside = ["[INST] "], True
        for r, c in chat:
            c = _trim(c) if strip else c
            if not inside:
                inside = True
                out.append("<s>[INST] " if bos_in else "[INST] ")
            if r == "system":
                out.append(f"<<SYS>>\n{c}\n<</SYS>>\n\n" if sys_ok else c + "\n")
            elif r == "user":
                out.append(c + " [/INST]")
            else:
                out.append(c + "</s>")
                inside = False
        return "".join(out)
    return f


def _gemma(chat: Chat, ass: bool) -> str:
    out, system = [], ""
    for r, c in chat:
        if r == "system":
            system += _trim(c)
            continue
        role = "model" if r == "assistant" else r
        out.append(f"<start_of_turn>{role}\n")
        if system and role != "model":
            out.append(system + "\n\n")
            system = ""
        out.append(_trim(c) + "<end_of_turn>\n")
    return "".join(out) + ("<start_of_turn>model\n" if ass else "")


def _orion(chat: Chat, ass: bool) -> str:
    out, system = [], ""
    for r, c in chat:
        if r == "system":
            system += c
        elif r == "user":
            out.append("Human: " + (system + "\n\n" if system else "") + c + "\n\nAssistant: </s>")
            system = ""
        else:
            out.append(c + "</s>")
    return "".join(out)


def _openchat(chat: Chat, ass: bool) -> str:
    out = [c + "<|end_of_turn|>" if r == "system" else f"GPT4 Correct {r[:1].upper()}{r[1:]}: {c}<|end_of_turn|>" for r, c in chat]
    return "".join(out) + ("GPT4 Correct Assistant:" if ass else "")


def _vicuna(orca: bool) -> Callable[[Chat, bool], str]:
    def f(chat: Chat, ass: bool) -> str:
        out = []
        for r, c in chat:
            if r == "system":
                out.append(f"SYSTEM: {c}\n" if orca else c + "\n\n")
            elif r == "user":
                out.append(f"USER: {c}\n")
            elif r == "assistant":
                out.append(f"ASSISTANT: {c}</s>\n")
        return "".join(out) + ("ASSISTANT:" if ass else "")
    return f


def _by_role(parts: dict[str, str], tail: str, trim: bool = False) -> Callable[[Chat, bool], str]:
    """Each known role's content wrapped by parts[role] ("{}" where the content goes); other roles dropped."""
    def f(chat: Chat, ass: bool) -> str:
        return "".join(parts[r].replace("{}", _trim(c) if trim else c) for r, c in chat if r in parts) + (tail if ass else "")
    return f


def _roles(fmt: str, tail: str, trim: bool = False) -> Callable[[Chat, bool], str]:
    """Every message as fmt with {r} the role and {c} the content."""
    def f(chat: Chat, ass: bool) -> str:
        return "".join(fmt.replace("{r}", r).replace("{c}", _trim(c) if trim else c) for r, c in chat) + (tail if ass else "")
    return f


def _monarch(chat: Chat, ass: bool) -> str:
    return "".join(("" if i == 0 else "<s>") + f"{r}\n{c}</s>\n" for i, (r, c) in enumerate(chat)) + ("<s>assistant\n" if ass else "")


def _granite(chat: Chat, ass: bool) -> str:
    out = [f"<|start_of_role|>{r}<|end_of_role|>" + ("<|tool_call|>" if r == "assistant_tool_call" else "") + c + "<|end_of_text|>\n"
           for r, c in chat]
    return "".join(out) + ("<|start_of_role|>assistant<|end_of_role|>" if ass else "")


_EOS = "<｜end▁of▁sentence｜>"
RENDER: dict[str, Callable[[Chat, bool], str]] = {
    "chatml": _chatml, "mistral-v7": _mistral_v7("mistral-v7"), "mistral-v7-tekken": _mistral_v7("mistral-v7-tekken"),
    **{n: _mistral_v13(n) for n in ("mistral-v1", "mistral-v3", "mistral-v3-tekken")},
    **{n: _llama2(n) for n in ("llama2", "llama2-sys", "llama2-sys-bos", "llama2-sys-strip")},
    "phi3": _roles("<|{r}|>\n{c}<|end|>\n", "<|assistant|>\n"),
    "phi4": _roles("<|im_start|>{r}<|im_sep|>{c}<|im_end|>", "<|im_start|>assistant<|im_sep|>"),
    "falcon3": _roles("<|{r}|>\n{c}\n", "<|assistant|>\n"),
    "zephyr": _roles("<|{r}|>\n{c}<|endoftext|>\n", "<|assistant|>\n"),
    "monarch": _monarch, "gemma": _gemma, "orion": _orion, "openchat": _openchat,
    "vicuna": _vicuna(False), "vicuna-orca": _vicuna(True),
    "deepseek": _by_role({"system": "{}", "user": "### Instruction:\n{}\n", "assistant": "### Response:\n{}\n<|EOT|>\n"},
                         "### Response:\n"),
    "deepseek2": _by_role({"system": "{}\n\n", "user": "User: {}\n\n", "assistant": "Assistant: {}" + _EOS}, "Assistant:"),
    "deepseek3": _by_role({"system": "{}\n\n", "user": "<｜User｜>{}", "assistant": "<｜Assistant｜>{}" + _EOS}, "<｜Assistant｜>"),
    "command-r": _by_role({"system": "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>{}<|END_OF_TURN_TOKEN|>",
                           "user": "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>{}<|END_OF_TURN_TOKEN|>",
                           "assistant": "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>{}<|END_OF_TURN_TOKEN|>"},
                          "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>", trim=True),
    "llama3": _roles("<|start_header_id|>{r}<|end_header_id|>\n\n{c}<|eot_id|>", "<|start_header_id|>assistant<|end_header_id|>\n\n",
                     trim=True),
    "granite": _granite,
    "gpt-oss": lambda chat, ass: "".join(f"<|start|>{r}<|message|>{c}" + ("<|return|>" if r == "assistant" else "<|end|>")
                                         for r, c in chat) + ("<|start|>assistant" if ass else ""),
}


def apply(tmpl: str, chat: Chat, add_ass: bool) -> str:
    """The prompt llama_chat_apply_template writes for `chat` with template text or name
    `tmpl`; BuiltinTemplateError (llama-server's message) when it is not one of the built-ins."""
    name = detect(tmpl)
    if name is None:
        raise BuiltinTemplateError("this custom template is not supported, try using --jinja")
    return RENDER[name](chat, add_ass)


def legacy_prompt(tmpl: str, messages: list[dict[str, Any]], add_generation_prompt: bool = True,
                  prefill_assistant: bool = True) -> str:
    """llama-server's --no-jinja prompt for OpenAI messages (common_chat_templates_apply_legacy):
    text parts joined by newlines, null content empty; a last assistant message (prefill) is
    rendered as a turn, with no generation prompt."""
    chat: Chat = []
    for m in messages:
        c = m.get("content")
        if isinstance(c, list):
            c = "\n".join(p.get("text", "") for p in c if isinstance(p, dict) and p.get("type") in ("text", "media_marker"))
        chat.append((str(m.get("role", "")), c if isinstance(c, str) else ""))
    if prefill_assistant and chat and chat[-1][0] == "assistant":
        add_generation_prompt = False
    return apply(tmpl, chat, add_generation_prompt)
