"""``@tool``: turn an annotated function into a tool a model can call.

The JSON schema (OpenAI function format) comes from the signature and the docstring; arguments
are validated with pydantic before the function runs; sync functions run in a worker thread so
they never block the event loop; every call has a timeout. Keyword-only parameters named in
``INJECTED`` (``sandbox``, ``ctx``) are supplied by the engine and never shown to the model.

Validation is strict about JSON types, because a model that sends the wrong type should learn so
rather than be silently coerced: a boolean is not an integer or a number, a string is not a number
(``"3"`` is refused for an ``int`` argument, never read as 3), a number is not a string, and a
float is not an integer even when whole (``3.0``). An integer is accepted where a number (``float``)
is declared, as JSON Schema says. Arguments that are not JSON values are refused. Unknown
arguments are refused (``unexpected argument 'x'``) unless the function declares ``**kwargs``; then
undeclared arguments are passed through as given (never under an injected name) and the schema
says ``additionalProperties: true``.

Arguments are validated once per call: a parser checks them against the tool (``Tool.check``,
which raises the same errors as ``validate``) and hands the tool their validated values with them
(``CheckedArguments``); anything else that reaches ``Tool.call`` is validated there. The timeout
arms a timer only for a call that waits (``toolgym.core.deadline.within``).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import time
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, get_type_hints

import pydantic

from .deadline import within
from .errors import ToolArgumentError, ToolExecutionError, ToolgymError

INJECTED = frozenset({"sandbox", "ctx"})
DEFAULT_TIMEOUT_S = 30.0
_ARGUMENTS_JSON = json.JSONEncoder(allow_nan=False)
"""``json.dumps(arguments, allow_nan=False)``, built once (``dumps`` builds an encoder per call
for any argument it does not take by default)."""


class ToolDefinitionError(ToolgymError, TypeError):
    """A function cannot be made into a tool (for example, an argument type with no JSON schema)."""


@dataclass(slots=True)
class ToolOutput:
    """The result of one tool call as the model will see it, plus what it cost."""

    text: str
    error: bool = False
    duration_s: float = 0.0
    files: list[str] = field(default_factory=list)
    """Paths of files the call produced (screenshots), stored beside the trajectory."""
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Tool:
    """A callable tool with its schema. Build one with ``@tool``, not directly."""

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any]
    args_model: type[pydantic.BaseModel]
    sandbox: str | None = None
    """The sandbox kind the tool needs (``"python"``, ``"shell"``, …), or None."""
    timeout_s: float = DEFAULT_TIMEOUT_S
    injected: frozenset[str] = frozenset()
    is_async: bool = True
    plugin: str = ""
    """Name of the plugin that registered the tool, filled in by the plugin manager."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the underlying function directly, without validation or timeout (for tests)."""
        return self.fn(*args, **kwargs)

    @property
    def schema(self) -> dict[str, Any]:
        """The OpenAI function-calling schema, as chat templates take it."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def json_object(self, arguments: dict[str, Any] | str | None) -> tuple[dict[str, Any], str]:
        """The arguments as a JSON object and its JSON text (None and "" are ``{}``); raise
        ToolArgumentError with a message for the model when they are not one."""
        if arguments is None:
            arguments = {}
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError as exc:
                raise ToolArgumentError(f"arguments for {self.name} are not valid JSON: {exc.msg}") from None
        if not isinstance(arguments, dict):
            raise ToolArgumentError(
                f"arguments for {self.name} must be a JSON object, got {type(arguments).__name__}"
            )
        try:
            return arguments, _ARGUMENTS_JSON.encode(arguments)
        except (TypeError, ValueError, RecursionError):
            raise ToolArgumentError(
                f"invalid arguments for {self.name}: arguments must be JSON values (strings, numbers, "
                "booleans, null, arrays, objects)"
            ) from None

    def validate(self, arguments: dict[str, Any] | str | None) -> dict[str, Any]:
        """Check arguments against the schema; raise ToolArgumentError with a message for the model.
        Returns the validated values (defaults filled in), what the function is called with."""
        _, as_json = self.json_object(arguments)
        try:  # strict JSON-mode validation: no bool→int, str→number or number→str coercion
            model = self.args_model.model_validate_json(as_json, strict=True)
        except pydantic.ValidationError as exc:
            raise ToolArgumentError(_describe_validation_error(self.name, exc)) from None
        values = dict(model.__dict__)  # the fields' values, in their order (extra ones are apart)
        extra = model.__pydantic_extra__
        if extra:
            forbidden = sorted(set(extra) & INJECTED)
            if forbidden:
                raise ToolArgumentError(
                    f"invalid arguments for {self.name}: unexpected argument {forbidden[0]!r}"
                )
            values.update(extra)
        return values

    def check(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """``validate`` for a parser: the model's ``arguments`` as they were (to record), carrying
        their validated values when that is safe (see :class:`CheckedArguments`) so that ``call``
        does not validate them a second time. Raises ToolArgumentError as ``validate`` does."""
        values = self.validate(arguments)
        if type(arguments) is dict and all(type(v) in _SCALARS for v in arguments.values()):
            return CheckedArguments(arguments, self, values)
        return arguments

    async def call(
        self,
        arguments: dict[str, Any] | str | None,
        *,
        sandbox: Any = None,
        ctx: Any = None,
        timeout_s: float | None = None,
    ) -> ToolOutput:
        """Validate, run with a timeout, and wrap the result. Errors become error outputs."""
        start = time.perf_counter()
        try:
            checked = arguments.take_values(self) if type(arguments) is CheckedArguments else None
            # arguments a parser checked against this tool are not validated a second time
            kwargs = checked if checked is not None else self.validate(arguments)
        except ToolArgumentError as exc:
            return ToolOutput(str(exc), error=True, duration_s=time.perf_counter() - start)
        if "sandbox" in self.injected:
            if sandbox is None and self.sandbox is not None:
                raise ToolExecutionError(f"tool {self.name} needs a {self.sandbox!r} sandbox, none was given")
            kwargs["sandbox"] = sandbox
        if "ctx" in self.injected:
            kwargs["ctx"] = ctx
        limit = self.timeout_s if timeout_s is None else timeout_s
        try:
            if self.is_async:  # no timer when the tool answers without waiting (see ``within``)
                result = await within(self.fn(**kwargs), limit)
            else:
                async with asyncio.timeout(limit):
                    result = await asyncio.to_thread(self.fn, **kwargs)
        except TimeoutError:
            return ToolOutput(
                f"Error: tool {self.name} timed out after {limit:g}s",
                error=True,
                duration_s=time.perf_counter() - start,
                metadata={"timed_out": True},
            )
        except (ToolArgumentError, ToolExecutionError) as exc:
            return ToolOutput(f"Error: {exc}", error=True, duration_s=time.perf_counter() - start)
        except Exception as exc:  # a bug in the tool is the model's observation, not a crash
            return ToolOutput(
                f"Error: {type(exc).__name__}: {exc}", error=True, duration_s=time.perf_counter() - start
            )
        out = result if isinstance(result, ToolOutput) else ToolOutput(_to_text(result))
        out.duration_s = time.perf_counter() - start
        return out


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _drops_check(name: str) -> Any:
    """``dict``'s method ``name``, made to drop a :class:`CheckedArguments`' validated values first."""
    method = getattr(dict, name)

    def change(self: CheckedArguments, *args: Any, **kwargs: Any) -> Any:
        self._tool = None
        return method(self, *args, **kwargs)

    change.__name__ = name
    return change


class CheckedArguments(dict):  # type: ignore[type-arg]
    """A model's tool arguments that a tool's schema accepted (:meth:`Tool.check`), with the values
    they validated to, so that :meth:`Tool.call` does not validate the same arguments again.

    To everything else it is the plain dict it copies (JSON, ``repr``, equality, templates; a copy
    or a pickle is a plain dict). Only arguments whose values are all immutable scalars are
    wrapped; any change to the mapping drops the validated values, and they are handed out once
    (a replayed call validates afresh, so a tool that changed a mutable default sees a fresh one).
    """

    __slots__ = ("_tool", "_values")

    def __init__(self, arguments: dict[str, Any], tool: Tool, values: dict[str, Any]) -> None:
        super().__init__(arguments)
        self._tool: Tool | None = tool
        self._values = values

    def take_values(self, tool: Tool) -> dict[str, Any] | None:
        """The validated values if ``tool`` validated the mapping as it is now and they were not
        taken yet; else None (validate it)."""
        if self._tool is not tool:
            return None
        self._tool = None
        return self._values

    def __reduce__(self) -> tuple[Any, ...]:
        return dict, (dict(self),)

    __setitem__ = _drops_check("__setitem__")
    __delitem__ = _drops_check("__delitem__")
    __ior__ = _drops_check("__ior__")
    update = _drops_check("update")
    pop = _drops_check("pop")
    popitem = _drops_check("popitem")
    clear = _drops_check("clear")
    setdefault = _drops_check("setdefault")


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    sandbox: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    timeout: float | None = None,
) -> Any:
    """Make a tool from a function. Use bare (``@tool``) or with options (``@tool(sandbox="python")``).

    ``sandbox`` names the sandbox kind the tool runs in; the function then takes a keyword-only
    ``sandbox`` argument. ``timeout_s`` is seconds per call (``Tool.timeout_s``); ``timeout`` is its
    old name, still accepted with a warning.
    """
    if timeout is not None:
        warnings.warn(
            "@tool(timeout=...) is deprecated: write @tool(timeout_s=...), seconds per call as before "
            "(the old name goes in toolgym 0.2)",
            FutureWarning,
            stacklevel=2,
        )
        if timeout_s != DEFAULT_TIMEOUT_S and timeout_s != timeout:
            raise ToolDefinitionError(
                f"@tool got timeout_s={timeout_s:g} and timeout={timeout:g}: give only timeout_s"
            )
        timeout_s = timeout

    def wrap(f: Callable[..., Any]) -> Tool:
        return _build_tool(f, name=name, description=description, sandbox=sandbox, timeout_s=timeout_s)

    return wrap(fn) if fn is not None else wrap


def _build_tool(
    fn: Callable[..., Any],
    *,
    name: str | None,
    description: str | None,
    sandbox: str | None,
    timeout_s: float,
) -> Tool:
    tool_name = name or fn.__name__
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}", tool_name):
        raise ToolDefinitionError(
            f"tool name {tool_name!r} is invalid: use letters, digits, '_', '-' or '.', at most 64 characters"
        )
    summary, arg_docs = parse_docstring(inspect.getdoc(fn) or "")
    if not (description or summary):
        raise ToolDefinitionError(f"tool {tool_name!r} has no description: give it a docstring")
    try:
        hints = get_type_hints(fn)
    except Exception as exc:
        raise ToolDefinitionError(f"tool {tool_name!r}: cannot resolve type hints ({exc})") from None
    fields: dict[str, Any] = {}
    injected: set[str] = set()
    open_ended = False
    for param in inspect.signature(fn).parameters.values():
        if param.name in INJECTED:
            injected.add(param.name)
            continue
        if param.kind is param.VAR_KEYWORD:
            open_ended = True
            continue
        if param.kind is param.VAR_POSITIONAL:
            raise ToolDefinitionError(f"tool {tool_name!r}: *args cannot be described to a model")
        if param.name not in hints:
            raise ToolDefinitionError(f"tool {tool_name!r}: argument {param.name!r} needs a type annotation")
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (
            hints[param.name],
            pydantic.Field(default, description=arg_docs.get(param.name)),
        )
    if sandbox is not None and "sandbox" not in injected:
        raise ToolDefinitionError(
            f"tool {tool_name!r} asks for a {sandbox!r} sandbox but takes no keyword-only 'sandbox' argument"
        )
    model_name = "".join(part.capitalize() for part in re.split(r"[_.-]", tool_name)) + "Args"
    try:
        args_model = pydantic.create_model(  # type: ignore[call-overload]
            model_name, __config__=pydantic.ConfigDict(extra="allow" if open_ended else "forbid"), **fields
        )
        parameters = _clean_schema(args_model.model_json_schema())
        if open_ended:
            parameters["additionalProperties"] = True
    except Exception as exc:
        raise ToolDefinitionError(
            f"tool {tool_name!r}: an argument type has no JSON schema ({exc})"
        ) from None
    is_async = inspect.iscoroutinefunction(fn)
    built = Tool(
        name=tool_name,
        description=description or summary,
        parameters=parameters,
        fn=fn,
        args_model=args_model,
        sandbox=sandbox,
        timeout_s=float(timeout_s),
        injected=frozenset(injected),
        is_async=is_async,
    )
    return built


def _clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Drop pydantic's titles (noise for a model) and keep a plain object schema."""

    def strip(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: strip(v) for k, v in node.items() if k != "title"}
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node

    cleaned = strip(schema)
    cleaned.setdefault("properties", {})
    cleaned.pop("additionalProperties", None)
    cleaned["type"] = "object"
    return cleaned


