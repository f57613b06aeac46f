/*-------------------------------------------------------------------------
 *
 * colocated_sweep.c
 *	  Retention and storage figures of the colocated records tables on a
 *	  Citus coordinator (colocated.c): their sweep with the windows of
 *	  dedup_retention, by dedup_sweep_colocated() and the coordinator's
 *	  sweeper (sweeper.c), and dedup_colocated_storage().
 *
 * Both run SQL through SPI, as Citus's planner must reach every shard:
 * statements built from the table's quoted, qualified name, every function
 * and operator qualified.  This is how the records tables, distributed, are
 * deleted from (here, and by dedup_forget_routed); the extension's own
 * tables are deleted from by TID through their indexes (tid_delete.c).  Each table is swept and counted as its owner,
 * as VACUUM and REFRESH MATERIALIZED VIEW run as the table's owner: in a
 * security-restricted operation, with settings that end with it (a new GUC
 * nest level) and search_path pg_catalog, pg_temp; Citus connects to the
 * workers as the owner too.  Whatever code of a table's owner the
 * statements could reach there (a trigger put on a shard on a worker) acts
 * with the owner's rights only, never the sweeper's or the caller's; and a
 * table that carries triggers, rules or row security is refused before
 * each sweep and count (its shape is checked again, as a claim checks it).
 * The shape and the owner are the table's own: one table refused, or
 * failing, does not stop the others (each in a subtransaction here, in a
 * transaction of its own in the sweeper).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/table.h"
#include "access/xact.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "audit.h"
#include "citus/citus.h"
#include "retention/retention.h"
#include "tables/relations.h"

PG_FUNCTION_INFO_V1(dedup_sweep_colocated);
PG_FUNCTION_INFO_V1(dedup_colocated_storage);

/* the user and settings a sweep or count of one table leaves */
typedef struct ColocatedAsOwner
{
	Oid			save_userid;
	int			save_sec_context;
	int			save_nestlevel;
} ColocatedAsOwner;

/*
 * Lock records in lockmode and check its shape again
 * (dedup_colocated_check_table()), then become its owner, in a
 * security-restricted operation, with a new GUC nest level and a
 * search_path of pg_catalog, pg_temp only (what the table's code sets ends
 * with as_owner_end(), or the transaction's abort, which restores both),
 * and connect to SPI.  Returns the table's qualified name, read with the
 * table locked (a table dropped meanwhile is an error here, not a name
 * that is gone).
 */
