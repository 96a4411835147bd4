"""A chat request's prompt and how its output is read back: the template (chat/apply.py, as
llama-server's /apply-template), the tool plan in the template's own call syntax
(chat/tool_syntax.py; the generic JSON form of chat/tools.py for templates without one),
the reasoning format."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..chat.apply import ChatOptions, apply_template, is_gpt_oss, reasoning_tags
from ..chat.budget import BudgetTags, ReasoningBudget
from ..chat.builtin import BuiltinTemplateError, legacy_prompt
from ..chat.inputs import ChatInputError
from ..chat.message import ParsedMessage, parse_message, thinking_opened
from ..chat.tool_syntax import ChatFormat, chat_format
from ..chat import tools
from .api_error import APIError
from .bridge import ServerState


@dataclass(slots=True)
class ChatEnv:
    """What the chat path reads of a server's state, for callers without one (the Python API)."""

    chat: ChatOptions
    model: Any


@dataclass(slots=True)
class ChatPrep:
    prompt: str
    plan: tools.ToolPlan | None
    fmt: ChatFormat
    reasoning_format: str
    opened: bool  # the prompt opened <think>
    parallel: bool = True  # parallel_tool_calls (the request's, else the template's caps)
    tags: tuple[str, str] = ("", "")  # the template's thinking tags, trimmed (("", ""): it does not think)
    generation_prompt: str = ""  # what the prompt adds after the conversation (llama-server's)

    @property
    def calls_possible(self) -> bool:
        return self.plan is not None and self.plan.lark is not None

    def parse(self, text: str, partial: bool = False) -> ParsedMessage:
        """The message in the output text (partial: a prefix of it, while streaming)."""
        if self.fmt.kind == "generic" and self.calls_possible and not partial:
            msg = parse_message(text, self.fmt, self.reasoning_format, self.opened, calls=False)
            content, calls = tools.parse_output(msg.content, self.plan)
            return ParsedMessage(content or "", msg.reasoning_content,
                                 [{"name": c["function"]["name"], "arguments": c["function"]["arguments"], "id": c["id"]} for c in calls])
        return parse_message(text, self.fmt, self.reasoning_format, self.opened, calls=self.calls_possible, partial=partial,
                             parallel=self.parallel)


