"""Run inside .venv-vllm (vLLM's own interpreter): extract tool calls with vLLM's parsers.

Input (JSON file, argv[1]): [{"parser": vLLM parser name, "tokenizer": model dir, "tools": [...],
"text": model output}]. Output (argv[2]): per case {"tools_called", "calls": [[name, arguments]],
"error"}. No toolgym import: this is the other side of the comparison.

gpt-oss (vLLM's ``openai`` tool parser) is parsed the way vLLM's server parses it: its tool parser is a
stub, and vLLM's ``HarmonyParser`` reads the completion's token ids in the real o200k harmony encoding
(``openai_harmony``, installed with vLLM, vocabulary built in). So the text is encoded with that
encoding first: what is compared is the format, which the tiny tokenizer does not change.
"""

from __future__ import annotations

import json
import sys
from typing import Any

HARMONY = "openai"


def harmony_calls(tokenizer: Any, request: Any, text: str) -> list[list[Any]]:
    """gpt-oss: vLLM's HarmonyParser (its openai tool and openai_gptoss reasoning parsers) on the ids
    of ``text`` in the o200k harmony encoding, as the server composes it for a harmony model."""
    from vllm.entrypoints.openai.parser.harmony_utils import get_encoding
    from vllm.parser.parser_manager import ParserManager

    composed = ParserManager.get_parser(
        tool_parser_name=HARMONY,
        reasoning_parser_name="openai_gptoss",
        enable_auto_tools=True,
        is_harmony=True,
    )
    assert composed is not None
    ids = get_encoding().encode(text, allowed_special="all")
    _reasoning, _content, calls = composed(tokenizer, request.tools).parse(
        text, request, enable_auto_tools=True, model_output_token_ids=ids
    )
    return [[c.name, json.loads(c.arguments)] for c in calls or []]


def main() -> None:
    from transformers import AutoTokenizer
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.tool_parsers import ToolParserManager

    cases = json.loads(open(sys.argv[1]).read())
    tokenizers: dict[str, Any] = {}
    out = []
    for case in cases:
        tok = tokenizers.get(case["tokenizer"]) or tokenizers.setdefault(
            case["tokenizer"], AutoTokenizer.from_pretrained(case["tokenizer"])
        )
        request = ChatCompletionRequest(
            model="m", messages=[{"role": "user", "content": "go"}], tools=case["tools"]
        )
        try:
            if case["parser"] == HARMONY:
                calls = harmony_calls(tok, request, case["text"])
                out.append({"tools_called": bool(calls), "calls": calls, "error": None})
                continue
            parser = ToolParserManager.get_tool_parser(case["parser"])(tok, request.tools)
            info = parser.extract_tool_calls(case["text"], request)
            calls = (
                [[c.function.name, json.loads(c.function.arguments)] for c in info.tool_calls]
                if info.tools_called
                else []
            )
            out.append({"tools_called": bool(info.tools_called), "calls": calls, "error": None})
        except Exception as exc:  # reported, compared as a failure to extract
            out.append({"tools_called": False, "calls": [], "error": f"{type(exc).__name__}: {exc}"})
    with open(sys.argv[2], "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
