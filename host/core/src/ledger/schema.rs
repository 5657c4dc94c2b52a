//! The ledger's schema, as an ordered list of migrations. `PRAGMA
//! user_version` records how many have been applied; each runs once, in a
//! transaction, and a ledger from a newer warden is refused rather than
//! misread.

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
    // 3: the session's own phases besides tool states (model request, first
    // token, step finish, retry wait), so a trace shows where time went.
    r#"
    CREATE TABLE phase (
        session_id  TEXT NOT NULL,
        seq         INTEGER NOT NULL,
        message_id  TEXT,
        at          INTEGER NOT NULL,
        kind        TEXT NOT NULL,
        detail      TEXT,
        PRIMARY KEY (session_id, seq)
    ) WITHOUT ROWID;
    "#,
];
