//! What OpenCode's clients read at start-up, answered from warden's own
//! config and state: agents, providers and their models, the config, paths,
//! the project, version control, and the features warden does not have
//! (commands, formatters, LSP and MCP servers, workspaces), which are
//! answered as empty rather than made up.

use std::collections::BTreeMap;
use std::path::Path;

use axum::Json;
use axum::extract::State;
use serde_json::{Map, Value, json};
use warden_llm::providers::ProviderConfig;
use warden_protocol::{ModelRef, SessionInfo};

use crate::AppState;
use crate::error::{ApiError, ErrorBody};
use crate::routes::{ApiPath, ApiQuery, Location};

fn model_json(m: &ModelRef, config: Option<&ProviderConfig>) -> Value {
    let known = config.and_then(|c| c.models.get(&m.model));
    let prices = known.and_then(|k| k.prices).unwrap_or_default();
    json!({
        "id": m.model,
        "providerID": m.provider,
        "api": {"id": m.model, "url": config.and_then(|c| c.base_url.clone()).unwrap_or_default(), "npm": ""},
        "name": m.model,
        "family": "",
        "capabilities": {
            "temperature": true, "reasoning": false, "attachment": false, "toolcall": true,
            "input": {"text": true, "audio": false, "image": false, "video": false, "pdf": false},
            "output": {"text": true, "audio": false, "image": false, "video": false, "pdf": false},
            "interleaved": false
        },
        "cost": {"input": prices.input, "output": prices.output,
                 "cache": {"read": prices.cache_read, "write": prices.cache_write}},
        "limit": {"context": known.and_then(|k| k.context_limit).unwrap_or(0),
                  "output": known.and_then(|k| k.output_limit).unwrap_or(0)},
        "status": "active",
        "options": known.and_then(|k| k.options.clone()).unwrap_or_default(),
        "headers": {},
        "release_date": "",
        "variants": {}
    })
}

/// Every provider warden can use now: those in the config, `openai` and
/// `anthropic` when their key is set, and the providers of the models the
/// server, the agents and the config name. Each lists the models warden
/// knows of it. Also the default model of each.
fn catalogue(state: &AppState) -> (Vec<Value>, BTreeMap<String, String>) {
    let config = state.core.config();
    let mut models: BTreeMap<String, Vec<ModelRef>> = BTreeMap::new();
    for (name, p) in &config.provider {
        let entry = models.entry(name.clone()).or_default();
        for m in p.models.keys() {
            entry.push(ModelRef {
                provider: name.clone(),
                model: m.clone(),
            });
        }
    }
    for (name, var) in [
        ("openai", "OPENAI_API_KEY"),
        ("anthropic", "ANTHROPIC_API_KEY"),
    ] {
        if std::env::var_os(var).is_some() {
            models.entry(name.into()).or_default();
        }
    }
    let default = state.default_model();
    let named = default
        .iter()
        .cloned()
        .chain(state.core.agents().all().filter_map(|a| a.model.clone()));
    let mut defaults = BTreeMap::new();
    for m in named {
        let list = models.entry(m.provider.clone()).or_default();
        if !list.contains(&m) {
            list.push(m.clone());
        }
        defaults
            .entry(m.provider.clone())
            .or_insert(m.model.clone());
    }
    let providers = models
        .into_iter()
        .map(|(name, list)| {
            let p = config.provider.get(&name);
            if let Some(first) = list.first() {
                defaults.entry(name.clone()).or_insert(first.model.clone());
            }
            let env: Vec<String> = match (name.as_str(), p.and_then(|p| p.api_key_env.clone())) {
                (_, Some(v)) => vec![v],
                ("openai", None) => vec!["OPENAI_API_KEY".into()],
                ("anthropic", None) => vec!["ANTHROPIC_API_KEY".into()],
                _ => vec![],
            };
            let models: Map<String, Value> = list
                .iter()
                .map(|m| (m.model.clone(), model_json(m, p)))
                .collect();
            json!({
                "id": name,
                "name": name,
                "source": if p.is_some() { "config" } else { "env" },
                "env": env,
                "options": {},
                "models": models,
            })
        })
        .collect();
    (providers, defaults)
}

