//! {{name}}: a warden tool in Rust. Build with `warden plugin build`, install
//! with `warden plugin add . --dir .:ro --env WARDEN_EXAMPLE_LABEL`.

use serde::Deserialize;
use warden_plugin_sdk::{Context, Error, Output, Tool, Value, host, json};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    path: String,
}

struct Count;

impl Tool for Count {
    type Args = Args;
    const ID: &'static str = "{{tool_id}}";
    const DESCRIPTION: &'static str = "Count the lines and words of a text file in the working directory.";

    fn parameters() -> Value {
        json!({
            "type": "object",
            "properties": {"path": {"type": "string", "description": "The file, relative to the working directory."}},
            "required": ["path"],
            "additionalProperties": false
        })
    }

    fn execute(ctx: &Context, args: Args) -> Result<Output, Error> {
        // Absolute, normalised, and refused if it leaves the working directory.
        let full = ctx.resolve(&args.path)?;
        // Only granted directories are mounted.
        let text = std::fs::read_to_string(&full)
            .map_err(|e| Error::failed(format!("cannot read {}: {e}", args.path)))?;
        let (lines, words) = count(&args.path, &text).map_err(Error::failed)?;
        let label = std::env::var("WARDEN_EXAMPLE_LABEL")
            .unwrap_or_else(|_| "no label: WARDEN_EXAMPLE_LABEL is not granted".into());
        host::log(host::LogLevel::Info, &format!("counted {}", args.path));
        Ok(Output::text(format!("{}: {lines} lines, {words} words ({label})", args.path))
            .title(args.path.clone())
            .metadata(json!({"lines": lines, "words": words})))
    }
}

/// Lines and words of `text`; an empty file is an error the model sees.
fn count(path: &str, text: &str) -> Result<(usize, usize), String> {
    if text.trim().is_empty() {
        return Err(format!("{path} is empty; there is nothing to count"));
    }
    Ok((text.matches('\n').count(), text.split_whitespace().count()))
}

warden_plugin_sdk::export_tools!(Count);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_lines_and_words() {
        assert_eq!(count("a.txt", "one two\nthree\n"), Ok((2, 3)));
    }

    #[test]
    fn an_empty_file_is_an_error() {
        assert_eq!(
            count("empty.txt", " \n"),
            Err("empty.txt is empty; there is nothing to count".to_string())
        );
    }
}
