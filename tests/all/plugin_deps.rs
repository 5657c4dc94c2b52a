//! What a plugin's code can use at call time, as it could natively: a
//! Python tool has the whole standard library (every module that loads on
//! WASI, even one first imported inside a function) and the pure-Python
//! packages its `requirements.txt` pins, from PyPI; a JavaScript tool has
//! the npm packages its `package.json` lists, bundled. Each is built by
//! `plugin build` from a `plugin new` project, installed, and called with
//! `plugin call` in a fresh instance, where no build-time file is. Then
//! each language's whole walk, from an empty folder to `plugin remove`.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::common::Env;
use crate::plugin_new::author;

/// What plugins/README.md says a Python tool cannot import: modules that
/// need what WASI does not have. Every other module of the standard
/// library imports at call time.
const PYTHON_UNAVAILABLE: &[&str] = &[
    "bz2", "ctypes", "curses", "fcntl", "grp", "lzma", "mmap", "pty", "pwd", "readline",
    "resource", "ssl", "syslog", "termios", "tty",
];

/// `plugin new NAME --lang LANG` in a fresh folder; the project's path.
fn new_project(env: &Env, name: &str, lang: &str) -> PathBuf {
    let home = env.root.path().join("author");
    std::fs::create_dir_all(&home).unwrap();
    author(env, &home, &["plugin", "new", name, "--lang", lang]);
    home.join(name)
}

