//! What this host agrees to run, whoever asked for it.
//!
//! Hosts sharing a ledger take prompts from one queue, and any of them may
//! take a session over. So a prompt accepted by one host can be run by
//! another, and each must judge by its own policy, not by the accepting
//! host's: the session's directory inside this host's root (`serve
//! --dir`), a model this host allows, an agent it has. A host never takes
//! the lease of a session outside its root (another host may run it), and
//! a queued prompt it would refuse from its own client is failed in the
//! queue with the reason, whichever host accepted it.

use std::path::{Path, PathBuf};

use warden_protocol::{ModelRef, SessionInfo};

use super::Core;
use crate::error::{CoreError, Result};

/// Which scripted models (cassettes) a host runs. A cassette names files it
/// reads and appends to, so a server runs only the operator's own unless
/// told otherwise (`--allow-scripted`).
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Scripted {
    /// Any (the command line, where the operator picks the model).
    #[default]
    Any,
    /// Only those the operator named: the config's model, an agent's, or
    /// this one (the server's `--model`).
    Operators { also: Option<ModelRef> },
}

/// A host's own policy for what it runs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Admission {
    /// Every session it runs must work inside this directory. `None`:
    /// anywhere (the command line runs the operator's own sessions).
    pub root: Option<PathBuf>,
    pub scripted: Scripted,
}

impl Admission {
    /// Why a session's directory is not this host's to work in, if it is not.
    pub fn directory(&self, directory: &str) -> std::result::Result<(), String> {
        let Some(root) = &self.root else {
            return Ok(());
        };
        match std::fs::canonicalize(directory) {
            Ok(real) if real.starts_with(root) => Ok(()),
            Ok(_) => Err(format!(
                "its directory {} is outside this host's directory {}",
                Path::new(directory).display(),
                root.display()
            )),
            Err(e) => Err(format!(
                "its directory {} cannot be used here: {e}",
                Path::new(directory).display()
            )),
        }
    }
}

impl Core {
    /// This host's policy for what it runs.
    pub fn admission(&self) -> &Admission {
        &self.inner.options.admission
    }

    /// Whether this host works in `session`'s directory.
    pub fn admits_session(&self, session: &SessionInfo) -> Result<()> {
        self.admission()
            .directory(&session.directory)
            .map_err(|why| CoreError::NotHere {
                session: session.id.clone(),
                why,
            })
    }

    /// Whether this host runs `model`.
    pub fn admits_model(&self, model: &ModelRef) -> Result<()> {
        let Scripted::Operators { also } = &self.admission().scripted else {
            return Ok(());
        };
        if model.provider != "scripted" || also.as_ref() == Some(model) {
            return Ok(());
        }
        let named = |m: &Option<String>| {
            m.as_deref()
                .and_then(|m| warden_llm::Models::parse(m).ok())
                .is_some_and(|m| &m == model)
        };
        let config = &self.inner.config;
        if named(&config.model) || config.agent.values().any(|a| named(&a.model)) {
            return Ok(());
        }
        Err(CoreError::Model {
            model: format!("{}/{}", model.provider, model.model),
            reason: "scripted models (cassettes) are off for this host's clients; start the server with --allow-scripted to use them".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_outside_the_root_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let inside = root.path().join("a");
        std::fs::create_dir(&inside).unwrap();
        let other = tempfile::tempdir().unwrap();
        let a = Admission {
            root: Some(root.path().canonicalize().unwrap()),
            ..Admission::default()
        };
        assert!(a.directory(inside.to_str().unwrap()).is_ok());
        let e = a.directory(other.path().to_str().unwrap()).unwrap_err();
        assert!(e.contains("outside this host's directory"), "{e}");
        // A link out of the root is judged by where it leads.
        let link = root.path().join("out");
        std::os::unix::fs::symlink(other.path(), &link).unwrap();
        assert!(a.directory(link.to_str().unwrap()).is_err());
        assert!(a.directory("/no/such/dir").is_err());
        assert!(Admission::default().directory("/anywhere").is_ok());
    }
}
