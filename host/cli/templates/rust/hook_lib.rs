//! {{name}}: a warden before hook in Rust. Build with `warden plugin build`,
//! install with `warden plugin add .`.

use warden_plugin_sdk::{Before, Context, Hook, Value};

struct Guard;

impl Hook for Guard {
    fn before_tools() -> Vec<String> {
        vec!["*".into()]
    }

    fn before(_ctx: &Context, _tool: &str, args: Value) -> Before {
        decide(args)
    }
}

/// Block `.secret` files; drop a leading `./` (the next hook, the permission
/// check and the tool see the rewritten call).
fn decide(mut args: Value) -> Before {
    let key = if args.get("path").is_some() { "path" } else { "filePath" };
    let Some(path) = args.get(key).and_then(Value::as_str).map(str::to_string) else {
        return Before::Allow;
    };
    if path.ends_with(".secret") {
        return Before::Block(format!("{path} is a .secret file; {{name}} keeps tools away from those"));
    }
    if let Some(rest) = path.strip_prefix("./") {
        args[key] = Value::String(rest.to_string());
        return Before::Rewrite(args);
    }
    Before::Allow
}

warden_plugin_sdk::export_hook!(Guard);

#[cfg(test)]
mod tests {
    use super::*;
    use warden_plugin_sdk::json;

    #[test]
    fn blocks_secret_files() {
        assert_eq!(
            decide(json!({"path": "keys.secret"})),
            Before::Block("keys.secret is a .secret file; {{name}} keeps tools away from those".into())
        );
    }

    #[test]
    fn rewrites_dot_slash_paths() {
        assert_eq!(
            decide(json!({"filePath": "./a.txt"})),
            Before::Rewrite(json!({"filePath": "a.txt"}))
        );
    }

    #[test]
    fn allows_the_rest() {
        assert_eq!(decide(json!({"path": "a.txt"})), Before::Allow);
    }
}