/// warden's config as OpenCode's clients read theirs: the default model and
/// agent, the agents, the providers and the global permission rules.
#[utoipa::path(get, path = "/config", tag = "catalog", params(Location),
    responses((status = 200, description = "the config in OpenCode's shape", body = Object)))]
pub async fn config(State(state): State<AppState>) -> Json<Value> {
    let config = state.core.config();
    let agents: Map<String, Value> = state
        .core
        .agents()
        .all()
        .map(|a| {
            (
                a.name.clone(),
                json!({"description": a.description, "steps": a.steps}),
            )
        })
        .collect();
    let providers: Map<String, Value> = catalogue(&state)
        .0
        .into_iter()
        .filter_map(|p| {
            Some((
                p["id"].as_str()?.to_string(),
                json!({"name": p["name"], "models": p["models"]}),
            ))
        })
        .collect();
    let mut out = json!({
        "default_agent": state.core.agents().default_name(),
        "agent": agents,
        "provider": providers,
        "command": {},
        "mode": {},
        "plugin": [],
        "share": "disabled",
        "autoupdate": false,
    });
    if let Some(m) = state.default_model() {
        out["model"] = json!(format!("{}/{}", m.provider, m.model));
    }
    if let Some(p) = &config.permission {
        out["permission"] = p.clone();
    }
    Json(out)
}

#[utoipa::path(get, path = "/config/providers", tag = "catalog", params(Location),
    responses((status = 200, description = "{\"providers\": [...], \"default\": {providerID: modelID}}", body = Object)))]
pub async fn config_providers(State(state): State<AppState>) -> Json<Value> {
    let (providers, default) = catalogue(&state);
    Json(json!({"providers": providers, "default": default}))
}

#[utoipa::path(get, path = "/provider", tag = "catalog", params(Location),
    responses((status = 200, description = "{\"all\": [...], \"default\": {...}, \"connected\": [ids]}", body = Object)))]
pub async fn providers(State(state): State<AppState>) -> Json<Value> {
    let (providers, default) = catalogue(&state);
    let connected: Vec<Value> = providers.iter().map(|p| p["id"].clone()).collect();
    Json(json!({"all": providers, "default": default, "connected": connected}))
}

/// Sign-in methods by provider: warden takes keys from the environment only.
#[utoipa::path(get, path = "/provider/auth", tag = "catalog",
    responses((status = 200, description = "always empty: keys come from environment variables", body = Object)))]
pub async fn provider_auth() -> Json<Value> {
    Json(json!({}))
}

#[utoipa::path(get, path = "/agent", tag = "catalog", params(Location),
    responses((status = 200, description = "the agents, each with its rules", body = [Object])))]
pub async fn agents(State(state): State<AppState>) -> Json<Vec<Value>> {
    let default = state.core.agents().default_name().to_string();
    let mut list: Vec<Value> = state
        .core
        .agents()
        .all()
        .map(|a| {
            let mut v = json!({
                "name": a.name,
                "description": a.description,
                "mode": "primary",
                "native": a.name == warden_core::agent::DEFAULT_AGENT,
                "permission": a.policy.operator,
                "options": {},
            });
            if let Some(m) = &a.model {
                v["model"] = json!({"providerID": m.provider, "modelID": m.model});
            }
            if let Some(s) = a.steps {
                v["steps"] = json!(s);
            }
            if let Some(p) = &a.system {
                v["prompt"] = json!(p);
            }
            v
        })
        .collect();
    // The default agent first: clients pick the first primary agent.
    list.sort_by_key(|a| a["name"] != json!(default));
    Json(list)
}