/// `plugin build`, `plugin add` and one `plugin call TOOL` with `args` from
/// the session's folder; the output, which must be JSON.
fn build_add_call(env: &Env, project: &Path, tool: &str, args: Value) -> Value {
    author(env, project, &["plugin", "build"]);
    author(
        env,
        &env.project(),
        &["plugin", "add", project.to_str().unwrap(), "--yes"],
    );
    let out = env
        .warden(&["plugin", "call", tool, tool, "--args", &args.to_string()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "plugin call {tool}: {stdout}\n{stderr}"
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}\n{stderr}"))
}

#[test]
fn a_python_tool_has_the_whole_standard_library_and_its_pinned_pypi_package_at_call_time() {
    let env = Env::new();
    let project = new_project(&env, "stdlib", "python");
    std::fs::write(project.join("requirements.txt"), "tabulate==0.9.0\n").unwrap();
    // A module of the project's own, imported only when a call needs it.
    std::fs::write(
        project.join("helpers.py"),
        "def shout(s):\n    return s.upper() + '!'\n",
    )
    .unwrap();
    let unavailable = serde_json::to_string(PYTHON_UNAVAILABLE).unwrap();
    std::fs::write(
        project.join("app.py"),
        format!(
            r#"import json
import sys

import warden

UNAVAILABLE = set({unavailable})
# Never imported by the build either: they print, open a browser, test CPython, or are another platform's.
SKIP = {{"__main__", "__hello__", "__phello__", "this", "antigravity", "idlelib", "tkinter", "turtle",
        "turtledemo", "test", "lib2to3", "ensurepip", "venv", "pydoc", "pdb", "msvcrt", "winreg",
        "winsound", "nt", "_winapi", "_overlapped", "_msi", "msilib", "_wmi", "_scproxy"}}


@warden.tool(id="stdlib", description="Use the standard library.", parameters={{"type": "object"}})
def run(ctx, args):
    # Every import below is the first of its module: at call time.
    import base64, collections, csv, datetime, decimal, difflib, fractions, hashlib, heapq, html
    import importlib, io, pathlib, statistics, string, urllib.parse
    from tabulate import tabulate
    import helpers
    words = "b a c a b a".split()
    done = {{
        "most_common": collections.Counter(words).most_common(2),
        "nsmallest": heapq.nsmallest(2, [5, 1, 4]),
        "date": datetime.date(2026, 12, 7).isoformat(),
        "csv": list(csv.reader(io.StringIO("a,b\n1,2\n"))),
        "sha256": hashlib.sha256(b"warden").hexdigest()[:16],
        "base64": base64.b64encode(b"warden").decode(),
        "mean": statistics.mean([1, 2, 3, 4]),
        "ratio": round(difflib.SequenceMatcher(None, "warden", "garden").ratio(), 3),
        "suffix": pathlib.PurePosixPath("a/b.tar.gz").suffixes,
        "letters": string.ascii_lowercase[:5],
        "decimal": str(decimal.Decimal("0.1") + decimal.Decimal("0.2")),
        "fraction": str(fractions.Fraction(3, 6)),
        "quote": urllib.parse.quote("a b&c"),
        "escape": html.escape("<a & b>"),
        "latin1": "é".encode("latin-1").decode("cp1252"),
        "table": tabulate([["a", 3]], headers=["word", "n"], tablefmt="github"),
        "helper": helpers.shout("hi"),
    }}
    missing, unavailable = [], []
    for name in sorted(sys.stdlib_module_names):
        if name in SKIP or name.startswith("_"):
            continue
        try:
            importlib.import_module(name)
            if name in UNAVAILABLE:
                unavailable.append(name + " imported")
        except ModuleNotFoundError as e:
            if name not in UNAVAILABLE:
                missing.append(f"{{name}}: {{e}}")
    done["missing"] = missing
    done["documented_unavailable_but_imported"] = unavailable
    return warden.Output(json.dumps(done))


Tool = warden.Tool
"#
        ),
    )
    .unwrap();
    let got = build_add_call(&env, &project, "stdlib", json!({}));
    assert_eq!(
        got,
        json!({
            "most_common": [["a", 3], ["b", 2]],
            "nsmallest": [1, 4],
            "date": "2026-12-07",
            "csv": [["a", "b"], ["1", "2"]],
            "sha256": "8bdb247a2a76e166",
            "base64": "d2FyZGVu",
            "mean": 2.5,
            "ratio": 0.833,
            "suffix": [".tar", ".gz"],
            "letters": "abcde",
            "decimal": "0.3",
            "fraction": "1/2",
            "quote": "a%20b%26c",
            "escape": "&lt;a &amp; b&gt;",
            "latin1": "é",
            "table": "| word   |   n |\n|--------|-----|\n| a      |   3 |",
            "helper": "HI!",
            "missing": [],
            "documented_unavailable_but_imported": [],
        })
    );
}

/// One edit of a project file: `from` must be there.
pub(crate) fn edit(file: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(file).unwrap();
    assert!(
        text.contains(from),
        "{} has no {from:?}:\n{text}",
        file.display()
    );
    std::fs::write(file, text.replacen(from, to, 1)).unwrap();
}

/// A language's walk: the dependency it adds and uses, what the tool then
/// prints, and an edit with what it prints after.
struct Walk {
    lang: &'static str,
    /// Edits adding a dependency and using it: (file, from, to).
    depend: Vec<(&'static str, &'static str, &'static str)>,
    prints: String,
    edit: (&'static str, &'static str, &'static str),
    prints_after: String,
}

/// From an empty folder outside the repository: `plugin new` → a
/// dependency added → `plugin build` → `plugin add` with a directory grant
/// → `plugin call` prints the output → an edit → reinstalled (`add --build
/// --replace`, no grant repeated) → the call still reads through the grant
/// and prints the edit → `disable` (no call) → `remove` (gone).
fn walk(w: Walk) {
    let env = Env::new();
    env.file("hello.txt", "one two\nthree\n");
    let name = format!("walk{}", w.lang);
    let project = new_project(&env, &name, w.lang);
    for (file, from, to) in &w.depend {
        edit(&project.join(file), from, to);
    }
    if w.lang == "python" {
        std::fs::write(project.join("requirements.txt"), "tabulate==0.9.0\n").unwrap();
    }
    if w.lang == "js" {
        let manifest = project.join("package.json");
        let mut package: Value =
            serde_json::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
        package["dependencies"] = json!({"ms": "2.1.3"});
        std::fs::write(&manifest, serde_json::to_string_pretty(&package).unwrap()).unwrap();
    }
    let call = || {
        env.warden(&[
            "plugin",
            "call",
            &name,
            &name,
            "--args",
            r#"{"path": "hello.txt"}"#,
        ])
        .output()
        .unwrap()
    };
    author(&env, &project, &["plugin", "build"]);
    let path = project.to_str().unwrap();
    author(
        &env,
        &env.project(),
        &["plugin", "add", path, "--dir", ".:ro", "--yes"],
    );
    let out = call();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), w.prints);
    // What the tool logged, a line of its own, beside the decisions.
    let said: Vec<&str> = stderr.lines().map(str::trim).collect();
    let logged = format!("INFO counted hello.txt plugin=\"{name}\"");
    assert!(said.contains(&logged.as_str()), "{stderr}");
    assert!(
        said.iter()
            .any(|l| l.starts_with(&format!("tool {name} ran: ok"))),
        "{stderr}"
    );

    let (file, from, to) = w.edit;
    edit(&project.join(file), from, to);
    let said = author(
        &env,
        &env.project(),
        &["plugin", "add", path, "--build", "--replace", "--yes"],
    );
    assert!(
        said.contains(&format!("against the installed {name} (its grants kept)")),
        "{said}"
    );
    let out = call();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), w.prints_after);

    author(&env, &env.project(), &["plugin", "disable", &name]);
    let out = call();
    assert!(!out.status.success(), "a disabled plugin is not called");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("no loaded plugin \"{name}\"")),
        "{err}"
    );
    author(&env, &env.project(), &["plugin", "remove", &name]);
    let listed = author(
        &env,
        &env.project(),
        &["plugin", "list", "--format", "json"],
    );
    assert!(!listed.contains(&name), "{listed}");
}

