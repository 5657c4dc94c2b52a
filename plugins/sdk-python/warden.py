"""The warden guest layer for Python (componentize-py).

A tool is a function decorated with ``@tool``; a hook is a function decorated
with ``@before`` or ``@after``. The app module re-exports ``Tool`` (tool
plugins) or ``Hooks`` (hook plugins), the classes componentize-py looks for:

    import warden

    @warden.tool(description="Say hello.", parameters={...})
    def greet(ctx, args):
        return f"hello, {args['name']}"

    Tool = warden.Tool

Arguments arrive as a dict. Raise ``InvalidArguments``, ``Failed`` or
``Denied`` to choose what the model is told; any other exception is shown to
the model as ``TypeName: message``, and its traceback goes to stderr, which
the host keeps with the call (``warden trace``). Files and environment
variables are read the usual way (``open()``, ``os.environ``); only what the
operator granted is there. Each call runs in a fresh instance.

Nothing here imports the generated bindings at module level, so a plugin's
own tests can import the app and call its functions with plain Python.
"""

import fnmatch
import json
import os
import sys
import traceback

# componentize-py snapshots the app after importing it, and only modules
# imported by then are in the component: import everything here, at the top.
try:
    from componentize_py_types import Err as _Err
    from wit_world.imports import host as _wit_host
    from wit_world.imports import types as _wit_types
except ImportError:  # plain Python: the plugin's own tests
    _Err = _wit_host = _wit_types = None
try:
    from wit_world.exports import hooks as _wit_hooks
except ImportError:  # a tool plugin, or plain Python
    _wit_hooks = None

__all__ = [
    "Context", "Output", "InvalidArguments", "Failed", "Denied",
    "tool", "before", "after", "Allow", "Block", "Rewrite", "Ask",
    "Tool", "Hooks", "log", "progress", "ask",
]


class ToolError(Exception):
    """Base of the errors a tool raises on purpose; the message is shown to the model."""

    tag = "failed"


class InvalidArguments(ToolError):
    """The arguments do not fit: say which and what would."""

    tag = "invalid-arguments"


class Failed(ToolError):
    """The tool ran and could not do the job: say why and what to do instead."""

    tag = "failed"


class Denied(ToolError):
    """Something the tool needed was refused (e.g. an ``ask`` answered no)."""

    tag = "denied"


class Output:
    """What a tool returns: text for the model, a title for people, metadata for UIs."""

    def __init__(self, output, title="", metadata=None):
        self.output = str(output)
        self.title = str(title)
        self.metadata = metadata if metadata is not None else {}

    def __repr__(self):
        return f"Output({self.output!r}, title={self.title!r}, metadata={self.metadata!r})"


class Context:
    """Where a call comes from; ``directory`` is the session's working directory."""

    def __init__(self, session_id="", message_id="", call_id="", agent="", directory="/"):
        self.session_id = session_id
        self.message_id = message_id
        self.call_id = call_id
        self.agent = agent
        self.directory = directory

    def resolve(self, path):
        """``path`` (relative to the working directory, or absolute) as an absolute
        path inside the working directory; ``InvalidArguments`` if it leaves it."""
        if not isinstance(path, str) or not path.strip():
            raise InvalidArguments("the path is empty; give a file path relative to the working directory")
        base = os.path.normpath(self.directory)
        full = os.path.normpath(path if os.path.isabs(path) else os.path.join(base, path))
        if full != base and not full.startswith(base.rstrip("/") + "/"):
            raise InvalidArguments(
                f"'{path}' is outside the working directory {base}; only paths inside it can be used")
        return full

    def log(self, level, message):
        log(level, message)

    def progress(self, title=None, metadata=None):
        progress(title, metadata)

    def ask(self, permission, patterns, metadata=None):
        ask(permission, patterns, metadata)


# --- host functions -------------------------------------------------------
#
# Outside a component (a plugin's own tests, run with plain Python) there is
# no host: log lines go to stderr, progress is dropped and ask allows.

_LEVELS = ("debug", "info", "warn", "error")


def _host():
    return _wit_host


def log(level, message):
    """Write a line to the host's log (``debug``, ``info``, ``warn``, ``error``)."""
    if level not in _LEVELS:
        raise ValueError(f"log level {level!r} is not one of {', '.join(_LEVELS)}")
    host = _host()
    if host is None:
        print(f"[{level}] {message}", file=sys.stderr)
        return
    host.log(host.LogLevel[level.upper()], str(message))


def progress(title=None, metadata=None):
    """Update the running call's title and metadata (a dict) while it runs."""
    host = _host()
    if host is not None:
        host.progress(None if title is None else str(title), json.dumps(metadata or {}))


def ask(permission, patterns, metadata=None):
    """Ask whoever is attached for a permission mid-call; raises ``Denied`` if refused."""
    host = _host()
    if host is None:
        return
    try:
        host.ask(permission, list(patterns), json.dumps(metadata or {}))
    except _Err as e:
        raise Denied(str(e.value)) from None


# --- tools ------------------------------------------------------------------

_TOOLS = {}


