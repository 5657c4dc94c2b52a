//! PostgreSQL's errors as the ledger's: a server that cannot be reached or
//! takes no writes is [`LedgerError::Unavailable`] (the step stops, and
//! resumes once it is back); anything else is a storage error, said as the
//! server said it.

use crate::LedgerError;

impl From<tokio_postgres::Error> for LedgerError {
    fn from(e: tokio_postgres::Error) -> LedgerError {
        // The connection went away (the server stopped or the network
        // failed), or the server takes no writes (disk full, read-only, a
        // shutdown under way): the ledger cannot be written now.
        let code = e.code().map(|c| c.code().to_string());
        let unwritable = e.is_closed()
            || std::error::Error::source(&e).is_some_and(|s| s.is::<std::io::Error>())
            || code.as_deref().is_some_and(|c| {
                c.starts_with("08") // connection exception
                    || c.starts_with("53") // insufficient resources (disk full, ...)
                    || c.starts_with("57P") // the server is shutting down
                    || c == "25006" // read-only transaction (a standby)
            });
        if unwritable {
            return LedgerError::Unavailable(format!(
                "the PostgreSQL server is unreachable or takes no writes ({})",
                described(&e)
            ));
        }
        LedgerError::Storage(described(&e))
    }
}

/// What the server said (with its error code), or what failed under it.
fn described(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => match std::error::Error::source(e) {
            Some(source) => format!("{e}: {source}"),
            None => e.to_string(),
        },
    }
}
