/*-------------------------------------------------------------------------
 *
 * tid_delete.c
 *	  Deleting rows of the extension's own tables by TID, found through one
 *	  of their indexes, as DELETE deletes them: the way dedup deletes from
 *	  the tables it reads by OID (the sweep, the forgets of records and of
 *	  stream positions).  The colocated records tables, which Citus
 *	  distributes, are deleted from with SQL through SPI instead
 *	  (colocated_sweep.c, colocated.c).
 *
 * Every row is deleted as ExecDelete deletes it: a row that another
 * transaction is changing is waited for; in READ COMMITTED, a row it
 * updated is deleted in its latest version if that still matches the scan
 * keys (as EvalPlanQual rechecks it), and one it deleted is skipped; with
 * REPEATABLE READ or SERIALIZABLE, either is a serialization failure.  No
 * SQL runs: no trigger, rule or privilege check of the table applies, which
 * relations.c checks there is none of.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "executor/executor.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "tables/relations.h"

/*
 * Does the row in slot match the scan keys keys[0..nkeys-1] of index, a
 * btree index of its table?  What EvalPlanQual rechecks of a row's latest
 * version: the quals of the scan that found an earlier one.
 */
static bool
row_matches(Relation index, TupleTableSlot *slot, const ScanKeyData *keys,
			int nkeys)
{
	for (int i = 0; i < nkeys; i++)
	{
		const ScanKeyData *key = &keys[i];
		bool		isnull;
		Datum		value = slot_getattr(slot,
										 index->rd_index->indkey.values[key->sk_attno - 1],
										 &isnull);

		if (isnull ||
			!DatumGetBool(FunctionCall2Coll(unconstify(FmgrInfo *, &key->sk_func),
											key->sk_collation, value,
											key->sk_argument)))
			return false;
	}
	return true;
}

/*
 * Delete the row tid of rel, found with the active snapshot through the
 * scan keys keys[0..nkeys-1] of index, as DELETE would (ExecDelete in
 * nodeModifyTable.c), and say whether it was deleted.  A transaction that is
 * changing the row is waited for.  If it deleted the row, the row is gone;
 * if it updated it, READ COMMITTED locks the latest version and deletes it
 * if it still matches the keys, as EvalPlanQual does.  With REPEATABLE READ
 * or SERIALIZABLE, a row that a transaction committed after the snapshot
 * changed is a serialization failure.  A row deleted by this command
 * already is skipped.  slot (of rel) is free for the row's latest version.
 */
bool
dedup_tid_delete_row(Relation rel, Relation index, const ScanKeyData *keys,
					 int nkeys, ItemPointer tid, TupleTableSlot *slot)
{
	CommandId	cid = GetCurrentCommandId(true);
	Snapshot	snapshot = GetActiveSnapshot();
	ItemPointerData target = *tid;

	for (;;)
	{
		TM_FailureData tmfd;
		TM_Result	result;
		bool		matches;

		result = table_tuple_delete(rel, &target, cid, snapshot,
									InvalidSnapshot, true, &tmfd, false);
		if (result == TM_Ok)
			return true;
		if (result == TM_SelfModified)
			return false;
		if (result != TM_Updated && result != TM_Deleted)
			elog(ERROR, "unexpected table_tuple_delete status: %u", result);
		if (IsolationUsesXactSnapshot())
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 result == TM_Updated ?
					 errmsg("could not serialize access due to concurrent update") :
					 errmsg("could not serialize access due to concurrent delete")));
		if (result == TM_Deleted)
			return false;

		/* READ COMMITTED: the latest version, if it still matches */
		result = table_tuple_lock(rel, &target, snapshot, slot, cid,
								  LockTupleExclusive, LockWaitBlock,
								  TUPLE_LOCK_FLAG_FIND_LAST_VERSION, &tmfd);
		if (result == TM_Deleted || result == TM_SelfModified)
			return false;
		if (result != TM_Ok)
			elog(ERROR, "unexpected table_tuple_lock status: %u", result);
		matches = row_matches(index, slot, keys, nkeys);
		target = slot->tts_tid;
		ExecClearTuple(slot);
		if (!matches)
			return false;
	}
}

/*
 * Delete consumer's rows dated from from (inclusive) to before (exclusive;
 * DT_NOEND: no end), oldest first, at most limit of them (0: all), and
 * return how many were deleted; *last (if not NULL) is set to the claim
 * time of the last row looked at.  The caller holds a snapshot.
 *
 * The rows are read from the (consumer_name, processed_at) index and
 * deleted by TID as DELETE would (dedup_tid_delete_row), waiting for a
 * transaction that has locked one (the sweeper bounds that wait with
 * lock_timeout).  Claims never update rows.
 */
uint64
dedup_tid_delete_range(const DedupRelations *rels, text *consumer,
					   TimestampTz from, TimestampTz before, int limit,
					   TimestampTz *last)
{
	Relation	rel = table_open(rels->messages, RowExclusiveLock);
	Relation	index = index_open(rels->messages_time, AccessShareLock);
	TupleTableSlot *slot = table_slot_create(rel, NULL);
	ScanKeyData keys[3];
	int			nkeys = 2;
	IndexScanDesc scan;
	uint64		deleted = 0;

	/* what a DELETE checks: a publication may need the rows' identity */
	CheckCmdReplicaIdentity(rel, CMD_DELETE);
	dedup_scan_key(&keys[0], index, 1, BTEqualStrategyNumber,
				   PointerGetDatum(consumer));
	dedup_scan_key(&keys[1], index, 2, BTGreaterEqualStrategyNumber,
				   TimestampTzGetDatum(from));
	if (before != DT_NOEND)
		dedup_scan_key(&keys[nkeys++], index, 2, BTLessStrategyNumber,
					   TimestampTzGetDatum(before));
	scan = dedup_index_beginscan(rel, index, GetActiveSnapshot(), nkeys);
	index_rescan(scan, keys, nkeys, NULL, 0);

	while ((limit == 0 || deleted < (uint64) limit) &&
		   index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		bool		isnull;
		ItemPointerData tid = slot->tts_tid;

		CHECK_FOR_INTERRUPTS();
		if (last != NULL)
			*last = DatumGetTimestampTz(slot_getattr(slot, 3, &isnull));
		ExecClearTuple(slot);
		if (dedup_tid_delete_row(rel, index, keys, nkeys, &tid, slot))
			deleted++;
	}

	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	index_close(index, AccessShareLock);
	table_close(rel, NoLock);
	return deleted;
}
