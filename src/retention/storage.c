/*-------------------------------------------------------------------------
 *
 * storage.c
 *	  dedup_consumer_storage(): what processed_messages holds for each
 *	  consumer, the figures behind the dedup_stats and dedup_storage views.
 *
 * The consumers, their windows and their cutoffs come from the sweep's own
 * consumer walk (dedup_consumers() in rule.c), so the views count as
 * expired exactly what a sweep would delete.  Added here: each consumer's
 * row count estimated from the planner's statistics of consumer_name (NULL
 * before the first ANALYZE), and its expired and its future-dated rows
 * counted through the (consumer_name, processed_at) index up to
 * STORAGE_COUNT_LIMIT each, so that the views stay cheap at any size.
 *
 * Like the sweep, it reads the tables by OID and runs no SQL, so it needs
 * no privilege on them: who may see the figures is who may execute the
 * function (pg_monitor, and superusers).  It only reads, so a hot standby
 * answers it too.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_statistic.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "retention/retention.h"
#include "tables/relations.h"

PG_FUNCTION_INFO_V1(dedup_consumer_storage);

/* the most expired, or future-dated, rows counted per consumer */
#define STORAGE_COUNT_LIMIT 100000

/* the columns of dedup_consumer_storage() */
#define STORAGE_COLS 9

/* processed_messages.consumer_name (relations.c checks it is column 1) */
#define CONSUMER_NAME_ATTNUM 1

/*
 * The planner's statistics of processed_messages.consumer_name, as pg_stats
 * shows them, with the table's row estimate.  The arithmetic on them keeps
 * the precision (float4 or float8) that the views had when they computed it
 * in SQL, so that the estimates did not change.
 */
typedef struct NameStats
{
	float4		reltuples;
	float4		null_frac;
	float4		distinct;		/* distinct values (negative n_distinct scaled
								 * to the table) */
	AttStatsSlot mcv;			/* most common values, their frequencies */
	float4		mcv_freq;		/* the sum of those frequencies */
} NameStats;

/*
 * Read the statistics of consumer_name of rel (processed_messages) into
 * *stats; false when there are none yet (never analyzed).
 */
static bool
name_stats_load(Relation rel, NameStats *stats)
{
	HeapTuple	tuple;
	Form_pg_statistic form;

	stats->reltuples = rel->rd_rel->reltuples;
	if (stats->reltuples < 0)
		return false;
	tuple = SearchSysCache3(STATRELATTINH,
							ObjectIdGetDatum(RelationGetRelid(rel)),
							Int16GetDatum(CONSUMER_NAME_ATTNUM),
							BoolGetDatum(false));
	if (!HeapTupleIsValid(tuple))
		return false;
	form = (Form_pg_statistic) GETSTRUCT(tuple);
	stats->null_frac = form->stanullfrac;
	if (form->stadistinct >= 0)
		stats->distinct = form->stadistinct;
	else
		stats->distinct = -form->stadistinct * stats->reltuples;
	/* no MCV slot leaves it empty: nvalues 0 */
	(void) get_attstatsslot(&stats->mcv, tuple, STATISTIC_KIND_MCV, InvalidOid,
							ATTSTATSSLOT_VALUES | ATTSTATSSLOT_NUMBERS);
	stats->mcv_freq = 0;
	for (int i = 0; i < stats->mcv.nnumbers; i++)
		stats->mcv_freq += stats->mcv.numbers[i];
	ReleaseSysCache(tuple);
	return true;
}

/*
 * How many rows consumer has, estimated as the planner does for an equality
 * on consumer_name: a most common value's frequency, or else an even share
 * of what the most common values leave to the other distinct values.
 */
static int64
records_estimate(const NameStats *stats, text *consumer)
{
	float8		rows;

	for (int i = 0; i < stats->mcv.nvalues; i++)
	{
		if (DatumGetBool(DirectFunctionCall2Coll(texteq, DEFAULT_COLLATION_OID,
												 PointerGetDatum(consumer),
												 stats->mcv.values[i])))
		{
			float4		common = stats->mcv.numbers[i] * stats->reltuples;

			return (int64) rint((float8) common);
		}
	}
	rows = (1.0 - (float8) stats->null_frac - (float8) stats->mcv_freq) *
		(float8) stats->reltuples /
		Max((float8) stats->distinct - (float8) stats->mcv.nvalues, 1.0);
	return (int64) rint(rows);
}

