//! The files `warden plugin new` writes, per language and kind. They are
//! compiled into the binary, so a project can be created anywhere, offline,
//! and always matches the contract this warden speaks.

use super::{Kind, Lang};

/// One file of a new project: its path inside the project and its text
/// (with `{{name}}`, `{{tool_id}}` and `{{sdk_features}}` still to fill in).
pub struct File {
    pub path: &'static str,
    pub text: &'static str,
}

const fn f(path: &'static str, text: &'static str) -> File {
    File { path, text }
}

/// The contract, for every language.
const CONTRACT: File = f(
    "wit/plugin.wit",
    include_str!("../../../../wit/v0.1.0/plugin.wit"),
);

/// The Rust SDK, vendored into each Rust project so it builds from anywhere.
const RUST_SDK: &[File] = &[
    f(
        "vendor/warden-plugin-sdk/Cargo.toml",
        include_str!("../../../../plugins/sdk/Cargo.toml"),
    ),
    f(
        "vendor/warden-plugin-sdk/README.md",
        include_str!("../../../../plugins/sdk/README.md"),
    ),
    f(
        "vendor/warden-plugin-sdk/wit/plugin.wit",
        include_str!("../../../../plugins/sdk/wit/plugin.wit"),
    ),
    f(
        "vendor/warden-plugin-sdk/src/lib.rs",
        include_str!("../../../../plugins/sdk/src/lib.rs"),
    ),
    f(
        "vendor/warden-plugin-sdk/src/glob.rs",
        include_str!("../../../../plugins/sdk/src/glob.rs"),
    ),
    f(
        "vendor/warden-plugin-sdk/src/hook.rs",
        include_str!("../../../../plugins/sdk/src/hook.rs"),
    ),
    f(
        "vendor/warden-plugin-sdk/src/host.rs",
        include_str!("../../../../plugins/sdk/src/host.rs"),
    ),
    f(
        "vendor/warden-plugin-sdk/src/paths.rs",
        include_str!("../../../../plugins/sdk/src/paths.rs"),
    ),
    f(
        "vendor/warden-plugin-sdk/src/tool.rs",
        include_str!("../../../../plugins/sdk/src/tool.rs"),
    ),
];

/// The JavaScript layer's worlds and the WASI interfaces they import.
const JS_WIT: &[File] = &[
    f(
        "wit/js.wit",
        include_str!("../../../../plugins/sdk-js/wit/js.wit"),
    ),
    f(
        "wit/deps/io/package.wit",
        include_str!("../../../../plugins/sdk-js/wit/deps/io/package.wit"),
    ),
    f(
        "wit/deps/clocks/package.wit",
        include_str!("../../../../plugins/sdk-js/wit/deps/clocks/package.wit"),
    ),
    f(
        "wit/deps/filesystem/package.wit",
        include_str!("../../../../plugins/sdk-js/wit/deps/filesystem/package.wit"),
    ),
    f(
        "wit/deps/cli/package.wit",
        include_str!("../../../../plugins/sdk-js/wit/deps/cli/package.wit"),
    ),
    f(
        "wit/deps/random/package.wit",
        include_str!("../../../../plugins/sdk-js/wit/deps/random/package.wit"),
    ),
    f(
        "wit/deps/sockets/package.wit",
        include_str!("../../../../plugins/sdk-js/wit/deps/sockets/package.wit"),
    ),
];

/// Every file of a new project of this language and kind.
pub fn files(lang: Lang, kind: Kind) -> Vec<File> {
    let tool = kind == Kind::Tool;
    let mut out = vec![CONTRACT, f(".gitignore", GITIGNORE)];
    match lang {
        Lang::Rust => {
            out.extend(RUST_SDK.iter().map(|x| f(x.path, x.text)));
            out.push(f(
                "Cargo.toml",
                include_str!("../../templates/rust/Cargo.toml.tmpl"),
            ));
            out.push(f(
                "src/lib.rs",
                if tool {
                    include_str!("../../templates/rust/tool_lib.rs")
                } else {
                    include_str!("../../templates/rust/hook_lib.rs")
                },
            ));
        }
        Lang::Python => {
            out.push(f(
                "warden.py",
                include_str!("../../../../plugins/sdk-python/warden.py"),
            ));
            if tool {
                out.push(f(
                    "app.py",
                    include_str!("../../templates/python/tool_app.py"),
                ));
                out.push(f(
                    "test_app.py",
                    include_str!("../../templates/python/tool_test.py"),
                ));
            } else {
                out.push(f(
                    "app.py",
                    include_str!("../../templates/python/hook_app.py"),
                ));
                out.push(f(
                    "test_app.py",
                    include_str!("../../templates/python/hook_test.py"),
                ));
            }
        }
        Lang::Js => {
            out.extend(JS_WIT.iter().map(|x| f(x.path, x.text)));
            out.push(f(
                "warden.js",
                include_str!("../../../../plugins/sdk-js/warden.js"),
            ));
            out.push(f("package.json", JS_PACKAGE));
            if tool {
                out.push(f("app.js", include_str!("../../templates/js/tool_app.js")));
                out.push(f(
                    "logic.js",
                    include_str!("../../templates/js/tool_logic.js"),
                ));
                out.push(f(
                    "logic.test.js",
                    include_str!("../../templates/js/tool_test.js"),
                ));
            } else {
                out.push(f("app.js", include_str!("../../templates/js/hook_app.js")));
                out.push(f(
                    "logic.js",
                    include_str!("../../templates/js/hook_logic.js"),
                ));
                out.push(f(
                    "logic.test.js",
                    include_str!("../../templates/js/hook_test.js"),
                ));
            }
        }
    }
    out
}

const GITIGNORE: &str = "/build/\n/target/\n__pycache__/\nnode_modules/\n";

const JS_PACKAGE: &str = r#"{
  "name": "{{name}}",
  "private": true,
  "type": "module",
  "scripts": {
    "build": "warden plugin build",
    "test": "node --test"
  }
}
"#;

/// Fill in a template's placeholders.
pub fn render(text: &str, name: &str, tool_id: &str, sdk_features: &str) -> String {
    text.replace("{{name}}", name)
        .replace("{{tool_id}}", tool_id)
        .replace("{{sdk_features}}", sdk_features)
}
