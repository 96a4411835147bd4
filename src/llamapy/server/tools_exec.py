"""exec_shell_command and get_info of --tools (llama-server's server_tool_exec_shell_command,
server_tool_get_info).

exec_shell_command: `sh -c COMMAND` in the x-tool-cwd directory (else the server's), stdout and
stderr combined; `timeout` seconds (default 10, at most SERVER_TOOL_EXEC_SHELL_COMMAND_MAX_TIMEOUT)
and `max_output_size` bytes (default and at most SERVER_TOOL_EXEC_SHELL_COMMAND_MAX_OUTPUT_SIZE);
the text ends `\\n[exit code: N]`, plus ` [exit due to timed out]` when the timeout killed it.
With stream = true the output goes out as it comes, the tail as the last chunk; a client that
leaves kills the command.  get_info: `uname -a` and the working directory."""
from __future__ import annotations

import os

from .tools_base import ChunkSink, Json, Params, ServerTool, function_def, json_value, prop, required_str
from .tools_proc import run_subprocess

SERVER_TOOL_EXEC_SHELL_COMMAND_MAX_OUTPUT_SIZE = 16 * 1024  # bytes
SERVER_TOOL_EXEC_SHELL_COMMAND_MAX_TIMEOUT = 60  # seconds
SERVER_TOOL_EXEC_SHELL_COMMAND_DEFAULT_TIMEOUT = 10  # seconds
SERVER_TOOL_GET_INFO_MAX_OUTPUT = 4096  # bytes
SERVER_TOOL_GET_INFO_TIMEOUT = 5  # seconds


def exec_shell_command(params: Params, sink: ChunkSink | None = None) -> Json | None:
    command = required_str(params, "command")
    timeout = min(json_value(params, "timeout", SERVER_TOOL_EXEC_SHELL_COMMAND_DEFAULT_TIMEOUT),
                  SERVER_TOOL_EXEC_SHELL_COMMAND_MAX_TIMEOUT)
    max_output = json_value(params, "max_output_size", SERVER_TOOL_EXEC_SHELL_COMMAND_MAX_OUTPUT_SIZE)
    if max_output < 0:  # llama-server casts the int to size_t: a negative one is huge, then capped
        max_output = SERVER_TOOL_EXEC_SHELL_COMMAND_MAX_OUTPUT_SIZE
    max_output = min(max_output, SERVER_TOOL_EXEC_SHELL_COMMAND_MAX_OUTPUT_SIZE)
    args = ["sh", "-c", command]
    cwd = params.get("cwd", "")
    if sink is not None:
        alive = [True]

        def on_chunk(chunk: str) -> bool:
            alive[0] = sink(chunk)
            return alive[0]

        res = run_subprocess(args, max_output, timeout, on_chunk, cwd)
        if alive[0]:
            sink(f"\n[exit code: {res.exit_code}]" + (" [exit due to timed out]" if res.timed_out else ""))
        return None
    res = run_subprocess(args, max_output, timeout, None, cwd)
    text = res.output + f"\n[exit code: {res.exit_code}]" + (" [exit due to timed out]" if res.timed_out else "")
    return {"plain_text_response": text}


def get_info(params: Params, _sink=None) -> Json:
    cwd = params.get("cwd", "")
    res = run_subprocess(["uname", "-a"], SERVER_TOOL_GET_INFO_MAX_OUTPUT, SERVER_TOOL_GET_INFO_TIMEOUT, None, cwd)
    os_info = res.output.strip() if res.exit_code == 0 and not res.timed_out else "unknown"
    return {"os": os_info, "cwd": cwd or os.getcwd()}


def exec_tools() -> tuple[ServerTool, ServerTool]:
    n, t = SERVER_TOOL_EXEC_SHELL_COMMAND_MAX_OUTPUT_SIZE, SERVER_TOOL_EXEC_SHELL_COMMAND_MAX_TIMEOUT
    exec_tool = ServerTool("exec_shell_command", "Execute shell command", function_def(
        "exec_shell_command", "Execute a shell command and return its output (stdout and stderr combined).",
        {"command": prop("string", "Shell command to execute"),
         "timeout": prop("integer", f"Timeout in seconds (default 10, max {t})"),
         "max_output_size": prop("integer", f"Maximum output size in bytes (default {n})")}, ["command"]),
        exec_shell_command, permission_write=True, support_stream=True)
    info_tool = ServerTool("get_info", "Get Runtime Info", function_def(
        "get_info", "Returns runtime info: the OS name/version and the current working directory", {}, None), get_info)
    return exec_tool, info_tool