const NO_LABEL: &str = "no label: WARDEN_EXAMPLE_LABEL is not granted";

#[test]
fn a_rust_plugin_s_whole_life_with_a_crate_from_crates_io() {
    walk(Walk {
        lang: "rust",
        depend: vec![
            ("Cargo.toml", "serde = {", "itoa = \"=1.0.19\"\nserde = {"),
            (
                "src/lib.rs",
                r#"format!("{}: {lines} lines, {words} words ({label})", args.path)"#,
                r#"format!("{}: {} words, by itoa ({label})", args.path, itoa::Buffer::new().format(words + lines - lines))"#,
            ),
        ],
        prints: format!("hello.txt: 3 words, by itoa ({NO_LABEL})"),
        edit: ("src/lib.rs", "by itoa", "by itoa, edited"),
        prints_after: format!("hello.txt: 3 words, by itoa, edited ({NO_LABEL})"),
    });
}

#[test]
fn a_python_plugin_s_whole_life_with_the_standard_library_and_a_pypi_package() {
    walk(Walk {
        lang: "python",
        depend: vec![
            (
                "app.py",
                r#"f"{path}: {lines} lines, {words} words ({label})","#,
                "summary(path, text, label),",
            ),
            (
                "app.py",
                "\n# componentize-py looks for",
                r#"

def summary(path, text, label):
    # First imported here, at call time.
    import csv, datetime, hashlib, heapq, io, pathlib
    from tabulate import tabulate
    words = text.split()
    row = next(csv.reader(io.StringIO(",".join(words))))
    return (f"{pathlib.PurePosixPath(path).stem}: {len(row)} words, largest {heapq.nlargest(1, words)[0]}, "
            f"sha {hashlib.sha256(text.encode()).hexdigest()[:8]}, {datetime.date(2026, 1, 2).isoformat()}, "
            + tabulate([[len(words)]], tablefmt="plain") + f" ({label})")

# componentize-py looks for"#,
            ),
        ],
        prints: format!("hello: 3 words, largest two, sha 6481b98d, 2026-01-02, 3 ({NO_LABEL})"),
        edit: ("app.py", "largest {", "largest word {"),
        prints_after: format!(
            "hello: 3 words, largest word two, sha 6481b98d, 2026-01-02, 3 ({NO_LABEL})"
        ),
    });
}

#[test]
fn a_js_plugin_s_whole_life_with_an_npm_package() {
    walk(Walk {
        lang: "js",
        depend: vec![
            (
                "app.js",
                "import { count } from './logic.js';",
                "import { count } from './logic.js';\nimport ms from 'ms';",
            ),
            (
                "app.js",
                "`${args.path}: ${lines} lines, ${words} words (${label})`",
                "`${args.path}: ${words} words, ${ms(words * 60000 + lines - lines, { long: true })} (${label})`",
            ),
        ],
        prints: format!("hello.txt: 3 words, 3 minutes ({NO_LABEL})"),
        edit: ("app.js", "words, ${ms", "words read, ${ms"),
        prints_after: format!("hello.txt: 3 words read, 3 minutes ({NO_LABEL})"),
    });
}
