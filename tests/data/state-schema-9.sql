-- A state file at schema version 9 as skuferry main (30a5515) writes it: `sqlite3 state.db .dump`
-- (schema and a few rows); .dump leaves out PRAGMA user_version, set at the end.
-- Before the runs' feed (migration 10): three products synced, a bad feed forced through
-- (run 2) and undone (run 3), its undone mark in meta as that version wrote it (the
-- skip token alone), the runs' tokens, the history of each write.
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
INSERT INTO products VALUES('SKU-0000','synced','fc68df919b958df6cae2a3897fffb8ea4383694061f37e79b18499909b41c9c5','{"name":"Product 0","price":0.25,"sku":"SKU-0000"}','p000001',NULL,0,2,1795913333.3689064979,1795913333.5440948009,1795913333.5440924167,NULL,'edceab5889f8815b176f6f696dd5287a',NULL);
INSERT INTO products VALUES('SKU-0001','synced','0eaa13853653072bf653c1e47dce1796c2c73b71da5495df5719e4f323069fa0','{"name":"Product 1","price":1.25,"sku":"SKU-0001"}','p000002',NULL,0,3,1795913333.3689789772,1795913333.5606806278,1795913333.5606775283,NULL,'4942aa153c5c6dc318e3df53c142aa8f',NULL);
INSERT INTO products VALUES('SKU-0002','synced','1a5d1bdd7aed1c95f3e3094eb6f475e50f2b42da77c259c563b602f176226f81','{"name":"Product 2","price":2.25,"sku":"SKU-0002"}','p000003',NULL,0,4,1795913333.3690099716,1795913333.5610556602,1795913333.5610539912,NULL,'fcd6e1dfd7218dc00544b2a337ed948e',NULL);
CREATE TABLE IF NOT EXISTS "intents" (
   "key" TEXT PRIMARY KEY,
   "digest" TEXT NOT NULL,
   "payload" TEXT NOT NULL,
   "run_id" INTEGER,
   "started_at" REAL NOT NULL
);
CREATE TABLE runs (id INTEGER PRIMARY KEY AUTOINCREMENT, started_at REAL NOT NULL, finished_at REAL, status TEXT NOT NULL, exit_code INTEGER, summary TEXT, "kind" TEXT, "undoes" INTEGER, "token" TEXT);
INSERT INTO runs VALUES(1,1795913333.3504571914,1795913333.3964319229,'ok',0,'{"run_id": 1, "created": 3, "updated": 0, "adopted": 0, "unchanged": 0, "rejected": 0, "rows_rejected": 0, "failed": 0, "drift": 0, "gone": 0, "archived": 0, "restored": 0, "duplicates": 0, "skipped": 0, "joins": {}, "rows_without_key": 0, "gone_skipped": false, "requests": {"read": 1, "write": 3}, "requests_by_key": {}, "rate_limited": 0, "duration_s": 0.173, "dry_run": false, "interrupted": false, "status": "ok", "pull": "full", "problems": [], "notes": []}',NULL,NULL,replace('c8827a1336322c40\nfile:91:1795913333223007419:1795913333223007419:2400643:65024','\n',char(10)));
INSERT INTO runs VALUES(2,1795913333.4187345504,1795913333.5051698684,'ok',0,'{"run_id": 2, "created": 0, "updated": 3, "adopted": 0, "unchanged": 0, "rejected": 0, "rows_rejected": 0, "failed": 0, "drift": 0, "gone": 0, "archived": 0, "restored": 0, "duplicates": 0, "skipped": 0, "joins": {}, "rows_without_key": 0, "gone_skipped": false, "requests": {"read": 1, "write": 6}, "requests_by_key": {}, "rate_limited": 0, "duration_s": 0.088, "dry_run": false, "interrupted": false, "status": "ok", "pull": "full", "problems": [], "notes": []}',NULL,NULL,replace('c8827a1336322c40\nfile:96:1795913333417483608:1795913333417483608:2400643:65024','\n',char(10)));
INSERT INTO runs VALUES(3,1795913333.5334517955,1795913333.5642819404,'ok',0,'{"run_id": 3, "undoes": 2, "dry_run": false, "status": "ok", "resumed": false, "products": 3, "put_back": 3, "archived": 0, "already": 0, "left": 0, "listed": 0, "failed": 0, "gone": 0, "not_applied": 0, "requests": {"read": 4, "write": 9}, "duration_s": 0.032, "interrupted": false, "missing": [], "notes": ["the feed run 2 read is refused from now on: the next runs stop (exit 2) until the export or the config changes, or sync --force"], "problems": []}','undo',2,NULL);
CREATE TABLE IF NOT EXISTS "meta" (
   "name" TEXT PRIMARY KEY,
   "value" TEXT
);
INSERT INTO meta VALUES('cms.binding','{"base_url": "http://127.0.0.1:9", "keys": ["8254c329"]}');
INSERT INTO meta VALUES('walked_at','1795913333.3638644');
INSERT INTO meta VALUES('api.last_contact','1795913333.4927888');
INSERT INTO meta VALUES('pull.watermark','2026-11-29T00:48:53.429471+00:00');
INSERT INTO meta VALUES('pull.identity','a68376803632812c');
INSERT INTO meta VALUES('pull.incremental_runs','0');
INSERT INTO meta VALUES('pull.last_full_at','1795913333.429471');
INSERT INTO meta VALUES('undone.2','{"token": "c8827a1336322c40\nfile:96:1795913333417483608:1795913333417483608:2400643:65024", "undo": 3}');
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
CREATE TABLE IF NOT EXISTS "history" (
   "id" INTEGER PRIMARY KEY,
   "run_id" INTEGER,
   "key" TEXT NOT NULL,
   "kind" TEXT NOT NULL,
   "at" REAL NOT NULL,
   "outcome" TEXT NOT NULL,
   "status" INTEGER,
   "error" TEXT,
   "remote_id" TEXT,
   "before" TEXT,
   "after" TEXT,
   "prior" TEXT
);
INSERT INTO history VALUES(1,1,'SKU-0000','create',1795913333.3688302039,'ok',NULL,NULL,'p000001',NULL,'{"name":"Product 0","price":0.25,"sku":"SKU-0000"}',NULL);
INSERT INTO history VALUES(2,1,'SKU-0001','create',1795913333.3689599036,'ok',NULL,NULL,'p000002',NULL,'{"name":"Product 1","price":1.25,"sku":"SKU-0001"}',NULL);
INSERT INTO history VALUES(3,1,'SKU-0002','create',1795913333.3689959048,'ok',NULL,NULL,'p000003',NULL,'{"name":"Product 2","price":2.25,"sku":"SKU-0002"}',NULL);
INSERT INTO history VALUES(4,2,'SKU-0000','update',1795913333.4578404426,'ok',NULL,NULL,'p000001','{"price":0.25}','{"price":25.00}','{"state": "synced", "digest": "fc68df919b958df6cae2a3897fffb8ea4383694061f37e79b18499909b41c9c5", "record_digest": "edceab5889f8815b176f6f696dd5287a"}');
INSERT INTO history VALUES(5,2,'SKU-0001','update',1795913333.4767234325,'ok',NULL,NULL,'p000002','{"price":1.25}','{"price":125.00}','{"state": "synced", "digest": "0eaa13853653072bf653c1e47dce1796c2c73b71da5495df5719e4f323069fa0", "record_digest": "4942aa153c5c6dc318e3df53c142aa8f"}');
INSERT INTO history VALUES(6,2,'SKU-0002','update',1795913333.4768755435,'ok',NULL,NULL,'p000003','{"price":2.25}','{"price":225.00}','{"state": "synced", "digest": "1a5d1bdd7aed1c95f3e3094eb6f475e50f2b42da77c259c563b602f176226f81", "record_digest": "fcd6e1dfd7218dc00544b2a337ed948e"}');
INSERT INTO history VALUES(7,3,'SKU-0000','update',1795913333.5414459704,'ok',NULL,NULL,'p000001','{"price":25.00}','{"price":0.25}','{"state": "synced", "digest": "2433cc94a7b87577a8fd6a4b80f7a4b42607e02ba7ba29b89014a2afe1cb5d43", "record_digest": "913e0f36f17bbfa633bde70d5349e980"}');
INSERT INTO history VALUES(8,3,'SKU-0001','update',1795913333.5526947975,'ok',NULL,NULL,'p000002','{"price":125.00}','{"price":1.25}','{"state": "synced", "digest": "7cd2cf1d0c6cb0ef98a6ead5c05a2d07b74d4a0929a4c7ff00aee5ee70de9888", "record_digest": "1eeada8884b7370dbb7013b0566efe63"}');
INSERT INTO history VALUES(9,3,'SKU-0002','update',1795913333.5528957843,'ok',NULL,NULL,'p000003','{"price":225.00}','{"price":2.25}','{"state": "synced", "digest": "198bef64ebf1237cc06f62da7ff603a79bc4c2c299367539fd3ece741a91a4e2", "record_digest": "2811cb12cb59262831de9fe741e45b80"}');
CREATE TABLE IF NOT EXISTS "shapes" (
   "id" INTEGER PRIMARY KEY,
   "run_id" INTEGER,
   "at" REAL NOT NULL,
   "status" TEXT NOT NULL,
   "digest" TEXT,
   "shape" TEXT NOT NULL,
   "changes" TEXT
);
INSERT INTO shapes VALUES(1,2,1795913333.4970977306,'learned','92a0e5489b3fc4ea523fb896be91482b','{"fields": [{"given": 0, "gone": false, "kind": "column", "looked": 0, "name": "sku", "present": true, "target": "sku"}, {"given": 0, "gone": false, "kind": "column", "looked": 0, "name": "name", "present": true, "target": "name"}, {"given": 0, "gone": false, "kind": "column", "looked": 0, "name": "price", "present": true, "target": "price"}], "header": ["sku", "name", "price"], "key": {"digits": 0, "examples": ["SKU-0000", "SKU-0001", "SKU-0002"], "keys": 3, "leading_zeros": 0, "longest": 8, "lower": 0, "shortest": 8, "upper": 3}, "names": [], "records": 0, "source": "catalog.csv", "version": 1, "whole": true}',NULL);
DELETE FROM sqlite_sequence;
INSERT INTO sqlite_sequence VALUES('runs',3);
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
CREATE INDEX "history_key"
    ON "history" ("key", "id");
CREATE INDEX "history_run"
    ON "history" ("run_id", "key");
COMMIT;
PRAGMA user_version = 9;
