"""Run inside .venv-vllm (vLLM's own interpreter): extract tool calls with vLLM's parsers.

Input (JSON file, argv[1]): [{"parser": vLLM parser name, "tokenizer": model dir, "tools": [...],
"text": model output}]. Output (argv[2]): per case {"tools_called", "calls": [[name, arguments]],
"error"}. No toolgym import: this is the other side of the comparison.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def main() -> None:
    from transformers import AutoTokenizer
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.tool_parsers import ToolParserManager

    cases = json.loads(open(sys.argv[1]).read())
    tokenizers: dict[str, Any] = {}
    out = []
    for case in cases:
        tok = tokenizers.get(case["tokenizer"]) or tokenizers.setdefault(case["tokenizer"], AutoTokenizer.from_pretrained(case["tokenizer"]))
        request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "go"}], tools=case["tools"])
        try:
            parser = ToolParserManager.get_tool_parser(case["parser"])(tok, request.tools)
            info = parser.extract_tool_calls(case["text"], request)
            calls = [[c.function.name, json.loads(c.function.arguments)] for c in info.tool_calls] if info.tools_called else []
            out.append({"tools_called": bool(info.tools_called), "calls": calls, "error": None})
        except Exception as exc:  # reported, compared as a failure to extract
            out.append({"tools_called": False, "calls": [], "error": f"{type(exc).__name__}: {exc}"})
    with open(sys.argv[2], "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
