/*-------------------------------------------------------------------------
 *
 * dedup.c
 *	  Module entry point of the dedup extension: it defines the parameters,
 *	  wires the shared-memory hooks to the subsystems that own shared memory
 *	  (sweeper_state.c, claim_stats.c) and registers the launcher; and the
 *	  catalog lookups shared by the extension's parts.
 *
 * The library can be loaded on demand (the first dedup_claim() call in a
 * backend) or through shared_preload_libraries; claims work either way.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/indexing.h"
#include "catalog/pg_extension.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/rel.h"

#include "dedup.h"

#if PG_VERSION_NUM >= 180000
PG_MODULE_MAGIC_EXT(
					.name = "dedup",
					.version = "1.0"
);
#else
PG_MODULE_MAGIC;
#endif

void		_PG_init(void);

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* shmem_request_hook: each subsystem reserves its own shared memory */
static void
shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	dedup_sweeper_shmem_request();
	dedup_claim_stats_shmem_request();
}

/* shmem_startup_hook: each subsystem creates or attaches to its own */
static void
shmem_startup(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	dedup_sweeper_shmem_startup();
	dedup_claim_stats_shmem_startup();
}

/*
 * Loaded on demand, the library defines its parameters and nothing else.
 * Preloaded, it also sets up the shared memory of the sweeper and of the
 * claim counters, and registers the launcher -- except in binary-upgrade
 * mode, where nothing may be written.
 */
void
_PG_init(void)
{
	dedup_define_gucs();

	if (!process_shared_preload_libraries_in_progress || IsBinaryUpgrade)
		return;

	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = shmem_startup;

	dedup_register_launcher();
}

/*
 * The schema the dedup extension is installed in, in the current database.
 *
 * Every object of the extension is reached through this schema, never
 * through the caller's search_path.  Returns InvalidOid, or raises an error
 * if !missing_ok, when the extension is not installed.
 */
Oid
dedup_extension_schema(bool missing_ok)
{
	Relation	rel;
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tuple;
	Oid			schema = InvalidOid;

	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_extension_extname, BTEqualStrategyNumber,
				F_NAMEEQ, CStringGetDatum("dedup"));
	scan = systable_beginscan(rel, ExtensionNameIndexId, true, NULL, 1, &key);
	tuple = systable_getnext(scan);
	if (HeapTupleIsValid(tuple))
		schema = ((Form_pg_extension) GETSTRUCT(tuple))->extnamespace;
	systable_endscan(scan);
	table_close(rel, AccessShareLock);

	if (!OidIsValid(schema) && !missing_ok)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("extension \"dedup\" is not installed in this database"),
				 errhint("Run CREATE EXTENSION dedup.")));
	return schema;
}
