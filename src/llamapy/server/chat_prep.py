"""A chat request's prompt and how its output is read back: the template (chat/apply.py, as
llama-server's /apply-template), the tool plan in the template's own call syntax
(chat/tool_syntax.py; the generic JSON form of server/tools.py for templates without one),
the reasoning format."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..chat.apply import apply_template
from ..chat.inputs import ChatInputError
from ..chat.message import ParsedMessage, parse_message, thinking_opened
from ..chat.tool_syntax import ChatFormat, chat_format
from . import tools
from .api_error import APIError
from .bridge import ServerState


@dataclass(slots=True)
class ChatPrep:
    prompt: str
    plan: tools.ToolPlan | None
    fmt: ChatFormat
    reasoning_format: str
    opened: bool  # the prompt opened <think>
    parallel: bool = True  # parallel_tool_calls (the request's, else the template's caps)

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


def prepare_chat(state: ServerState, body: Any) -> ChatPrep:
    """The prompt of a ChatCompletionRequest; a 400 for what llama-server refuses."""
    opts = state.chat
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
        messages = raw if native else tools.render_messages(raw, plan, "generic")
        tls = plan.template_tools() if native and plan is not None and plan.offered else None
        if opts.use_jinja:
            prompt = apply_template(tmpl, messages, tls, body.add_generation_prompt, body.chat_template_kwargs,
                                    body.reasoning_effort, opts)
        else:  # --no-jinja: the template as it is, none of llama-server's Jinja-path preparation
            prompt = tmpl.render(messages, add_generation_prompt=body.add_generation_prompt)
    except (tools.ToolError, ChatInputError) as e:
        raise APIError(400, str(e)) from None
    except Exception as e:  # a template that rejects the conversation (e.g. roles out of order)
        raise APIError(400, f"messages: the chat template failed: {e}") from None
    rf = body.reasoning_format or opts.reasoning_format
    opened = thinking_opened(prompt)
    if opened and plan is not None and plan.lark is not None:  # the prompt opened <think>: close it, then the answer
        plan.lark = 'start: "</think>" answer\n' + plan.lark.replace("start:", "answer:", 1)
    return ChatPrep(prompt, plan, fmt if native else ChatFormat("generic", "Generic"), rf, opened, parallel)


def openai_calls(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Parsed calls as OpenAI tool_calls (a fresh id where the model wrote none)."""
    import uuid

    return [{"id": c.get("id") or f"call_{uuid.uuid4().hex[:24]}", "type": "function",
             "function": {"name": c["name"], "arguments": c["arguments"]}} for c in calls]
