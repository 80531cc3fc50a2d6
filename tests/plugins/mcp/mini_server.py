"""An MCP server in the standard library alone (newline-delimited JSON-RPC over stdio), for sandboxes
without the SDK: the local (bubblewrap) backend runs the host's /usr python3. One tool, ``echo``."""

import json
import os
import sys

TOOL = {
    "name": "echo",
    "description": "Echo the text, with the server's uid.",
    "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
}

for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue  # a notification
    method, params = msg.get("method"), msg.get("params") or {}
    if method == "initialize":
        result = {
            "protocolVersion": params.get("protocolVersion"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "mini", "version": "0"},
        }
    elif method == "tools/list":
        result = {"tools": [TOOL]}
    elif method == "tools/call":
        text = f"{params['arguments']['text']} (uid {os.getuid()})"
        result = {"content": [{"type": "text", "text": text}], "isError": False}
    else:
        result = {}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}) + "\n")
    sys.stdout.flush()
