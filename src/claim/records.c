/*-------------------------------------------------------------------------
 *
 * records.c
 *	  Looking at one record without claiming it, and removing records on
 *	  purpose: dedup_seen(), dedup_forget() and dedup_forget_since().
 *
 * dedup_seen only reads (it works in read-only transactions and on a hot
 * standby) and sees what the caller's snapshot sees: committed claims and
 * the caller's own, not another transaction's claim in progress.  It
 * answers only roles that may claim for the consumer (dedup_consumer_roles):
 * whether an id was processed is the consumer's business.
 *
 * dedup_forget and dedup_forget_since delete records so that their messages are processed again
 * when they are redelivered -- a replay on purpose.  Every call is written
 * to the server log (audit.c).  Like the sweep, both work on the tables by
 * OID and run no SQL, and delete each record as DELETE would
 * (dedup_tid_delete_row in tid_delete.c): waiting for a transaction that is changing
 * it, and raising a serialization failure with REPEATABLE READ or
 * SERIALIZABLE where another transaction deleted it after the snapshot.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/pg_type.h"
#include "executor/executor.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "audit.h"
#include "claim/claim.h"
#include "compat.h"
#include "keys.h"
#include "tables/relations.h"

PG_FUNCTION_INFO_V1(dedup_seen);
PG_FUNCTION_INFO_V1(dedup_forget);
PG_FUNCTION_INFO_V1(dedup_forget_since);

/*
 * Look for consumer's record of message_id that the active snapshot sees,
 * through index, processed_messages' key (keys: the scan keys, set here);
 * its TID and claim time in *tid and *processed_at, and slot (of rel) left
 * empty.  False if there is none.  The caller has locked processed_messages.
 */
static bool
find_record(Relation rel, Relation index, ScanKey keys, TupleTableSlot *slot,
			text *consumer, text *message_id, ItemPointer tid,
			TimestampTz *processed_at)
{
	IndexScanDesc scan;
	bool		found;

	dedup_scan_key(&keys[0], index, 1, BTEqualStrategyNumber,
				   PointerGetDatum(consumer));
	dedup_scan_key(&keys[1], index, 2, BTEqualStrategyNumber,
				   PointerGetDatum(message_id));
	scan = dedup_index_beginscan(rel, index, GetActiveSnapshot(), 2);
	index_rescan(scan, keys, 2, NULL, 0);
	found = index_getnext_slot(scan, ForwardScanDirection, slot);
	if (found)
	{
		bool		isnull;

		*tid = slot->tts_tid;
		*processed_at = DatumGetTimestampTz(slot_getattr(slot, 3, &isnull));
	}
	index_endscan(scan);
	ExecClearTuple(slot);
	return found;
}

static void
check_consumer_and_id(FunctionCallInfo fcinfo, const char *function)
{
	dedup_check_key(function, "consumer", 0, PG_GETARG_DATUM(0),
					PG_ARGISNULL(0), DEDUP_MAX_CONSUMER_BYTES);
	dedup_check_key(function, "message_id", 0, PG_GETARG_DATUM(1),
					PG_ARGISNULL(1), DEDUP_MAX_MESSAGE_ID_BYTES);
}

/*
 * dedup_seen(consumer text, message_id text,
 *			  OUT seen boolean, OUT processed_at timestamptz) RETURNS record
 *
 * Whether consumer has a record of message_id, and when it was claimed
 * (NULL when not seen).  Claims nothing.
 */
Datum
dedup_seen(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[2];
	bool		nulls[2] = {false, false};
	const DedupRelations *rels;
	Relation	rel;
	Relation	index;
	TupleTableSlot *slot;
	ScanKeyData keys[2];
	ItemPointerData tid;
	TimestampTz processed_at;
	bool		seen;

	check_consumer_and_id(fcinfo, "dedup_seen");
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE ||
		tupdesc->natts != 2)
		elog(ERROR, "dedup_seen must return a record of 2 columns");

	dedup_check_claimant(PG_GETARG_TEXT_PP(0), "dedup_seen()");
	rel = dedup_table_open(DEDUP_MESSAGES, AccessShareLock, false, &rels);
	index = index_open(rels->messages_key, AccessShareLock);
	slot = table_slot_create(rel, NULL);
	seen = find_record(rel, index, keys, slot, PG_GETARG_TEXT_PP(0),
					   PG_GETARG_TEXT_PP(1), &tid, &processed_at);
	ExecDropSingleTupleTableSlot(slot);
	index_close(index, AccessShareLock);
	table_close(rel, AccessShareLock);

	values[0] = BoolGetDatum(seen);
	values[1] = TimestampTzGetDatum(processed_at);
	nulls[1] = !seen;
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc),
													  values, nulls)));
}

/*
 * dedup_forget(consumer text, message_id text) RETURNS boolean
 *
 * Delete consumer's record of message_id, in the caller's transaction, so
 * that its next delivery is processed again, as DELETE would
 * (dedup_tid_delete_row).  True if there was one.
 */
Datum
dedup_forget(PG_FUNCTION_ARGS)
{
	const DedupRelations *rels;
	Relation	rel;
	Relation	index;
	TupleTableSlot *slot;
	ScanKeyData keys[2];
	ItemPointerData tid;
	TimestampTz processed_at;
	bool		forgotten = false;

	check_consumer_and_id(fcinfo, "dedup_forget");
	PreventCommandDuringRecovery("dedup_forget()");
	PreventCommandIfReadOnly("dedup_forget()");

	rel = dedup_table_open(DEDUP_MESSAGES, RowExclusiveLock, false, &rels);
	/* what a DELETE checks: a publication may need the rows' identity */
	CheckCmdReplicaIdentity(rel, CMD_DELETE);
	index = index_open(rels->messages_key, AccessShareLock);
	slot = table_slot_create(rel, NULL);
	if (find_record(rel, index, keys, slot, PG_GETARG_TEXT_PP(0),
					PG_GETARG_TEXT_PP(1), &tid, &processed_at))
		forgotten = dedup_tid_delete_row(rel, index, keys, 2, &tid, slot);
	ExecDropSingleTupleTableSlot(slot);
	index_close(index, AccessShareLock);
	table_close(rel, NoLock);

	dedup_audit_forget(PG_GETARG_TEXT_PP(0), PG_GETARG_TEXT_PP(1), forgotten);
	PG_RETURN_BOOL(forgotten);
}

/*
 * dedup_forget_since(consumer text, since timestamptz) RETURNS bigint
 *
 * Delete consumer's records claimed at or after since ('-infinity': all of
 * them), in the caller's transaction, and return how many: a replay of
 * everything it processed since then.
 */
Datum
dedup_forget_since(PG_FUNCTION_ARGS)
{
	const DedupRelations *rels;
	TimestampTz since;
	uint64		forgotten;

	dedup_check_key("dedup_forget_since", "consumer", 0, PG_GETARG_DATUM(0),
					PG_ARGISNULL(0), DEDUP_MAX_CONSUMER_BYTES);
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument \"since\" of dedup_forget_since must not be null"),
				 errhint("Use '-infinity' to forget every record of the consumer.")));
	since = PG_GETARG_TIMESTAMPTZ(1);
	PreventCommandDuringRecovery("dedup_forget_since()");
	PreventCommandIfReadOnly("dedup_forget_since()");

	rels = dedup_relations(false);
	forgotten = dedup_tid_delete_range(rels, PG_GETARG_TEXT_PP(0), since, DT_NOEND,
									   0, NULL);

	dedup_audit_forget_since(PG_GETARG_TEXT_PP(0), since, forgotten);
	PG_RETURN_INT64((int64) forgotten);
}
