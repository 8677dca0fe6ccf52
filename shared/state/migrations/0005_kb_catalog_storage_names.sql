-- Milvus collection names allow only letters, digits and '_', so a KB name's '-' is stored as '_'
-- (shared/config.storage_name): 'a-b' and 'a_b' would share one collection. One KB per storage name.
-- A database that already holds two such KBs stops here, naming them: one must be dropped (its chunks
-- are in the other's collection) before this release can start.
DO $$
DECLARE
    clashing TEXT;
BEGIN
    SELECT string_agg(names, '; ') INTO clashing FROM (
        SELECT string_agg(name, ', ' ORDER BY name) AS names FROM kb_catalog
        GROUP BY replace(name, '-', '_') HAVING count(*) > 1) AS groups;
    IF clashing IS NOT NULL THEN
        RAISE EXCEPTION 'knowledge bases whose names differ only in - and _ share one vector collection: %', clashing;
    END IF;
END $$;
CREATE UNIQUE INDEX kb_catalog_storage_name ON kb_catalog ((replace(name, '-', '_')));
