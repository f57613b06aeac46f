/*-------------------------------------------------------------------------
 *
 * stream_positions.c
 *	  Looking at a consumer's stream positions and removing them on
 *	  purpose: dedup_stream_positions() and dedup_forget_stream_positions().
 *
 * dedup_stream_positions tells a consumer where to seek each partition it
 * is assigned (next_offset).  It only reads (it works in read-only
 * transactions and on a hot standby), sees what the caller's snapshot
 * sees, and answers only roles that may claim for the consumer
 * (dedup_consumer_roles), as dedup_seen does.
 *
 * dedup_forget_stream_positions deletes a consumer's positions, so that
 * any offset of those partitions is claimed as new again: for a consumer
 * that is gone (dedup_retire_consumer calls it), or a replay of everything
 * on purpose.  Every call is written to the server log (audit.c).  Each
 * position is deleted as DELETE deletes it (dedup_tid_delete_row in tid_delete.c):
 * a position that a claim in progress is moving is waited for; in READ
 * COMMITTED its new position is deleted once that claim commits (the
 * position it had, if it rolls back); with REPEATABLE READ or SERIALIZABLE,
 * a move committed after the snapshot is a serialization failure.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/table.h"
#include "access/tableam.h"
#include "executor/executor.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/snapmgr.h"

#include "audit.h"
#include "claim/claim.h"
#include "compat.h"
#include "keys.h"
#include "streams/stream_offsets.h"
#include "tables/relations.h"

PG_FUNCTION_INFO_V1(dedup_stream_positions);
PG_FUNCTION_INFO_V1(dedup_forget_stream_positions);

/* An index scan of one consumer's positions, in key order */
typedef struct PositionsScan
{
	Relation	rel;
	Relation	index;
	ScanKeyData keys[2];		/* the consumer, and the stream if given */
	int			nkeys;
	IndexScanDesc scan;
	TupleTableSlot *slot;		/* the position found last */
	LOCKMODE	lockmode;
} PositionsScan;

/*
 * Check the arguments of function -- consumer, and only_stream (NULL: every
 * stream) -- and begin a scan of the consumer's positions (in only_stream)
 * with lockmode, for function (for errors).  The consumer is returned in
 * *consumer, the stream in *stream (NULL: every stream).
 */
static void
positions_begin(FunctionCallInfo fcinfo, const char *function,
				LOCKMODE lockmode, PositionsScan *ps, text **consumer,
				text **stream)
{
	const char *call = psprintf("%s()", function);
	const DedupRelations *rels;

	dedup_check_key(function, "consumer", 0, PG_GETARG_DATUM(0),
					PG_ARGISNULL(0), DEDUP_MAX_CONSUMER_BYTES);
	if (!PG_ARGISNULL(1))
		dedup_check_key(function, "only_stream", 0, PG_GETARG_DATUM(1),
						false, DEDUP_MAX_STREAM_BYTES);
	*consumer = PG_GETARG_TEXT_PP(0);
	*stream = PG_ARGISNULL(1) ? NULL : PG_GETARG_TEXT_PP(1);
	if (lockmode == AccessShareLock)
		dedup_check_claimant(*consumer, call);
	else
	{
		PreventCommandDuringRecovery(call);
		PreventCommandIfReadOnly(call);
	}

	ps->lockmode = lockmode;
	ps->rel = dedup_positions_open(call, lockmode, &rels);
	ps->index = index_open(rels->positions_key, AccessShareLock);
	ps->slot = table_slot_create(ps->rel, NULL);
	ps->nkeys = 1;
	dedup_scan_key(&ps->keys[0], ps->index, POSITION_CONSUMER,
				   BTEqualStrategyNumber, PointerGetDatum(*consumer));
	if (*stream != NULL)
		dedup_scan_key(&ps->keys[ps->nkeys++], ps->index, POSITION_STREAM,
					   BTEqualStrategyNumber, PointerGetDatum(*stream));
	ps->scan = dedup_index_beginscan(ps->rel, ps->index, GetActiveSnapshot(),
									 ps->nkeys);
	index_rescan(ps->scan, ps->keys, ps->nkeys, NULL, 0);
}

/* the next position of the scan, in ps->slot; false after the last */
static bool
positions_next(PositionsScan *ps)
{
	CHECK_FOR_INTERRUPTS();
	return index_getnext_slot(ps->scan, ForwardScanDirection, ps->slot);
}

static void
positions_end(PositionsScan *ps)
{
	index_endscan(ps->scan);
	ExecDropSingleTupleTableSlot(ps->slot);
	index_close(ps->index, AccessShareLock);
	table_close(ps->rel, ps->lockmode == AccessShareLock ? AccessShareLock : NoLock);
}

/*
 * dedup_stream_positions(consumer text, only_stream text DEFAULT NULL)
 * RETURNS TABLE (stream text, partition integer, committed_offset bigint,
 *				  next_offset bigint, updated_at timestamptz)
 *
 * consumer's position in each partition of each stream it has claimed by
 * offset (of only_stream, if given), by stream and partition: the last
 * offset processed, the next one to read (seek there on assignment), and
 * when it was last moved.  A partition without a row has no position:
 * read it from wherever the consumer starts; every offset is new.
 */
Datum
dedup_stream_positions(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	PositionsScan ps;
	text	   *consumer;
	text	   *stream;

	InitMaterializedSRF(fcinfo, 0);
	if (rsinfo->setDesc->natts != 5)
		elog(ERROR, "dedup_stream_positions must return a table of 5 columns");
	positions_begin(fcinfo, "dedup_stream_positions", AccessShareLock, &ps,
					&consumer, &stream);
	while (positions_next(&ps))
	{
		Datum		values[5];
		bool		nulls[5] = {false, false, false, false, false};
		int64		committed;

		slot_getallattrs(ps.slot);
		committed = DatumGetInt64(ps.slot->tts_values[POSITION_OFFSET - 1]);
		values[0] = ps.slot->tts_values[POSITION_STREAM - 1];
		values[1] = ps.slot->tts_values[POSITION_PARTITION - 1];
		values[2] = Int64GetDatum(committed);
		values[3] = Int64GetDatum(committed + 1);
		values[4] = ps.slot->tts_values[POSITION_UPDATED_AT - 1];
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	positions_end(&ps);
	return (Datum) 0;
}

/*
 * dedup_forget_stream_positions(consumer text, only_stream text DEFAULT
 * NULL) RETURNS bigint
 *
 * Delete consumer's positions (in only_stream, if given), in the caller's
 * transaction, and return how many: every offset of those partitions is
 * claimed as new again.
 */
Datum
dedup_forget_stream_positions(PG_FUNCTION_ARGS)
{
	PositionsScan ps;
	text	   *consumer;
	text	   *stream;
	uint64		deleted = 0;

	positions_begin(fcinfo, "dedup_forget_stream_positions", RowExclusiveLock,
					&ps, &consumer, &stream);
	/* what a DELETE checks: a publication may need the rows' identity */
	CheckCmdReplicaIdentity(ps.rel, CMD_DELETE);
	while (positions_next(&ps))
	{
		ItemPointerData tid = ps.slot->tts_tid;

		ExecClearTuple(ps.slot);
		if (dedup_tid_delete_row(ps.rel, ps.index, ps.keys, ps.nkeys, &tid,
								 ps.slot))
			deleted++;
	}
	positions_end(&ps);

	dedup_audit_forget_positions(consumer, stream, deleted);
	PG_RETURN_INT64((int64) deleted);
}
