"""{{name}}: a warden tool in Python. Build with `warden plugin build`,
install with `warden plugin add . --dir .:ro --env WARDEN_EXAMPLE_LABEL`.

The whole standard library is there at call time, even modules first
imported inside a function. Packages from PyPI: list them in
requirements.txt (name==version, pure-Python ones only); `plugin build`
installs them into the component."""

import os

import warden


@warden.tool(
    id="{{tool_id}}",
    description="Count the lines and words of a text file in the working directory.",
    parameters={
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "The file, relative to the working directory."},
        },
        "required": ["path"],
        "additionalProperties": False,
    },
)
def count(ctx, args):
    path = args.get("path")
    if not isinstance(path, str):
        raise warden.InvalidArguments("`path` must be a string: the file to count, relative to the working directory")
    full = ctx.resolve(path)  # refuses paths outside the working directory
    with open(full, encoding="utf-8") as f:  # only granted directories are there
        text = f.read()
    if not text.strip():
        raise ValueError(f"{path} is empty; there is nothing to count")
    lines, words = text.count("\n"), len(text.split())
    label = os.environ.get("WARDEN_EXAMPLE_LABEL", "no label: WARDEN_EXAMPLE_LABEL is not granted")
    warden.log("info", f"counted {path}")
    return warden.Output(
        f"{path}: {lines} lines, {words} words ({label})",
        title=path,
        metadata={"lines": lines, "words": words},
    )


# componentize-py looks for the export's class here.
Tool = warden.Tool
