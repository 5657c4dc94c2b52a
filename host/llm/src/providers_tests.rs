use std::collections::{BTreeMap, HashMap};

use super::*;
use crate::{ModelResolver, Models};

/// The config file's `provider` table, as the core reads it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default)]
    provider: BTreeMap<String, ProviderConfig>,
}

fn env(vars: &[(&str, &str)]) -> EnvLookup {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Arc::new(move |k| map.get(k).cloned())
}

fn models(config: &str, vars: &[(&str, &str)]) -> Models {
    let config: Config = serde_json::from_str(config).unwrap();
    for (name, p) in &config.provider {
        validate(name, p).unwrap();
    }
    Models::from_providers_with_env(&config.provider, env(vars))
}

fn resolve_err(m: &Models, model: &str) -> String {
    match m.resolve(&Models::parse(model).unwrap()) {
        Ok(_) => panic!("{model} resolved"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn with_no_config_a_missing_key_names_its_variable() {
    let m = models("{}", &[]);
    let e = resolve_err(&m, "openai/gpt-4o");
    assert!(
        e.contains("set the environment variable OPENAI_API_KEY"),
        "{e}"
    );
    assert!(e.contains("OPENAI_BASE_URL"), "{e}");
    let e = resolve_err(&m, "anthropic/claude-sonnet-4-5");
    assert!(
        e.contains("set the environment variable ANTHROPIC_API_KEY"),
        "{e}"
    );
}

#[test]
fn with_no_config_keys_and_base_urls_come_from_the_environment() {
    let m = models("{}", &[("OPENAI_API_KEY", "sk-1")]);
    let r = m.resolve(&Models::parse("openai/gpt-4o").unwrap()).unwrap();
    assert_eq!(r.info.context_limit, None);
    // A compatible server needs no key.
    let m = models("{}", &[("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1")]);
    assert!(m.resolve(&Models::parse("openai/qwen3").unwrap()).is_ok());
    let m = models("{}", &[("OPENAI_BASE_URL", "not a url")]);
    let e = resolve_err(&m, "openai/x");
    assert!(
        e.contains("OPENAI_BASE_URL") && e.contains("not a URL"),
        "{e}"
    );
    // Claude models get their family's limits.
    let m = models("{}", &[("ANTHROPIC_API_KEY", "k")]);
    let r = m
        .resolve(&Models::parse("anthropic/claude-3-5-haiku-latest").unwrap())
        .unwrap();
    assert_eq!(
        (r.info.context_limit, r.info.output_limit),
        (Some(200_000), Some(8192))
    );
}

#[test]
fn configured_models_carry_limits_and_prices() {
    let m = models(
        r#"{"provider": {
            "openai": {"models": {"gpt-4o": {"context_limit": 128000, "output_limit": 16384,
                                             "prices": {"input": 2.5, "output": 10}}}},
            "local": {"api": "openai-chat", "base_url": "http://127.0.0.1:8080/v1"}
        }}"#,
        &[("OPENAI_API_KEY", "sk")],
    );
    let r = m.resolve(&Models::parse("openai/gpt-4o").unwrap()).unwrap();
    assert_eq!(r.info.context_limit, Some(128000));
    assert_eq!(r.info.output_limit, Some(16384));
    assert_eq!(r.info.prices.input, 2.5);
    assert_eq!(r.info.prices.output, 10.0);
    assert!(m.resolve(&Models::parse("local/anything").unwrap()).is_ok());
    let e = resolve_err(&m, "nope/x");
    assert!(
        e.contains("known: anthropic, local, openai, scripted"),
        "{e}"
    );
}

#[test]
fn a_configured_key_variable_must_be_set() {
    let m = models(
        r#"{"provider": {"gw": {"api": "anthropic", "base_url": "https://gw.example", "api_key_env": "GW_KEY"}}}"#,
        &[],
    );
    let e = resolve_err(&m, "gw/claude-x");
    assert!(e.contains("set the environment variable GW_KEY"), "{e}");
}
