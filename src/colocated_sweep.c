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
 * and operator qualified.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/table.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "audit.h"
#include "colocated.h"
#include "relations.h"
#include "sweep.h"

PG_FUNCTION_INFO_V1(dedup_sweep_colocated);
PG_FUNCTION_INFO_V1(dedup_colocated_storage);

/*
 * Delete the expired rows of the records table records, with the windows
 * of dedup_retention (the retention rule of sweep.c, each consumer's
 * latest claim read from the whole distributed table), as the current
 * user; return how many.  One distributed DELETE per consumer with expired
 * rows, which Citus runs on every shard at once: it cannot be bounded (no
 * LIMIT on a distributed table).  The caller holds a snapshot.
 */
uint64
dedup_colocated_sweep_table(const DedupRelations *rels, Oid records)
{
	char	   *name = quote_qualified_identifier(get_namespace_name(get_rel_namespace(records)),
												  get_rel_name(records));
	StringInfoData sql;
	Oid			argtypes[2] = {TEXTOID, TIMESTAMPTZOID};
	SPITupleTable *consumers;
	uint64		nconsumers;
	uint64		total = 0;
	int			rc;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
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
	SPI_finish();
	return total;
}

/*
 * dedup_sweep_colocated(records regclass DEFAULT NULL) RETURNS bigint
 *
 * Delete the expired rows of every registered records table (or of
 * records) now, as the caller, in the caller's transaction; return how
 * many.  The coordinator's sweeper does the same on its own.
 */
Datum
dedup_sweep_colocated(PG_FUNCTION_ARGS)
{
	const DedupRelations *rels;
	Relation	registry;
	List	   *tables;
	ListCell   *lc;
	int64		total = 0;

	PreventCommandDuringRecovery("dedup_sweep_colocated()");
	PreventCommandIfReadOnly("dedup_sweep_colocated()");
	dedup_colocated_check_node("dedup_sweep_colocated()");
	registry = dedup_registry_open(&rels);
	if (!PG_ARGISNULL(0) && !dedup_registry_has(registry, PG_GETARG_OID(0)))
		ereport(ERROR,
				errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("table \"%s\" is not a colocated records table of dedup",
					   get_rel_name(PG_GETARG_OID(0)) ? get_rel_name(PG_GETARG_OID(0)) : "?"));
	table_close(registry, AccessShareLock);
	tables = PG_ARGISNULL(0) ? dedup_colocated_tables(rels) :
		list_make1_oid(PG_GETARG_OID(0));
	foreach(lc, tables)
		total += dedup_colocated_sweep_table(rels, lfirst_oid(lc));
	PG_RETURN_INT64(total);
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
 * Counted as each table's owner, in a security-restricted operation, so a
 * monitoring role (pg_monitor) needs no privilege on the tables; only
 * names, counts and times are shown.
 */
Datum
dedup_colocated_storage(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	const DedupRelations *rels;
	Relation	registry;
	List	   *tables;
	ListCell   *lc;

	InitMaterializedSRF(fcinfo, 0);
	dedup_colocated_check_node("dedup_colocated_storage()");
	registry = dedup_registry_open(&rels);
	table_close(registry, AccessShareLock);
	tables = dedup_colocated_tables(rels);
	foreach(lc, tables)
	{
		Oid			records = lfirst_oid(lc);
		char	   *name = quote_qualified_identifier(get_namespace_name(get_rel_namespace(records)),
													  get_rel_name(records));
		Oid			argtypes[1] = {REGCLASSOID};
		Datum		args[1] = {ObjectIdGetDatum(records)};
		Oid			save_userid;
		int			save_sec_context;
		Datum		bytes;
		bool		bytes_null;
		StringInfoData sql;
		int			rc;

		GetUserIdAndSecContext(&save_userid, &save_sec_context);
		SetUserIdAndSecContext(dedup_table_owner(records), save_sec_context |
							   SECURITY_LOCAL_USERID_CHANGE |
							   SECURITY_RESTRICTED_OPERATION);
		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "SPI_connect failed");
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
			bool		isnull;
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
			(void) isnull;
			old = MemoryContextSwitchTo(rsinfo->econtext->ecxt_per_query_memory);
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
			MemoryContextSwitchTo(old);
		}
		SPI_finish();
		SetUserIdAndSecContext(save_userid, save_sec_context);
	}
	return (Datum) 0;
}