static char *
as_owner_begin(Oid records, LOCKMODE lockmode, ColocatedAsOwner *state)
{
	char	   *name = dedup_colocated_check_table(records, lockmode);

	GetUserIdAndSecContext(&state->save_userid, &state->save_sec_context);
	SetUserIdAndSecContext(dedup_table_owner(records),
						   state->save_sec_context |
						   SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	state->save_nestlevel = NewGUCNestLevel();
	(void) set_config_option("search_path", "pg_catalog, pg_temp",
							 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE,
							 true, 0, false);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	return name;
}

/* Finish SPI, back to the user and the settings of before as_owner_begin(). */
static void
as_owner_end(const ColocatedAsOwner *state)
{
	SPI_finish();
	AtEOXact_GUC(false, state->save_nestlevel);
	SetUserIdAndSecContext(state->save_userid, state->save_sec_context);
}

/*
 * Delete the expired rows of the registered records table records, with
 * the windows of dedup_retention (the retention rule of rule.c, each
 * consumer's latest claim read from the whole distributed table), as the
 * table's owner, after checking its shape again (as_owner_begin()); return
 * how many.  One distributed DELETE per consumer with expired rows, which
 * Citus runs on every shard at once: it cannot be bounded (no LIMIT on a
 * distributed table).  The caller holds a snapshot.
 */
uint64
dedup_colocated_sweep_table(const DedupRelations *rels, Oid records)
{
	char	   *name;
	StringInfoData sql;
	Oid			argtypes[2] = {TEXTOID, TIMESTAMPTZOID};
	SPITupleTable *consumers;
	uint64		nconsumers;
	uint64		total = 0;
	ColocatedAsOwner owner;
	int			rc;

	name = as_owner_begin(records, RowExclusiveLock, &owner);
	initStringInfo(&sql);
	appendStringInfo(&sql,
					 "SELECT r.consumer, pg_catalog.max(r.processed_at) FROM %s r GROUP BY r.consumer",
					 name);
	rc = SPI_execute(sql.data, false, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "listing the consumers of \"%s\" failed: %s", name,
			 SPI_result_code_string(rc));
	consumers = SPI_tuptable;
	nconsumers = SPI_processed;
	resetStringInfo(&sql);
	appendStringInfo(&sql,
					 "DELETE FROM %s r WHERE r.consumer OPERATOR(pg_catalog.=) $1 "
					 "AND r.processed_at OPERATOR(pg_catalog.<) $2", name);
	for (uint64 i = 0; i < nconsumers; i++)
	{
		bool		isnull;
		Datum		values[2];
		TimestampTz cutoff;
		text	   *consumer;

		CHECK_FOR_INTERRUPTS();
		values[0] = SPI_getbinval(consumers->vals[i], consumers->tupdesc, 1, &isnull);
		if (isnull)
			continue;
		consumer = DatumGetTextPP(values[0]);
		values[1] = SPI_getbinval(consumers->vals[i], consumers->tupdesc, 2, &isnull);
		if (isnull ||
			!dedup_consumer_cutoff(rels, consumer, DatumGetTimestampTz(values[1]),
								   &cutoff))
			continue;
		values[1] = TimestampTzGetDatum(cutoff);
		rc = SPI_execute_with_args(sql.data, 2, argtypes, values, NULL, false, 0);
		if (rc != SPI_OK_DELETE)
			elog(ERROR, "sweeping \"%s\" failed: %s", name, SPI_result_code_string(rc));
		if (SPI_processed > 0)
			dedup_audit_sweep(consumer, cutoff, SPI_processed);
		total += SPI_processed;
	}
	as_owner_end(&owner);
	return total;
}

/* what is done to one table by colocated_each() */
typedef void (*ColocatedTableFunc) (const DedupRelations *rels, Oid records,
									void *arg);

/*
 * Run func for each table of tables, each in a subtransaction of its own:
 * a table that fails (refused, unreadable, a worker down) is rolled back
 * and named in a WARNING (what: "sweep", "count"), and the others go on.
 * A cancel (or statement_timeout) stops them all.
 */
static void
colocated_each(const char *what, const DedupRelations *rels, List *tables,
			   ColocatedTableFunc func, void *arg)
{
	MemoryContext context = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	ListCell   *lc;

	foreach(lc, tables)
	{
		Oid			records = lfirst_oid(lc);
		char	   *name = get_rel_name(records);

		BeginInternalSubTransaction(NULL);
		MemoryContextSwitchTo(context);
		PG_TRY();
		{
			func(rels, records, arg);
			ReleaseCurrentSubTransaction();
			MemoryContextSwitchTo(context);
			CurrentResourceOwner = owner;
		}
		PG_CATCH();
		{
			ErrorData  *edata;

			MemoryContextSwitchTo(context);
			edata = CopyErrorData();
			FlushErrorState();
			RollbackAndReleaseCurrentSubTransaction();
			MemoryContextSwitchTo(context);
			CurrentResourceOwner = owner;
			if (edata->sqlerrcode == ERRCODE_QUERY_CANCELED)
				ReThrowError(edata);
			ereport(WARNING,
					(errcode(edata->sqlerrcode),
					 errmsg("dedup could not %s colocated records table \"%s\": %s",
							what, name ? name : "?", edata->message),
					 edata->detail ? errdetail("%s", edata->detail) : 0,
					 errhint("The other registered tables are not held up by it.")));
			FreeErrorData(edata);
		}
		PG_END_TRY();
	}
}

/*
 * Sweep records for dedup_sweep_colocated(), whose caller must be able to
 * read it and delete from it (SELECT and DELETE), as its owner; add the
 * rows deleted to *(uint64 *) arg.
 */
static void
sweep_for_caller(const DedupRelations *rels, Oid records, void *arg)
{
	if (pg_class_aclmask(records, GetUserId(), ACL_SELECT | ACL_DELETE,
						 ACLMASK_ALL) != (ACL_SELECT | ACL_DELETE))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for table %s", get_rel_name(records)),
				 errdetail("dedup_sweep_colocated() sweeps a table, as its owner, for a caller with SELECT and DELETE on it.")));
	*(uint64 *) arg += dedup_colocated_sweep_table(rels, records);
}

/*
 * dedup_sweep_colocated(records regclass DEFAULT NULL) RETURNS bigint
 *
 * Delete the expired rows of every registered records table (or of
 * records) now, in the caller's transaction; return how many.  Each table
 * as its owner, for a caller with SELECT and DELETE on it: records is
 * refused otherwise, and with no argument such a table, or one that fails,
 * is skipped with a WARNING.  The coordinator's sweeper does the same on
 * its own.
 */
