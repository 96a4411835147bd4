"""Chat formats as llama-server has them: template capabilities (caps.py), the messages a
template sees (inputs.py), rendering a request's prompt (apply.py), reasoning and tool-call
syntaxes of the output (reasoning.py, tool_syntax.py)."""