/// Slash commands. warden has none.
#[utoipa::path(get, path = "/command", tag = "catalog", params(Location),
    responses((status = 200, description = "always empty: warden has no commands", body = [Object])))]
pub async fn commands() -> Json<Vec<Value>> {
    Json(Vec::new())
}

/// The client's directory when it lies inside the server's (judged by
/// where it really leads), else the server's: nothing outside `--dir` is
/// read or named for a client.
fn client_dir(state: &AppState, q: &Location) -> String {
    let root = &state.options.directory;
    q.directory
        .as_deref()
        .and_then(|d| std::fs::canonicalize(d).ok())
        .filter(|d| d.starts_with(root))
        .unwrap_or_else(|| root.clone())
        .display()
        .to_string()
}

#[utoipa::path(get, path = "/path", tag = "catalog", params(Location),
    responses((status = 200, description = "home, state (the data dir), config, worktree (the server's directory) and directory", body = Object)))]
pub async fn path(State(state): State<AppState>, ApiQuery(q): ApiQuery<Location>) -> Json<Value> {
    let home = std::env::var("HOME").unwrap_or_default();
    let config = state
        .options
        .config_path
        .as_ref()
        .and_then(|p| p.parent())
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    Json(json!({
        "home": home,
        "state": state.options.data_dir.display().to_string(),
        "config": config,
        "worktree": state.options.directory.display().to_string(),
        "directory": client_dir(&state, &q),
    }))
}

fn project(state: &AppState) -> Value {
    json!({
        "id": SessionInfo::PROJECT,
        "worktree": state.options.directory.display().to_string(),
        "time": {"created": state.started, "updated": state.started},
        "sandboxes": [],
    })
}

/// The one project warden serves: its directory.
#[utoipa::path(get, path = "/project/current", tag = "catalog", params(Location),
    responses((status = 200, description = "the server's directory as OpenCode's project", body = Object)))]
pub async fn project_current(State(state): State<AppState>) -> Json<Value> {
    Json(project(&state))
}

#[utoipa::path(get, path = "/project", tag = "catalog",
    responses((status = 200, description = "the one project", body = [Object])))]
pub async fn projects(State(state): State<AppState>) -> Json<Vec<Value>> {
    Json(vec![project(&state)])
}

/// Other directories of a project (OpenCode's worktrees). warden's has none.
#[utoipa::path(get, path = "/project/{projectID}/directories", tag = "catalog", params(("projectID" = String, Path)),
    responses((status = 200, description = "always empty", body = [String]), (status = 404, description = "no such project", body = ErrorBody)))]
pub async fn project_directories(
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Vec<String>>, ApiError> {
    if id != SessionInfo::PROJECT {
        return Err(ApiError::not_found(format!(
            "no project {id}; warden's one project is {}",
            SessionInfo::PROJECT
        )));
    }
    Ok(Json(Vec::new()))
}

/// The git branch checked out in `dir`, read from `.git/HEAD`.
fn branch(dir: &Path) -> Option<String> {
    let head = std::fs::read_to_string(dir.join(".git").join("HEAD")).ok()?;
    head.trim()
        .strip_prefix("ref: refs/heads/")
        .map(str::to_string)
}

#[utoipa::path(get, path = "/vcs", tag = "catalog", params(Location),
    responses((status = 200, description = "the git branch of the client's directory, or null", body = Object)))]
pub async fn vcs(State(state): State<AppState>, ApiQuery(q): ApiQuery<Location>) -> Json<Value> {
    let dir = client_dir(&state, &q);
    Json(json!({"branch": branch(Path::new(&dir)), "default_branch": null}))
}

#[utoipa::path(get, path = "/formatter", tag = "catalog", params(Location),
    responses((status = 200, description = "always empty: warden runs no formatters", body = [Object])))]
pub async fn formatter() -> Json<Vec<Value>> {
    Json(Vec::new())
}

#[utoipa::path(get, path = "/lsp", tag = "catalog", params(Location),
    responses((status = 200, description = "always empty: warden runs no language servers", body = [Object])))]