_ARG_LINE = re.compile(r"^\s*[*]{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SPHINX = re.compile(r"^\s*:param\s+(?:\w+\s+)?(\w+)\s*:\s*(.*)$")
_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters|Returns|Raises|Yields|Examples?|Notes?)\s*:?\s*$")


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a Google- or Sphinx-style docstring into (summary, {argument: description})."""
    summary_lines: list[str] = []
    args: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    for line in doc.splitlines():
        if m := _SPHINX.match(line):
            current, args[m.group(1)] = m.group(1), m.group(2).strip()
            section = "args"
            continue
        if m := _SECTION.match(line):
            section = m.group(1).lower()
            current = None
            continue
        if section is None:
            summary_lines.append(line)
        elif section in ("args", "arguments", "parameters"):
            if set(line.strip()) == {"-"}:
                continue
            m = _ARG_LINE.match(line)
            if m and (not current or len(line) - len(line.lstrip()) <= _indent_of(doc, current)):
                current, args[m.group(1)] = m.group(1), m.group(2).strip()
            elif current and line.strip():
                args[current] = f"{args[current]} {line.strip()}".strip()
    summary = " ".join(" ".join(summary_lines).split())
    return summary, args


def _indent_of(doc: str, arg: str) -> int:
    for line in doc.splitlines():
        if re.match(rf"^\s*[*]{{0,2}}{re.escape(arg)}\s*(\(|:)", line):
            return len(line) - len(line.lstrip())
    return 0


def _describe_validation_error(tool_name: str, exc: pydantic.ValidationError) -> str:
    """One readable sentence per problem, e.g. ``argument 'b': Input should be a valid integer``."""
    problems = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err.get("loc", ())) or "arguments"
        if err.get("type") == "missing":
            problems.append(f"missing required argument {where!r}")
        elif err.get("type") == "extra_forbidden":
            problems.append(f"unexpected argument {where!r}")
        else:
            problems.append(f"argument {where!r}: {err.get('msg', 'invalid')}")
    return f"invalid arguments for {tool_name}: " + "; ".join(problems)


def _to_text(result: Any) -> str:
    if result is None:
        return ""
    if isinstance(result, str):
        return result
    if isinstance(result, bytes):
        return result.decode("utf-8", errors="replace")
    try:
        return json.dumps(result, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(result)


AsyncToolFn = Callable[..., Awaitable[Any]]
