-- A state file at schema version 5 as skuferry main (ec4fbaa) writes it: `sqlite3 state.db .dump`
-- (schema and a few rows); .dump leaves out PRAGMA user_version, set at the end.
PRAGMA foreign_keys=OFF;
BEGIN TRANSACTION;
CREATE TABLE products (
            key TEXT PRIMARY KEY,
            state TEXT NOT NULL,
            digest TEXT,
            sent TEXT,
            remote_id TEXT,
            last_error TEXT,
            attempts INTEGER NOT NULL DEFAULT 0,
            source_line INTEGER,
            first_seen REAL NOT NULL,
            updated_at REAL NOT NULL,
            synced_at REAL
        , rejected_digest TEXT, source_fingerprint TEXT);
INSERT INTO products VALUES('SKU-1','synced','d1','{"name":"Kettle","price":"19.90","sku":"SKU-1"}','101',NULL,0,2,1790000003.0,1790000005.0,1790000004.0,NULL,NULL);
INSERT INTO products VALUES('SKU-2','rejected',NULL,NULL,NULL,'price: must be >= 0',1,3,1790000007.0,1790000007.0,NULL,'d2',NULL);
INSERT INTO products VALUES('SKU-3','pending',NULL,NULL,NULL,NULL,0,4,1790000009.0,1790000009.0,NULL,NULL,NULL);
CREATE TABLE intents (
            key TEXT PRIMARY KEY,
            digest TEXT NOT NULL,
            payload TEXT NOT NULL,
            run_id INTEGER,
            started_at REAL NOT NULL
        );
INSERT INTO intents VALUES('SKU-3','d3','{"name":"Mug","price":"4.50","sku":"SKU-3"}',1,1790000008.0);
CREATE TABLE runs (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            started_at REAL NOT NULL,
            finished_at REAL,
            status TEXT NOT NULL,
            exit_code INTEGER,
            summary TEXT
        );
INSERT INTO runs VALUES(1,1790000001.0,1790000011.0,'ok',0,'{"created": 1, "rejected": 1}');
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
INSERT INTO budget_sends VALUES('write',1790000009.0);
CREATE TABLE dead_letters (
            slot TEXT PRIMARY KEY,
            key TEXT,
            stage TEXT NOT NULL,
            reason TEXT NOT NULL,
            status INTEGER,
            message TEXT,
            source TEXT,
            line INTEGER,
            first_seen REAL NOT NULL,
            last_seen REAL NOT NULL
        );
INSERT INTO dead_letters VALUES('SKU-2','SKU-2','api','price: must be >= 0',422,'price: must be >= 0','catalog.csv',3,1790000006.0,1790000006.0);
INSERT INTO dead_letters VALUES('#5',NULL,'read','line 5: 3 fields, expected 4',NULL,NULL,'catalog.csv',5,1790000010.0,1790000010.0);
DELETE FROM sqlite_sequence;
INSERT INTO sqlite_sequence VALUES('runs',1);
CREATE INDEX products_state ON products(state);
CREATE INDEX budget_sends_tier_ts ON budget_sends(tier, ts);
CREATE INDEX products_state_updated ON products(state, updated_at)
        ;
CREATE INDEX dead_letters_key ON dead_letters(key);
CREATE INDEX dead_letters_stage ON dead_letters(stage)
        ;
COMMIT;
PRAGMA user_version = 5;
