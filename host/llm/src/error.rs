//! Why a model could not be resolved. Raised before any model request; the
//! core turns it into its own error with the same text.

/// A model that cannot be used as named or configured.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelError {
    /// A provider's configuration (or the environment standing in for it)
    /// is wrong: what is wrong and where.
    #[error("{0}")]
    Config(String),
    /// The model cannot be resolved (unknown provider, unreadable cassette,
    /// missing key).
    #[error("model {model}: {reason}")]
    Model { model: String, reason: String },
}

/// Result with [`ModelError`].
pub type Result<T, E = ModelError> = std::result::Result<T, E>;
