-- A state file at schema version 6 as skuferry main (98a12f8) writes it: `sqlite3 state.db .dump`
-- (schema and a few rows); .dump leaves out PRAGMA user_version, set at the end.
-- Keys as the source spelled them: some are in Unicode NFD (E + U+0301, not É), and two
-- products are held under both spellings of one key (migration 7 makes keys NFC).
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
INSERT INTO products VALUES('CRÈME-002','remote_only',NULL,NULL,'202',NULL,0,NULL,1790000003.0,1790000003.0,NULL,NULL,NULL,NULL);
INSERT INTO products VALUES('SKU-1','synced','d520f1c371f6e4367aa5716729e1ac802d6e62ca1de3378732e5b15d17690214','{"name":"Kettle","sku":"SKU-1"}','1',NULL,0,2,1790000005.0,1790000007.0,1790000006.0,NULL,NULL,NULL);
INSERT INTO products VALUES('CAFÉ-001','synced','e740cb49d0aad9efc0005108cace75470f5a00363704cd8abff204bdf259dbfa','{"name":"Coffee","sku":"CAFÉ-001"}','101',NULL,0,3,1790000009.0,1790000011.0,1790000010.0,NULL,NULL,NULL);
INSERT INTO products VALUES('CRÈME-002','synced','5fb18f8818d2f1a4f73985b0f92fdae9af02c165294376f1c461cbf0c2d5ef60','{"name":"Cream","sku":"CRÈME-002"}','102',NULL,0,4,1790000013.0,1790000015.0,1790000014.0,NULL,NULL,NULL);
INSERT INTO products VALUES('ÅNGSTRÖM-003','synced','120c4edf82516d75b68e7507d7b78ca9fe029ef864095a568ce6488538f3b7c4','{"name":"Unit","sku":"ÅNGSTRÖM-003"}','103',NULL,0,5,1790000017.0,1790000019.0,1790000018.0,NULL,NULL,NULL);
INSERT INTO products VALUES('ÅNGSTRÖM-003','gone',NULL,NULL,NULL,NULL,1,6,1790000021.0,1790000022.0,NULL,'779cfe66068a288eb62d80b3c9c7c7fcb5efa1c0c57000f8388d00c171cf60d2',NULL,NULL);
INSERT INTO products VALUES('NOËL-004','pending',NULL,NULL,NULL,NULL,0,7,1790000024.0,1790000024.0,NULL,NULL,NULL,NULL);
CREATE TABLE IF NOT EXISTS "intents" (
   "key" TEXT PRIMARY KEY,
   "digest" TEXT NOT NULL,
   "payload" TEXT NOT NULL,
   "run_id" INTEGER,
   "started_at" REAL NOT NULL
);
INSERT INTO intents VALUES('NOËL-004','5a9fa921c2557d90eaa1c6ab532b5010fd71c241655c887b206fd1c2c12b0807','{"name":"Tree","sku":"NOËL-004"}',1,1790000023.0);
CREATE TABLE runs (id INTEGER PRIMARY KEY AUTOINCREMENT, started_at REAL NOT NULL, finished_at REAL, status TEXT NOT NULL, exit_code INTEGER, summary TEXT);
INSERT INTO runs VALUES(1,1790000001.0,1790000027.0,'ok',0,'{"created": 4}');
CREATE TABLE IF NOT EXISTS "meta" (
   "name" TEXT PRIMARY KEY,
   "value" TEXT
);
INSERT INTO meta VALUES('walked_at','1790000002.0');
INSERT INTO meta VALUES('lane.CAFÉ-001','1790000026.0');
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
INSERT INTO dead_letters VALUES('ÉTÉ-005','ÉTÉ-005','map','price: not a number',NULL,NULL,'catalog.csv',8,1790000025.0,1790000025.0);
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
PRAGMA user_version = 6;