def tool(description, parameters=None, id=None):
    """Register a function ``f(ctx, args) -> str | Output`` as a tool. ``id``
    defaults to the function's name; ``parameters`` is the JSON Schema of ``args``."""
    def register(f):
        tool_id = id or f.__name__
        _TOOLS[tool_id] = (description, parameters or {"type": "object", "properties": {}}, f)
        return f
    return register


def _context(c):
    return Context(c.session_id, c.message_id, c.call_id, c.agent, c.directory)


def _report(e):
    """The model's one line for an unexpected exception; the traceback to stderr."""
    traceback.print_exception(e, file=sys.stderr)
    sys.stderr.flush()
    return f"{type(e).__name__}: {e}"


def _wit_output(out):
    if not isinstance(out, Output):
        out = Output(out)
    return _wit_types.ToolOutput(output=out.output, title=out.title, metadata=json.dumps(out.metadata))


class Tool:
    """The ``tool`` export: componentize-py calls this class's methods."""

    def describe(self):
        return [_wit_types.ToolSpec(id=i, description=d, parameters=json.dumps(p))
                for i, (d, p, _) in _TOOLS.items()]

    def execute(self, ctx, tool, arguments):
        types, Err = _wit_types, _Err
        errors = {
            "invalid-arguments": types.ToolError_InvalidArguments,
            "failed": types.ToolError_Failed,
            "denied": types.ToolError_Denied,
        }
        try:
            if tool not in _TOOLS:
                raise InvalidArguments(f"this plugin has no tool {tool!r}; it has {', '.join(_TOOLS)}")
            try:
                args = json.loads(arguments or "{}")
            except ValueError as e:
                raise InvalidArguments(f"the arguments are not JSON: {e}") from None
            if not isinstance(args, dict):
                raise InvalidArguments("the arguments must be a JSON object")
            return _wit_output(_TOOLS[tool][2](_context(ctx), args))
        except ToolError as e:
            raise Err(errors[e.tag](str(e))) from None
        except Err:
            raise
        except Exception as e:  # noqa: BLE001 - every other error is the model's business too
            raise Err(types.ToolError_Failed(_report(e))) from None


# --- hooks ------------------------------------------------------------------

class Allow:
    """Let the call run as it is."""


class Block:
    """Refuse the call; the reason is shown to the model."""

    def __init__(self, reason):
        self.reason = str(reason)


class Rewrite:
    """Run the call with these arguments instead (a dict)."""

    def __init__(self, arguments):
        self.arguments = arguments


class Ask:
    """Ask whoever is attached before the call runs."""

    def __init__(self, reason):
        self.reason = str(reason)


_BEFORE = []
_AFTER = []


def before(*patterns):
    """Register ``f(ctx, tool, args) -> Allow | Block | Rewrite | Ask | None`` for
    the tools matching ``patterns`` (globs over tool ids, ``*`` for all)."""
    def register(f):
        _BEFORE.append((list(patterns) or ["*"], f))
        return f
    return register


def after(*patterns):
    """Register ``f(ctx, tool, args, output) -> Output | None`` (None keeps it)."""
    def register(f):
        _AFTER.append((list(patterns) or ["*"], f))
        return f
    return register


def _matches(patterns, tool):
    return any(fnmatch.fnmatchcase(tool, p) for p in patterns)


class Hooks:
    """The ``hooks`` export: componentize-py calls this class's methods."""

    def describe(self):
        return _wit_hooks.HookSpec(before=[p for ps, _ in _BEFORE for p in ps],
                              after=[p for ps, _ in _AFTER for p in ps])

    def before(self, ctx, tool, arguments):
        # An exception escapes: componentize-py prints its traceback, the call
        # traps, and the host decides (fail closed unless fail_open).
        hooks = _wit_hooks
        args = json.loads(arguments or "{}")
        rewritten = False
        for patterns, f in _BEFORE:
            if not _matches(patterns, tool):
                continue
            d = f(_context(ctx), tool, args)
            if isinstance(d, Block):
                return hooks.BeforeDecision_Block(d.reason)
            if isinstance(d, Ask):
                return hooks.BeforeDecision_Ask(d.reason)
            if isinstance(d, Rewrite):
                args, rewritten = d.arguments, True
        if rewritten:
            return hooks.BeforeDecision_Rewrite(json.dumps(args))
        return hooks.BeforeDecision_Allow()

    def after(self, ctx, tool, arguments, output):
        hooks = _wit_hooks
        current = Output(output.output, output.title, json.loads(output.metadata or "{}"))
        changed = False
        args = json.loads(arguments or "{}")
        for patterns, f in _AFTER:
            if not _matches(patterns, tool):
                continue
            new = f(_context(ctx), tool, args, current)
            if new is not None:
                current = new if isinstance(new, Output) else Output(new, current.title, current.metadata)
                changed = True
        if not changed:
            return hooks.AfterDecision_Keep()
        return hooks.AfterDecision_Rewrite(_wit_types.ToolOutput(
            output=current.output, title=current.title, metadata=json.dumps(current.metadata)))
