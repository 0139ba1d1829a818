-- A state file at schema version 1 as skuferry main (ec4fbaa) writes it: `sqlite3 state.db .dump`
-- (schema and a few rows); .dump leaves out PRAGMA user_version, set at the end.
PRAGMA foreign_keys=OFF;
BEGIN TRANSACTION;
CREATE TABLE products (
            key TEXT PRIMARY KEY,
            state TEXT NOT NULL,
            digest TEXT,
            payload TEXT,
            remote_id TEXT,
            last_error TEXT,
            attempts INTEGER NOT NULL DEFAULT 0,
            source_line INTEGER,
            first_seen REAL NOT NULL,
            updated_at REAL NOT NULL,
            synced_at REAL
        );
INSERT INTO products VALUES('SKU-1','synced','d1','{"name":"Kettle","sku":"SKU-1"}','101',NULL,0,2,1790000000.0,1790000001.0,1790000001.0);
INSERT INTO products VALUES('SKU-2','rejected',NULL,NULL,NULL,'price: must be >= 0',1,3,1790000002.0,1790000003.0,NULL);
CREATE TABLE intents (
            key TEXT PRIMARY KEY,
            digest TEXT NOT NULL,
            payload TEXT NOT NULL,
            run_id INTEGER,
            started_at REAL NOT NULL
        );
INSERT INTO intents VALUES('SKU-3','d3','{"name":"Mug","sku":"SKU-3"}',1,1790000004.0);
CREATE TABLE runs (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            started_at REAL NOT NULL,
            finished_at REAL,
            status TEXT NOT NULL,
            exit_code INTEGER,
            summary TEXT
        );
INSERT INTO runs VALUES(1,1790000000.0,1790000005.0,'ok',0,'{"created": 1}');
CREATE TABLE meta (
            name TEXT PRIMARY KEY,
            value TEXT
        );
INSERT INTO meta VALUES('walked_at','1790000000.0');
CREATE TABLE budget_bucket (
            tier TEXT PRIMARY KEY,
            tokens REAL NOT NULL,
            updated_at REAL NOT NULL,
            blocked_until REAL NOT NULL DEFAULT 0
        );
INSERT INTO budget_bucket VALUES('write',12.5,1790000010.0,0.0);
CREATE TABLE budget_sends (
            tier TEXT NOT NULL,
            ts REAL NOT NULL
        );
DELETE FROM sqlite_sequence;
INSERT INTO sqlite_sequence VALUES('runs',1);
CREATE INDEX products_state ON products(state);
CREATE INDEX budget_sends_tier_ts ON budget_sends(tier, ts);
COMMIT;
PRAGMA user_version = 1;
