"""Written by `warden plugin build`; do not edit (it is rewritten each build).

componentize-py snapshots the interpreter after importing the app, and at
call time no module's files are there: a module first imported inside a
function (`collections.Counter.most_common` imports `heapq`,
`str.encode("latin-1")` imports a codec, a package imports a submodule
lazily) would be missing. So the build imports here every module of the
standard library that loads on WASI, of the project's requirements, and of
the project itself, and they are all in the snapshot. Those that cannot
load (they need native libraries, processes or terminals that a component
does not have) are listed in `UNAVAILABLE` and fail at call time as they
would on a system without them.
"""

import importlib
import pkgutil
import sys

# Never imported: they print, open a browser, test CPython, or are other
# platforms' modules.
_SKIP = {
    "__main__", "__hello__", "__phello__", "this", "antigravity", "idlelib",
    "tkinter", "turtle", "turtledemo", "test", "lib2to3", "ensurepip", "venv",
    "pydoc", "pdb", "_pyrepl", "msvcrt", "winreg", "winsound", "nt",
    "_winapi", "_overlapped", "_msi", "msilib", "_wmi", "_scproxy",
}

UNAVAILABLE = []


def _load(name):
    try:
        return importlib.import_module(name)
    except BaseException as e:  # noqa: BLE001 - a module's own failure is not the build's
        UNAVAILABLE.append(f"{name}: {type(e).__name__}: {e}")
        return None


def _skipped(name):
    parts = name.split(".")
    return parts[0] in _SKIP or parts[0].startswith("_test") or any(
        p in ("test", "tests", "idle_test", "__main__") for p in parts[1:]
    )


def _walk(module, name):
    """Import every module of the package `module` (named `name`)."""
    for info in pkgutil.iter_modules(module.__path__, name + "."):
        if _skipped(info.name):
            continue
        sub = _load(info.name)
        if sub is not None and info.ispkg and hasattr(sub, "__path__"):
            _walk(sub, info.name)


def load_all(names, what=None):
    """Import each module of `names` and every module of each package.

    With `what`, a top-level module that fails is said on stderr: it is
    the project's (or its requirement's), and will be missing at call time.
    """
    for name in names:
        if _skipped(name):
            continue
        module = _load(name)
        if module is None:
            if what:
                print(f"warden: {what} {name} cannot be imported: {UNAVAILABLE[-1]}; "
                      "it will be missing at call time", file=sys.stderr)
            continue
        if hasattr(module, "__path__"):
            _walk(module, name)


load_all(sorted(sys.stdlib_module_names))