/*
 * How many rows of consumer the active snapshot sees dated before bound
 * (strategy BTLessStrategyNumber) or after it (BTGreaterStrategyNumber),
 * up to STORAGE_COUNT_LIMIT; rel, index and slot are processed_messages,
 * its (consumer_name, processed_at) index and a slot of it.
 */
static int64
count_rows(Relation rel, Relation index, TupleTableSlot *slot,
		   text *consumer, StrategyNumber strategy, TimestampTz bound)
{
	ScanKeyData keys[2];
	IndexScanDesc scan;
	int64		count = 0;

	dedup_scan_key(&keys[0], index, 1, BTEqualStrategyNumber,
				   PointerGetDatum(consumer));
	dedup_scan_key(&keys[1], index, 2, strategy, TimestampTzGetDatum(bound));
	scan = dedup_index_beginscan(rel, index, GetActiveSnapshot(), 2);
	index_rescan(scan, keys, 2, NULL, 0);
	while (count < STORAGE_COUNT_LIMIT &&
		   index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		CHECK_FOR_INTERRUPTS();
		count++;
	}
	ExecClearTuple(slot);
	index_endscan(scan);
	return count;
}

/*
 * dedup_consumer_storage(OUT consumer text, OUT records_estimate bigint,
 *		OUT oldest_record_at timestamptz, OUT latest_record_at timestamptz,
 *		OUT retention interval, OUT keep_forever boolean,
 *		OUT retention_valid boolean, OUT expired_backlog bigint,
 *		OUT future_records bigint) RETURNS SETOF record
 *
 * One row per consumer with rows or with a window of its own.  retention
 * is its window (NULL: kept forever); an invalid window expires nothing.
 * The expired backlog is counted back from the earlier of its latest claim
 * and now, as the sweep does; future records are dated after now.
 */
Datum
dedup_consumer_storage(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TimestampTz now = GetCurrentTransactionStartTimestamp();
	const DedupRelations *rels;
	Relation	rel;
	Relation	index;
	TupleTableSlot *slot;
	NameStats	stats;
	bool		have_stats;
	ListCell   *lc;

	InitMaterializedSRF(fcinfo, 0);
	if (rsinfo->setDesc->natts != STORAGE_COLS)
		elog(ERROR, "incorrect number of output arguments");

	rel = dedup_table_open(DEDUP_MESSAGES, AccessShareLock, false, &rels);
	index = index_open(rels->messages_time, AccessShareLock);
	slot = table_slot_create(rel, NULL);
	have_stats = name_stats_load(rel, &stats);

	foreach(lc, dedup_consumers(rels, NULL, true))
	{
		DedupConsumer *consumer = lfirst(lc);
		Datum		values[STORAGE_COLS];
		bool		nulls[STORAGE_COLS] = {0};

		values[0] = PointerGetDatum(consumer->name);
		if (have_stats)
			values[1] = Int64GetDatum(records_estimate(&stats, consumer->name));
		else
			nulls[1] = true;
		values[2] = TimestampTzGetDatum(consumer->oldest);
		nulls[2] = !consumer->has_rows;
		values[3] = TimestampTzGetDatum(consumer->latest);
		nulls[3] = !consumer->has_rows;
		values[4] = IntervalPGetDatum(consumer->window);
		nulls[4] = (consumer->window == NULL);
		values[5] = BoolGetDatum(consumer->window == NULL);
		values[6] = BoolGetDatum(consumer->window_valid);
		values[7] = Int64GetDatum(!consumer->expires ? 0 :
								  count_rows(rel, index, slot, consumer->name,
											 BTLessStrategyNumber,
											 consumer->cutoff));
		values[8] = Int64GetDatum(!consumer->has_rows ? 0 :
								  count_rows(rel, index, slot, consumer->name,
											 BTGreaterStrategyNumber, now));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}

	ExecDropSingleTupleTableSlot(slot);
	index_close(index, AccessShareLock);
	table_close(rel, AccessShareLock);
	return (Datum) 0;
}
