"""{{name}}: a warden before hook in Python. Build with `warden plugin build`,
install with `warden plugin add .`.

The whole standard library is there at call time, even modules first
imported inside a function. Packages from PyPI: list them in
requirements.txt (name==version, pure-Python ones only); `plugin build`
installs them into the component."""

import warden


@warden.before("*")
def guard(ctx, tool, args):
    path = args.get("path") or args.get("filePath")
    if not isinstance(path, str):
        return warden.Allow()
    if path.endswith(".secret"):
        return warden.Block(f"{path} is a .secret file; {{name}} keeps tools away from those")
    if path.startswith("./"):
        # The next hook, the permission check and the tool see the rewritten call.
        return warden.Rewrite({**args, ("path" if "path" in args else "filePath"): path[2:]})
    return warden.Allow()


# componentize-py looks for the export's class here.
Hooks = warden.Hooks
