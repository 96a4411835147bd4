#!/usr/bin/env bash
# llama.cpp's server test suite (tools/server/tests/, from the llama-cpp-python sdist on PyPI)
# run against `llamapy serve` and against llama.cpp's llama-server, on the same LOCAL models
# (scripts/llama_server_launcher.py maps the suite's hub presets), then a table per file:
# passed / failed / skipped for each server.  Not part of `make test`; see docs/conformance.md.
#
#   scripts/llama_server_suite.sh [test_basic test_tokenize ...]     (default: the issue-46 list)
#
# Environment:
#   LLAMA_CPP_PYTHON_VERSION  sdist version (default 0.3.36)
#   SERVERS                   "llamapy llama-server" (default), or one of them
#   LLAMA_SUITE_TIMEOUT       seconds per test (pytest-timeout; default 300)
#   LLAMAPY_PYTHON            python that runs llamapy (default: the repo's .venv, else /work/main/.venv, else python3)
#   LLAMA_SERVER_REF          llama-server binary (default /root/.cache/llamacpp-ref/llama.cpp/build/bin/llama-server)
#   PYTEST_ARGS               extra pytest arguments (e.g. "-k test_tokenize_basic")
#   LLAMA_SUITE_RESULTS       where logs, the launcher and the table's inputs go (default: <cache>/results)
#   LLAMA_SUITE_ZYGOTE        1 (default): llamapy's servers are forked by scripts/llama_server_zygote.py,
#                             which imported llamapy/torch/uvicorn once; 0: each is a fresh exec
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
HOME_DIR="${LLAMAPY_HOME:-$HOME/.cache/llamapy}"
CACHE="$HOME_DIR/llama-server-suite/$VERSION"
SERVERS="${SERVERS:-llamapy llama-server}"
TIMEOUT="${LLAMA_SUITE_TIMEOUT:-300}"
DEFAULT_FILES="test_basic test_tokenize test_security test_metrics test_completion test_chat_completion test_ctx_shift
test_ignore_eos test_slot_save test_speculative test_stream test_template test_tool_call test_kv_keep_only_active
test_compat_anthropic test_compat_oai_responses test_embedding test_rerank test_infill test_lora"
FILES="${*:-$DEFAULT_FILES}"

if [ -z "${LLAMAPY_PYTHON:-}" ]; then
  for py in "$REPO/.venv/bin/python" /work/main/.venv/bin/python; do
    [ -x "$py" ] && LLAMAPY_PYTHON="$py" && break
  done
  LLAMAPY_PYTHON="${LLAMAPY_PYTHON:-python3}"
fi
export LLAMAPY_PYTHON

RESULTS="${LLAMA_SUITE_RESULTS:-$CACHE/results}"
mkdir -p "$CACHE/sdist" "$RESULTS"

# 1. the sdist (once), and its server tests + chat templates, at their places in llama.cpp's tree
SDIST="$(ls "$CACHE"/sdist/llama_cpp_python-"$VERSION".tar.gz 2>/dev/null || true)"
if [ -z "$SDIST" ]; then
  echo "suite: pip download llama-cpp-python==$VERSION (sdist) into $CACHE/sdist" >&2
  python3 -m pip download --no-binary :all: --no-deps --disable-pip-version-check \
    "llama-cpp-python==$VERSION" -d "$CACHE/sdist" >&2
  SDIST="$CACHE/sdist/llama_cpp_python-$VERSION.tar.gz"
fi
TREE="$CACHE/llama.cpp"
if [ ! -f "$TREE/.complete" ]; then
  rm -rf "$TREE" && mkdir -p "$TREE"
  tar xzf "$SDIST" -C "$TREE" --strip-components=3 \
    "llama_cpp_python-$VERSION/vendor/llama.cpp/tools/server/tests" \
    "llama_cpp_python-$VERSION/vendor/llama.cpp/models/templates"
  touch "$TREE/.complete"
fi
TESTS="$TREE/tools/server/tests"

# 2. the suite's own venv: its requirements.txt (from PyPI) + pytest-timeout
VENV="$CACHE/venv"
if [ ! -f "$VENV/.complete" ]; then
  echo "suite: creating $VENV from $TESTS/requirements.txt" >&2
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check -r "$TESTS/requirements.txt" pytest-timeout >&2
  touch "$VENV/.complete"
fi

# 3. the launcher the suite execs as llama-server
LAUNCHER="$RESULTS/llama-server-launcher"
cat > "$LAUNCHER" <<EOF
#!/usr/bin/env bash
exec "$LLAMAPY_PYTHON" "$REPO/scripts/llama_server_launcher.py" "\$@"
EOF
chmod +x "$LAUNCHER"

# 4. one pytest session per server (the suite's load_all starts every preset once per session;
#    the per-test timeout times the test function only, not that session fixture)
paths=()
for f in $FILES; do
  f="${f%.py}"; f="${f#unit/}"
  [ -f "$TESTS/unit/$f.py" ] || { echo "suite: no $TESTS/unit/$f.py" >&2; exit 2; }
  paths+=("unit/$f.py")
done
free_port() { "$LLAMAPY_PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ZYGOTE_PID=""
stop_zygote() { [ -n "$ZYGOTE_PID" ] && kill "$ZYGOTE_PID" 2>/dev/null; ZYGOTE_PID=""; }
trap stop_zygote EXIT
for server in $SERVERS; do
  echo "suite: $server: ${paths[*]} (log: $RESULTS/$server.log)" >&2
  ZYGOTE_SOCK=""
  if [ "$server" = llamapy ] && [ "${LLAMA_SUITE_ZYGOTE:-1}" != 0 ]; then
    ZYGOTE_SOCK="$RESULTS/zygote.sock"
    "$LLAMAPY_PYTHON" "$REPO/scripts/llama_server_zygote.py" "$ZYGOTE_SOCK" 2> "$RESULTS/zygote.log" &
    ZYGOTE_PID=$!
    until grep -q "zygote: ready" "$RESULTS/zygote.log" 2>/dev/null; do
      kill -0 "$ZYGOTE_PID" 2>/dev/null || { echo "suite: the zygote failed, see $RESULTS/zygote.log" >&2; exit 1; }
      sleep 0.2
    done
  fi
  # shellcheck disable=SC2086
  (cd "$TESTS" && PORT="$(free_port)" LLAMA_SUITE_SERVER="$server" LLAMA_SERVER_BIN_PATH="$LAUNCHER" \
     LLAMA_SUITE_ZYGOTE="$ZYGOTE_SOCK" \
     "$VENV/bin/python" -m pytest -p no:cacheprovider -v -rA --timeout "$TIMEOUT" -o timeout_func_only=true \
     --basetemp "$RESULTS/$server.tmp" --junitxml "$RESULTS/$server.xml" ${PYTEST_ARGS:-} "${paths[@]}" \
     > "$RESULTS/$server.log" 2>&1) || true
  stop_zygote
done

# 5. the table
"$VENV/bin/python" "$REPO/scripts/llama_server_suite_table.py" "$RESULTS" $SERVERS
