//! The SQLite store's tables, and the migrations that bring a file made by an older relay up to
//! them (in place, keeping its rows).

use rusqlite::Connection;

use super::StoreError;

pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL DEFAULT 'default',
    created_at INTEGER NOT NULL,
    expires_at INTEGER,
    status TEXT NOT NULL,
    response TEXT NOT NULL,
    input TEXT NOT NULL,
    turns TEXT,
    log BLOB
);
CREATE TABLE IF NOT EXISTS events (
    response_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    offset_ms INTEGER NOT NULL,
    kind TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (response_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS journal (
    response_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    offset_ms INTEGER NOT NULL,
    kind TEXT NOT NULL,
    data TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS items (
    tenant TEXT NOT NULL DEFAULT 'default',
    id TEXT NOT NULL,
    response_id TEXT NOT NULL,
    item TEXT NOT NULL,
    PRIMARY KEY (tenant, id)
);
CREATE INDEX IF NOT EXISTS items_by_response ON items(response_id);
CREATE TABLE IF NOT EXISTS conversations (
    tenant TEXT NOT NULL,
    id TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    metadata TEXT NOT NULL,
    PRIMARY KEY (tenant, id)
);
CREATE TABLE IF NOT EXISTS conversation_items (
    tenant TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    item_id TEXT,
    item TEXT NOT NULL,
    PRIMARY KEY (tenant, conversation_id, seq)
);
CREATE INDEX IF NOT EXISTS responses_by_expiry ON responses(expires_at);
CREATE TABLE IF NOT EXISTS usage (
    tenant TEXT NOT NULL,
    day TEXT NOT NULL,
    model TEXT NOT NULL,
    runs INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    mcp_calls INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, day, model)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS disk_probe (bytes BLOB);
";

/// A database made before tenants existed: its rows go to the default tenant (`responses` gets
/// a `tenant` column; `items`, keyed by item id alone, is rebuilt keyed by (tenant, id)); one
/// made before runs kept their model turns' usage gets a `turns` column (null for its runs). One
/// made before the usage tallies gets the `usage` table from [`SCHEMA`] itself (`IF NOT EXISTS`,
/// run at every start), empty: runs ended before it are not counted.
pub(super) fn migrate(c: &Connection) -> Result<(), StoreError> {
    let has = |table: &str, column: &str| -> Result<bool, StoreError> {
        let n: i64 = c.query_row(
            &format!("SELECT COUNT(*) FROM pragma_table_info('{table}') WHERE name = ?1"),
            [column],
            |r| r.get(0),
        )?;
        Ok(n > 0)
    };
    if !has("responses", "tenant")? {
        c.execute_batch(
            "ALTER TABLE responses ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';",
        )?;
    }
    if !has("responses", "turns")? {
        c.execute_batch("ALTER TABLE responses ADD COLUMN turns TEXT;")?;
    }
    if !has("responses", "log")? {
        c.execute_batch("ALTER TABLE responses ADD COLUMN log BLOB;")?;
    }
    if !has("items", "tenant")? {
        c.execute_batch(
            "BEGIN;
             CREATE TABLE items_by_tenant (
                 tenant TEXT NOT NULL DEFAULT 'default',
                 id TEXT NOT NULL,
                 response_id TEXT NOT NULL,
                 item TEXT NOT NULL,
                 PRIMARY KEY (tenant, id)
             );
             INSERT INTO items_by_tenant (tenant, id, response_id, item)
                 SELECT 'default', id, response_id, item FROM items;
             DROP TABLE items;
             ALTER TABLE items_by_tenant RENAME TO items;
             CREATE INDEX IF NOT EXISTS items_by_response ON items(response_id);
             COMMIT;",
        )?;
    }
    Ok(())
}