pub async fn lsp() -> Json<Vec<Value>> {
    Json(Vec::new())
}

#[utoipa::path(get, path = "/mcp", tag = "catalog", params(Location),
    responses((status = 200, description = "the config's MCP servers by name, each `{\"status\": \"connected\"}` (warden connects every enabled one at start, or does not start) or `{\"status\": \"disabled\"}`; warden's own MCP endpoint is `/warden/mcp`", body = Object)))]
pub async fn mcp(State(state): State<AppState>) -> Json<Value> {
    let servers = state
        .core
        .config()
        .mcp
        .iter()
        .map(|(name, server)| {
            let status = if server.enabled() {
                "connected"
            } else {
                "disabled"
            };
            (name.clone(), json!({ "status": status }))
        })
        .collect::<serde_json::Map<_, _>>();
    Json(Value::Object(servers))
}

#[utoipa::path(get, path = "/experimental/capabilities", tag = "catalog",
    responses((status = 200, description = "the optional features: none", body = Object)))]
pub async fn capabilities() -> Json<Value> {
    Json(json!({"backgroundSubagents": false}))
}

#[utoipa::path(get, path = "/experimental/console", tag = "catalog",
    responses((status = 200, description = "no console-managed providers", body = Object)))]
pub async fn console() -> Json<Value> {
    Json(json!({"consoleManagedProviders": [], "switchableOrgCount": 0}))
}

#[utoipa::path(get, path = "/experimental/resource", tag = "catalog", params(Location),
    responses((status = 200, description = "always empty: no MCP resources", body = Object)))]
pub async fn resources() -> Json<Value> {
    Json(json!({}))
}

#[utoipa::path(get, path = "/experimental/workspace", tag = "catalog", params(Location),
    responses((status = 200, description = "always empty: warden has no workspaces", body = [Object])))]
pub async fn workspaces() -> Json<Vec<Value>> {
    Json(Vec::new())
}

#[utoipa::path(get, path = "/experimental/workspace/status", tag = "catalog", params(Location),
    responses((status = 200, description = "always empty: warden has no workspaces", body = [Object])))]
pub async fn workspace_status() -> Json<Vec<Value>> {
    Json(Vec::new())
}

fn location_json(state: &AppState, q: &Location) -> Value {
    json!({
        "directory": client_dir(state, q),
        "project": {"id": SessionInfo::PROJECT, "directory": state.options.directory.display().to_string()},
    })
}

#[utoipa::path(get, path = "/api/location", tag = "catalog", params(Location),
    responses((status = 200, description = "the client's directory and the project", body = Object)))]
pub async fn location(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<Location>,
) -> Json<Value> {
    Json(location_json(&state, &q))
}

/// OpenCode's newer catalogue reads (`/api/agent`, `/api/model`, ...). Its
/// own server answers them with empty lists today, and its clients use the
/// older routes above; warden answers the same way.
#[utoipa::path(get, path = "/api/{kind}", tag = "catalog",
    params(("kind" = String, Path, description = "agent, command, integration, model, provider, reference or skill")),
    responses((status = 200, description = "{\"location\", \"data\": []}", body = Object), (status = 404, description = "not one of the kinds", body = ErrorBody)))]
pub async fn api_list(
    State(state): State<AppState>,
    ApiPath(kind): ApiPath<String>,
    ApiQuery(q): ApiQuery<Location>,
) -> Result<Json<Value>, ApiError> {
    const KINDS: [&str; 7] = [
        "agent",
        "command",
        "integration",
        "model",
        "provider",
        "reference",
        "skill",
    ];
    if !KINDS.contains(&kind.as_str()) {
        return Err(ApiError::not_found(format!(
            "no such endpoint /api/{kind}; GET /doc lists them"
        )));
    }
    Ok(Json(
        json!({"location": location_json(&state, &q), "data": []}),
    ))
}
