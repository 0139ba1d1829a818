-- A state file at schema version 7 as skuferry main (e2eaab1) writes it: `sqlite3 state.db .dump`
-- (schema and a few rows); .dump leaves out PRAGMA user_version, set at the end.
-- Before the history of writes (migration 8): an applied create, a create in flight, an
-- update journalled and unanswered; the runs table without kind, undoes and token.
PRAGMA foreign_keys=OFF;
BEGIN TRANSACTION;
CREATE TABLE IF NOT EXISTS "products" (
   "key" TEXT PRIMARY KEY,
   "state" TEXT NOT NULL,
   "digest" TEXT,
   "sent" TEXT,
   "remote_id" TEXT,
   "last_error" TEXT,
   "attempts" INTEGER NOT NULL DEFAULT 0,
   "source_line" INTEGER,
   "first_seen" REAL NOT NULL,
   "updated_at" REAL NOT NULL,
   "synced_at" REAL
, "rejected_digest" TEXT, "source_fingerprint" TEXT, "source_line_digest" BLOB);
INSERT INTO products VALUES('SKU-1','synced',NULL,'{"name":"Kettle","sku":"SKU-1"}','101',NULL,0,2,1790000003.0,1790000008.0,1790000004.0,NULL,NULL,NULL);
INSERT INTO products VALUES('SKU-2','pending',NULL,NULL,NULL,NULL,0,3,1790000007.0,1790000007.0,NULL,NULL,NULL,NULL);
CREATE TABLE IF NOT EXISTS "intents" (
   "key" TEXT PRIMARY KEY,
   "digest" TEXT NOT NULL,
   "payload" TEXT NOT NULL,
   "run_id" INTEGER,
   "started_at" REAL NOT NULL
);
INSERT INTO intents VALUES('SKU-2','d2','{"name":"Mug","price":"4.50","sku":"SKU-2"}',1,1790000006.0);
CREATE TABLE runs (id INTEGER PRIMARY KEY AUTOINCREMENT, started_at REAL NOT NULL, finished_at REAL, status TEXT NOT NULL, exit_code INTEGER, summary TEXT);
INSERT INTO runs VALUES(1,1790000001.0,1790000009.0,'ok',0,'{"created": 1}');
CREATE TABLE IF NOT EXISTS "meta" (
   "name" TEXT PRIMARY KEY,
   "value" TEXT
);
INSERT INTO meta VALUES('walked_at','1790000000.0');
CREATE TABLE IF NOT EXISTS "budget_bucket" (
   "tier" TEXT PRIMARY KEY,
   "tokens" REAL NOT NULL,
   "updated_at" REAL NOT NULL,
   "blocked_until" REAL NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS "budget_sends" (
   "tier" TEXT NOT NULL,
   "ts" REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS "dead_letters" (
   "slot" TEXT PRIMARY KEY,
   "key" TEXT,
   "stage" TEXT NOT NULL,
   "reason" TEXT NOT NULL,
   "status" INTEGER,
   "message" TEXT,
   "source" TEXT,
   "line" INTEGER,
   "first_seen" REAL NOT NULL,
   "last_seen" REAL NOT NULL
);
DELETE FROM sqlite_sequence;
INSERT INTO sqlite_sequence VALUES('runs',1);
CREATE INDEX "products_state"
    ON "products" ("state");
CREATE INDEX "budget_sends_tier_ts"
    ON "budget_sends" ("tier", "ts");
CREATE INDEX "products_state_updated"
    ON "products" ("state", "updated_at");
CREATE INDEX "dead_letters_key"
    ON "dead_letters" ("key");
CREATE INDEX "dead_letters_stage"
    ON "dead_letters" ("stage");
COMMIT;
PRAGMA user_version = 7;