Datum
dedup_sweep_colocated(PG_FUNCTION_ARGS)
{
	const DedupRelations *rels;
	Relation	registry;
	uint64		total = 0;

	PreventCommandDuringRecovery("dedup_sweep_colocated()");
	PreventCommandIfReadOnly("dedup_sweep_colocated()");
	dedup_colocated_check_node("dedup_sweep_colocated()");
	registry = dedup_registry_open(&rels);
	if (!PG_ARGISNULL(0) && !dedup_registry_has(registry, PG_GETARG_OID(0)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("table \"%s\" is not a colocated records table of dedup",
						get_rel_name(PG_GETARG_OID(0)) ? get_rel_name(PG_GETARG_OID(0)) : "?")));
	table_close(registry, AccessShareLock);
	if (PG_ARGISNULL(0))
		colocated_each("sweep", rels, dedup_colocated_tables(rels),
					   sweep_for_caller, &total);
	else
		sweep_for_caller(rels, PG_GETARG_OID(0), &total);
	PG_RETURN_INT64((int64) total);
}

/*
 * The rows of dedup_colocated_storage() for records, as its owner, into
 * the result set (arg, a ReturnSetInfo).
 */
static void
count_table(const DedupRelations *rels, Oid records, void *arg)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) arg;
	char	   *name;
	Oid			argtypes[1] = {REGCLASSOID};
	Datum		args[1] = {ObjectIdGetDatum(records)};
	ColocatedAsOwner owner;
	Datum		bytes;
	bool		bytes_null;
	StringInfoData sql;
	int			rc;

	name = as_owner_begin(records, AccessShareLock, &owner);
	rc = SPI_execute_with_args("SELECT pg_catalog.citus_total_relation_size($1)",
							   1, argtypes, args, NULL, true, 1);
	if (rc != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "citus_total_relation_size failed: %s", SPI_result_code_string(rc));
	bytes = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1,
						  &bytes_null);
	initStringInfo(&sql);
	appendStringInfo(&sql,
					 "SELECT r.consumer, pg_catalog.count(*), pg_catalog.min(r.processed_at), "
					 "pg_catalog.max(r.processed_at) FROM %s r GROUP BY r.consumer ORDER BY r.consumer",
					 name);
	rc = SPI_execute(sql.data, true, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "counting \"%s\" failed: %s", name, SPI_result_code_string(rc));
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	row = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		Datum		values[7];
		bool		nulls[7] = {0};
		TimestampTz cutoff;
		MemoryContext old;

		values[0] = ObjectIdGetDatum(records);
		for (int c = 0; c < 4; c++)
			values[c + 1] = SPI_getbinval(row, desc, c + 1, &nulls[c + 1]);
		nulls[5] = nulls[1] || nulls[4] ||
			!dedup_consumer_cutoff(rels, DatumGetTextPP(values[1]),
								   DatumGetTimestampTz(values[4]), &cutoff);
		values[5] = nulls[5] ? (Datum) 0 : TimestampTzGetDatum(cutoff);
		values[6] = bytes;
		nulls[6] = bytes_null;
		old = MemoryContextSwitchTo(rsinfo->econtext->ecxt_per_query_memory);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		MemoryContextSwitchTo(old);
	}
	as_owner_end(&owner);
}

/*
 * dedup_colocated_storage() RETURNS TABLE (records regclass, consumer
 * text, records_count bigint, oldest_record_at timestamptz,
 * latest_record_at timestamptz, expires_before timestamptz, table_bytes
 * bigint)
 *
 * What each registered records table holds for each consumer, counted
 * over all its shards, with the cutoff the sweep applies (NULL: nothing of
 * it expires) and the table's size on all nodes (citus_total_relation_size).
 * Counted as each table's owner (as_owner_begin()), so a monitoring role
 * (pg_monitor) needs no privilege on the tables; only names, counts and
 * times are shown.  A table that is refused or fails is left out, with a
 * WARNING.
 */
Datum
dedup_colocated_storage(PG_FUNCTION_ARGS)
{
	const DedupRelations *rels;
	Relation	registry;

	InitMaterializedSRF(fcinfo, 0);
	dedup_colocated_check_node("dedup_colocated_storage()");
	registry = dedup_registry_open(&rels);
	table_close(registry, AccessShareLock);
	colocated_each("count", rels, dedup_colocated_tables(rels), count_table,
				   fcinfo->resultinfo);
	return (Datum) 0;
}
