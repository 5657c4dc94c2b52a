//! The ledger's schema, as an ordered list of migrations. `PRAGMA
//! user_version` records how many have been applied; each runs once, in a
//! transaction, and a ledger from a newer warden is refused rather than
//! misread.

use rusqlite::Connection;

use super::Result;
use crate::LedgerError;

/// Migration `i` takes the schema from version `i` to `i + 1`.
pub const MIGRATIONS: &[&str] = &[
    // 1: sessions, messages, parts, the part timeline, runner leases, the audit trail.
    // Part and timeline bodies are the part's JSON without its ids (columns).
    r#"
    CREATE TABLE session (
        id          TEXT PRIMARY KEY,
        title       TEXT NOT NULL,
        directory   TEXT NOT NULL,
        permission  TEXT NOT NULL DEFAULT '[]',
        created_at  INTEGER NOT NULL,
        updated_at  INTEGER NOT NULL
    );
    -- Rows live in their primary key's order (WITHOUT ROWID): a session's
    -- messages, parts, timeline and audit are read in that order, and no
    -- second index repeats the ids.
    CREATE TABLE message (
        session_id  TEXT NOT NULL REFERENCES session(id) ON DELETE CASCADE,
        id          TEXT NOT NULL,
        role        TEXT NOT NULL,
        info        TEXT NOT NULL,
        created_at  INTEGER NOT NULL,
        updated_at  INTEGER NOT NULL,
        PRIMARY KEY (session_id, id)
    ) WITHOUT ROWID;
    CREATE TABLE part (
        session_id  TEXT NOT NULL,
        message_id  TEXT NOT NULL,
        id          TEXT NOT NULL,
        kind        TEXT NOT NULL,
        call_id     TEXT,
        status      TEXT,
        body        TEXT NOT NULL,
        updated_at  INTEGER NOT NULL,
        PRIMARY KEY (session_id, message_id, id),
        FOREIGN KEY (session_id, message_id) REFERENCES message(session_id, id) ON DELETE CASCADE
    ) WITHOUT ROWID;
    -- Every state change of a tool call (pending, running, completed or
    -- error) with its time: the replayable history of each call. Bodies
    -- keep states, not content (no text, no tool output): content is written
    -- once, in the part row, where a terminal state never changes again.
    -- `seq` counts within the session.
    CREATE TABLE part_event (
        session_id  TEXT NOT NULL,
        seq         INTEGER NOT NULL,
        message_id  TEXT NOT NULL,
        part_id     TEXT NOT NULL,
        kind        TEXT NOT NULL,
        call_id     TEXT,
        status      TEXT,
        at          INTEGER NOT NULL,
        body        TEXT NOT NULL,
        PRIMARY KEY (session_id, seq)
    ) WITHOUT ROWID;
    -- One runner per session, across every process sharing this file.
    CREATE TABLE runner_lease (
        session_id  TEXT PRIMARY KEY,
        holder      TEXT NOT NULL,
        expires_at  INTEGER NOT NULL
    );
    -- Every guest call and permission decision at the host boundary.
    -- `seq` counts within the session.
    CREATE TABLE audit (
        session_id  TEXT NOT NULL,
        seq         INTEGER NOT NULL,
        message_id  TEXT,
        call_id     TEXT,
        at          INTEGER NOT NULL,
        stage       TEXT NOT NULL,
        subject     TEXT NOT NULL,
        plugin_hash TEXT,
        decision    TEXT NOT NULL,
        rule        TEXT,
        duration_us INTEGER,
        outcome     TEXT,
        PRIMARY KEY (session_id, seq)
    ) WITHOUT ROWID;
    "#,
    // 2: message headers in OpenCode's shapes (`sessionID`, `parentID`,
    // `providerID` / `modelID`, `time: {created, completed}`, `mode`, `path`,
    // errors as `{name, data}`), rewritten in place so sessions written
    // before keep reading. Parts need nothing: their old names are aliases.
    r#"
    UPDATE message SET info = json_set(info, '$.error', json_object(
        'name', CASE json_extract(info, '$.error.name')
                  WHEN 'Provider' THEN 'APIError'
                  WHEN 'ContextOverflow' THEN 'ContextOverflowError'
                  WHEN 'Aborted' THEN 'MessageAbortedError'
                  ELSE 'MessageInterruptedError' END,
        'data', json_object(
            'message', json_extract(info, '$.error.message'),
            'statusCode', json_extract(info, '$.error.status'))))
    WHERE json_extract(info, '$.error.name') IN ('Provider', 'ContextOverflow', 'Aborted', 'Interrupted');
    UPDATE message SET info = json_set(
        json_remove(info, '$.session_id', '$.created', '$.model'),
        '$.sessionID', json_extract(info, '$.session_id'),
        '$.time', json_object('created', json_extract(info, '$.created')),
        '$.model', json_object(
            'providerID', json_extract(info, '$.model.provider'),
            'modelID', json_extract(info, '$.model.model')))
    WHERE role = 'user' AND json_extract(info, '$.session_id') IS NOT NULL;
    UPDATE message SET info = json_set(
        json_remove(info, '$.session_id', '$.parent_id', '$.model', '$.created', '$.completed'),
        '$.sessionID', json_extract(info, '$.session_id'),
        '$.parentID', json_extract(info, '$.parent_id'),
        '$.mode', json_extract(info, '$.agent'),
        '$.providerID', json_extract(info, '$.model.provider'),
        '$.modelID', json_extract(info, '$.model.model'),
        '$.path', json_object(
            'cwd', (SELECT directory FROM session WHERE session.id = message.session_id),
            'root', (SELECT directory FROM session WHERE session.id = message.session_id)),
        '$.time', json_object(
            'created', json_extract(info, '$.created'),
            'completed', json_extract(info, '$.completed')))
    WHERE role = 'assistant' AND json_extract(info, '$.session_id') IS NOT NULL;
    "#,
    // 3: what a step costs on disk. Sessions and messages get integer keys
    // that every other row refers to (a text id is 26 bytes, a key 1 to 3);
    // a header's JSON leaves out its role and ids and a part's its type (all
    // columns); the part kind is a small code. A tool call's timeline rows
    // keep only what each state adds beyond the defaults; the audit trail
    // keeps one row per tool call, its stages as compact entries, with the
    // guests' content hashes written once in `guest`. Existing rows are
    // carried over as they are, so ledgers written before stay readable.
    r#"
    CREATE TABLE session_v2 (
        key         INTEGER PRIMARY KEY,
        id          TEXT NOT NULL UNIQUE,
        title       TEXT NOT NULL,
        directory   TEXT NOT NULL,
        permission  TEXT NOT NULL DEFAULT '[]',
        created_at  INTEGER NOT NULL,
        updated_at  INTEGER NOT NULL
    );
    INSERT INTO session_v2 (id, title, directory, permission, created_at, updated_at)
        SELECT id, title, directory, permission, created_at, updated_at FROM session ORDER BY id;

    CREATE TABLE message_v2 (
        key         INTEGER PRIMARY KEY,
        session     INTEGER NOT NULL REFERENCES session_v2(key) ON DELETE CASCADE,
        id          TEXT NOT NULL,
        role        TEXT NOT NULL,
        info        TEXT NOT NULL,
        created_at  INTEGER NOT NULL,
        updated_at  INTEGER NOT NULL
    );
    INSERT INTO message_v2 (session, id, role, info, created_at, updated_at)
        SELECT s.key, m.id, m.role, json_remove(m.info, '$.role', '$.id', '$.sessionID', '$.session_id'),
               m.created_at, m.updated_at
        FROM message m JOIN session_v2 s ON s.id = m.session_id ORDER BY m.session_id, m.id;
    CREATE UNIQUE INDEX message_by_id ON message_v2 (session, id);

    -- kind: 1 text, 2 reasoning, 3 tool, 4 step-start, 5 step-finish, 6 compaction.
    CREATE TABLE part_v2 (
        message     INTEGER NOT NULL REFERENCES message_v2(key) ON DELETE CASCADE,
        id          TEXT NOT NULL,
        kind        INTEGER NOT NULL,
        body        TEXT NOT NULL,
        PRIMARY KEY (message, id)
    ) WITHOUT ROWID;
    INSERT INTO part_v2 (message, id, kind, body)
        SELECT mm.key, p.id,
               CASE p.kind WHEN 'text' THEN 1 WHEN 'reasoning' THEN 2 WHEN 'tool' THEN 3
                           WHEN 'step-start' THEN 4 WHEN 'step-finish' THEN 5 ELSE 6 END,
               json_remove(p.body, '$.type')
        FROM part p
        JOIN session_v2 s ON s.id = p.session_id
        JOIN message_v2 mm ON mm.session = s.key AND mm.id = p.message_id;

    -- status: 0 pending, 1 running, 2 completed, 3 error. `adds`: the state's
    -- fields beyond its status and their defaults (NULL when none).
    CREATE TABLE part_event_v2 (
        session     INTEGER NOT NULL,
        seq         INTEGER NOT NULL,
        message     INTEGER NOT NULL,
        part        TEXT NOT NULL,
        status      INTEGER NOT NULL,
        at          INTEGER NOT NULL,
        adds        TEXT,
        PRIMARY KEY (session, seq)
    ) WITHOUT ROWID;
    INSERT INTO part_event_v2 (session, seq, message, part, status, at, adds)
        SELECT s.key, e.seq, mm.key, e.part_id,
               CASE e.status WHEN 'pending' THEN 0 WHEN 'running' THEN 1 WHEN 'completed' THEN 2 ELSE 3 END,
               e.at, json_remove(json_extract(e.body, '$.state'), '$.status')
        FROM part_event e
        JOIN session_v2 s ON s.id = e.session_id
        JOIN message_v2 mm ON mm.session = s.key AND mm.id = e.message_id;

    CREATE TABLE guest (
        key         INTEGER PRIMARY KEY,
        hash        TEXT NOT NULL UNIQUE
    );
    INSERT INTO guest (hash)
        SELECT DISTINCT plugin_hash FROM audit WHERE plugin_hash IS NOT NULL;

    -- One row per tool call (or per decision outside one). `entries`: a JSON
    -- array of [stage, subject, decision, rule, guest, duration_us, outcome,
    -- ms after `at`], trailing nulls left out.
    CREATE TABLE audit_v2 (
        session     INTEGER NOT NULL,
        seq         INTEGER NOT NULL,
        message     INTEGER,
        call_id     TEXT,
        at          INTEGER NOT NULL,
        entries     TEXT NOT NULL,
        PRIMARY KEY (session, seq)
    ) WITHOUT ROWID;
    INSERT INTO audit_v2 (session, seq, message, call_id, at, entries)
        SELECT s.key, a.seq,
               (SELECT mm.key FROM message_v2 mm WHERE mm.session = s.key AND mm.id = a.message_id),
               a.call_id, a.at,
               json_array(json_array(a.stage, a.subject, a.decision, a.rule,
                                     (SELECT g.key FROM guest g WHERE g.hash = a.plugin_hash),
                                     a.duration_us, a.outcome))
        FROM audit a JOIN session_v2 s ON s.id = a.session_id;

    DROP TABLE audit;
    DROP TABLE part_event;
    DROP TABLE part;
    DROP TABLE message;
    DROP TABLE session;
    ALTER TABLE session_v2 RENAME TO session;
    ALTER TABLE message_v2 RENAME TO message;
    ALTER TABLE part_v2 RENAME TO part;
    ALTER TABLE part_event_v2 RENAME TO part_event;
    ALTER TABLE audit_v2 RENAME TO audit;
    "#,
    // 4: a lease's epoch, new each time the lease changes hands. A runner's
    // writes check it in their own transaction, so a runner whose lease was
    // taken over (paused past its expiry, say) writes nothing more.
    r#"
    ALTER TABLE runner_lease ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0;
    "#,
    // 5: the session's own phases besides tool states (model request, first
    // token, step finish, retry wait), so a trace shows where time went.
    // Integer keys and a numeric kind: three marks a step cost about 60 bytes.
    r#"
    CREATE TABLE phase (
        session     INTEGER NOT NULL,
        seq         INTEGER NOT NULL,
        message     INTEGER,
        at          INTEGER NOT NULL,
        kind        INTEGER NOT NULL,
        attempt     INTEGER,
        until_at    INTEGER,
        detail      TEXT,
        PRIMARY KEY (session, seq)
    ) WITHOUT ROWID;
    "#,
    // 6: the prompt queue: prompts any process accepted, answered in number
    // order by whichever holds the session's lease (`session/prompt_queue.rs`).
    r#"
    CREATE TABLE prompt_queue (
        number      INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id  TEXT NOT NULL,
        state       TEXT NOT NULL,
        detail      TEXT,
        body        TEXT NOT NULL,
        accepted_at INTEGER NOT NULL,
        settled_at  INTEGER
    );
    CREATE INDEX prompt_queue_by_session ON prompt_queue (session_id, state, number);
    "#,
    // 7: no table changes. Message headers leave out what their session and
    // the user message they answer already say (`header.rs`), and audit rows
    // store their stage, decision and common outcomes as numbers
    // (`codec.rs`). Such rows read back whole here; an older warden would
    // misread them, so the version goes up and it refuses the file instead.
    "",
    // 8: no table changes. A running call's timeline row keeps no arguments
    // (they are its part row's; a finishing row keeps them as `was` where a
    // hook rewrote them) and a completed one no title (`timeline.rs`). An
    // older warden would replay such calls with empty arguments.
    "",
    // 9: a part's body over `messages::INLINE_MOST` bytes lives in
    // `part_body`, cut into chunks of `messages::CHUNK` bytes under
    // consecutive keys (one row from `messages::ONE_ROW_FROM` bytes); its
    // part row keeps the first key, the count and an empty body. `part` keeps its rows in its key's order (WITHOUT ROWID),
    // where a row over about 1,000 bytes spills onto an overflow page of its
    // own, mostly empty; and a rowid table fits one 2 KB row per 4 KiB page.
    // Chunks of 1,000 bytes fill its pages. The triggers drop the chunks a
    // part no longer names (rewritten, or deleted with its message or
    // session). Bodies written before stay in their rows and read the same.
    r#"
    CREATE TABLE part_body (
        key    INTEGER PRIMARY KEY,
        chunk  BLOB NOT NULL
    );
    ALTER TABLE part ADD COLUMN body_key INTEGER;
    ALTER TABLE part ADD COLUMN body_chunks INTEGER;
    CREATE TRIGGER part_body_replaced AFTER UPDATE OF body_key ON part
        WHEN old.body_key IS NOT NULL AND old.body_key IS NOT new.body_key
        BEGIN DELETE FROM part_body WHERE key >= old.body_key AND key < old.body_key + old.body_chunks; END;
    CREATE TRIGGER part_body_deleted AFTER DELETE ON part
        WHEN old.body_key IS NOT NULL
        BEGIN DELETE FROM part_body WHERE key >= old.body_key AND key < old.body_key + old.body_chunks; END;
    "#,
];

/// Bring the schema up to date (refusing a ledger it cannot write).
pub fn migrate(conn: &mut Connection, path: &str) -> Result<()> {
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    let supported = MIGRATIONS.len() as i64;
    if version > supported {
        return Err(LedgerError::TooNew {
            path: path.to_string(),
            found: version,
            supported,
        });
    }
    // Before 0.1, schema 1 keyed messages by their id alone; such a file
    // would fail on its first write, so it is refused with a way out.
    let keyed_by_session: bool = conn.query_row(
        "SELECT COUNT(*) = 0 OR SUM(name = 'session_id' AND pk = 1) = 1 FROM pragma_table_info('message')",
        [],
        |r| r.get(0),
    )?;
    if version == 1 && !keyed_by_session {
        return Err(LedgerError::PreRelease {
            path: path.to_string(),
        });
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        let tx = conn.transaction()?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", (i + 1) as i64)?;
        tx.commit()?;
    }
    if version < supported {
        // A migration copies tables and drops the old ones: give their pages back.
        conn.execute_batch("VACUUM")?;
    }
    Ok(())
}