def prepare_chat(state: ServerState | ChatEnv, body: Any) -> ChatPrep:
    """The prompt of a ChatCompletionRequest; a 400 for what llama-server refuses."""
    opts = state.chat
    if getattr(body, "continue_final_message", None):  # vLLM's explicit prefill; llama-server refuses it with a generation prompt
        if body.add_generation_prompt:
            raise APIError(400, "Cannot set both add_generation_prompt and continue_final_message to true.")
        opts = replace(opts, prefill_assistant=True)
    tmpl = state.model.tokenizer.chat
    fmt = chat_format(tmpl)
    if body.tools and not opts.use_jinja:
        raise APIError(400, "tools param requires --jinja flag")
    native = fmt.native and tmpl.caps.supports_tools
    kind = fmt.kind if native else "generic"
    try:
        parallel = body.parallel_tool_calls
        if parallel is None:  # llama-server: json_value(body, "parallel_tool_calls", caps.supports_parallel_tool_calls)
            parallel = tmpl.caps.supports_parallel_tool_calls
        plan = tools.plan(body.tools, body.tool_choice, parallel, kind)
        raw = [m.as_dict() for m in body.messages]
        if opts.prefill_assistant and len(raw) >= 2 and raw[-1].get("role") == raw[-2].get("role") == "assistant":
            raise ChatInputError("Cannot have 2 or more assistant messages at the end of the list.")  # jinja or not
        last = body.messages[-1] if body.messages else None  # (llama-server accepts no messages)
        if opts.prefill_assistant and last is not None and last.role == "assistant" and isinstance(last.content, list):
            raw[-1]["content"] = [{"type": "text", "text": p.text} for p in last.content]  # the prefill: parts joined by \n\n
        messages = raw if native else tools.render_messages(raw, plan, "generic")
        tls = plan.template_tools() if native and plan is not None and plan.offered else None
        if opts.use_jinja:
            prompt = apply_template(tmpl, messages, tls, body.add_generation_prompt, body.chat_template_kwargs,
                                    body.reasoning_effort, opts)
        else:  # --no-jinja: llama.cpp's built-in template named by / detected from the text (chat/builtin.py)
            prompt = legacy_prompt(tmpl.source, messages, body.add_generation_prompt, opts.prefill_assistant)
    except (tools.ToolError, ChatInputError) as e:
        raise APIError(400, str(e)) from None
    except BuiltinTemplateError as e:
        raise APIError(500, str(e)) from None
    except Exception as e:  # a template that rejects the conversation (e.g. roles out of order)
        raise APIError(400, f"messages: the chat template failed: {e}") from None
    rf = body.reasoning_format or opts.reasoning_format
    opened = thinking_opened(prompt)
    tags = ("", "") if is_gpt_oss(tmpl) or not opts.use_jinja else tuple(x.strip() for x in reasoning_tags(tmpl))
    if tags[0] and plan is not None and plan.lark is not None:  # the answer after </think> may start with spaces
        plan.lark = 'start: answer | WS answer\nWS: /[ \\t\\r\\n]+/\n' + plan.lark.replace("start:", "answer:", 1)
    gp = ""
    if tags[0]:
        head = [m for m in messages]
        if opts.prefill_assistant and head and head[-1].get("role") == "assistant":
            head = head[:-1]
        try:
            base = apply_template(tmpl, head, tls, False, body.chat_template_kwargs, body.reasoning_effort, opts)
        except Exception:  # a template that wants the generation prompt: no prefill
            base = prompt
        gp = prompt[len(base):] if prompt.startswith(base) else ""
        if not opened and tags[0] in gp and tags[1] not in gp.rsplit(tags[0], 1)[1]:
            opened = True  # a continued assistant turn's reasoning: the output goes on thinking
    return ChatPrep(prompt, plan, fmt if native else ChatFormat("generic", "Generic"), rf, opened, parallel,
                    tags, gp)  # type: ignore[arg-type]


def reasoning_gate(state: ServerState | ChatEnv, prep: ChatPrep, body: Any, constraint: Any) -> Any:
    """The request's constraint under llama.cpp's reasoning-budget sampler (chat/budget.py):
    for a template that thinks, when the answer has a grammar (tool calls, response_format;
    not a user's grammar / json_schema) or a budget is set (reasoning_budget_tokens /
    thinking_budget_tokens, -1: --reasoning-budget).  Else the constraint as it is."""
    if not prep.tags[0] or not prep.tags[1] or getattr(body, "grammar", None) is not None or getattr(body, "json_schema", None) is not None:
        return constraint
    budget = getattr(body, "reasoning_budget_tokens", None)
    if budget is None or budget == -1:
        budget = getattr(body, "thinking_budget_tokens", None)
    if budget is None or budget == -1:
        budget = state.chat.reasoning_budget
    if constraint is None and budget < 0:
        return constraint
    message = getattr(body, "reasoning_budget_message", None)
    message = state.chat.reasoning_budget_message if message is None else message
    model = state.model

    def tok(text: str) -> list[int]:
        return model.tokenize(text, add_special=False, parse_special=True)

    def piece(t: int) -> bytes:
        return model.tokenizer.token_to_piece(t, special=True)

    prefill = tok(prep.generation_prompt)
    if prefill and piece(prefill[0])[:1].isspace() and not prep.generation_prompt[:1].isspace():
        prefill = prefill[1:]  # (llama.cpp: some tokenizers add a space before the first special token)
    tags = BudgetTags(tok(prep.tags[0]), tok(prep.tags[1]), tok(message + prep.tags[1]))
    return ReasoningBudget(tags, budget, piece, constraint, prefill, prep.opened)


def openai_calls(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Parsed calls as OpenAI tool_calls (a fresh id where the model wrote none)."""
    import uuid

    return [{"id": c.get("id") or f"call_{uuid.uuid4().hex[:24]}", "type": "function",
             "function": {"name": c["name"], "arguments": c["arguments"]}} for c in calls]
