/*-------------------------------------------------------------------------
 *
 * claim_writer.c
 *	  The claim itself: what INSERT ... ON CONFLICT DO NOTHING into
 *	  processed_messages does, done directly on the table found by OID
 *	  (relations.c), so that no name is resolved while claiming.
 *
 * It is the executor's speculative insertion, step by step (see the
 * comment at the top of execIndexing.c, and ExecInsert in
 * nodeModifyTable.c), with every unique index of the table as arbiter.  A
 * claim therefore has exactly that statement's guarantees under every
 * isolation level: a concurrent claimer of the same key waits for the first
 * one and sees its outcome; REPEATABLE READ and SERIALIZABLE transactions
 * get a serialization failure rather than a wrong answer; savepoints and
 * rollbacks undo a claim like any other row.  One step is skipped when it
 * is likely to find nothing: the look for a conflict before inserting
 * (claim_last_duplicate).  What the statement would add around it
 * (triggers, rules, permission checks on the table) does not apply: the
 * table is the extension's own, and is checked to have none of them
 * (relations.c).
 *
 * Without waiting (dedup_try_claim), the same first look for a conflict
 * is made as a dirty read of each arbiter index, and a claim of the same
 * key in progress elsewhere is an answer instead of a wait.
 *
 * dedup_publish (outbox/publish.c) writes its rows into dedup_outbox the
 * same way, as INSERT ... ON CONFLICT (message_id) DO NOTHING
 * (dedup_claim_writer_insert_row).
 *
 * The claims by offset (stream_offsets.c) use the same insertion into
 * stream_positions, as INSERT ... ON CONFLICT (consumer_name, stream,
 * partition) DO UPDATE ... WHERE: a row with the key is locked, as that
 * statement locks it, and replaced if the caller's test (the WHERE) says so
 * (dedup_claim_writer_upsert).  Only the key is the arbiter there, with any
 * other unique index on exactly its columns (what the statement infers from
 * its target): a row of another consumer that a unique index or exclusion
 * constraint a DBA added says conflicts is that index's error, never a row
 * to replace, nor a silent "no position".
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/index.h"
#include "executor/executor.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "claim/claim.h"
#include "compat.h"

/* SQLSTATE UD001: the same message id claimed with a different fingerprint */
#define ERRCODE_DEDUP_MESSAGE_ID_REUSED MAKE_SQLSTATE('U','D','0','0','1')

/*
 * What claims of one call share: the executor state and the slots of the
 * speculative insertion into processed_messages or stream_positions (rel,
 * opened by the caller with RowExclusiveLock).  Allocated in the executor
 * state's memory.
 */
struct ClaimWriter
{
	Relation	rel;
	EState	   *estate;
	ResultRelInfo *result_rel;
	Relation	key_index;		/* the table's key */
	List	   *indexes;		/* OIDs of all the table's indexes */
	List	   *arbiters;		/* ON CONFLICT's arbiter indexes, found so
								 * far; NIL: every unique index and exclusion
								 * constraint */
	bool		all_indexes_open;	/* or only the key, so far */
	int			natts;			/* its attributes, dropped ones included */
	AttrNumber	fingerprint_attnum; /* 0 before 1.1 (no fingerprint column) */
	TupleTableSlot *slot;		/* the row being inserted */
	TupleTableSlot *conflict_slot;	/* a row it conflicts with */
	MemoryContext caller_context;
};

/*
 * Whether the last claim of this backend found its key recorded.  A claim
 * usually records a new key, and then the look for a conflict before
 * inserting (ON CONFLICT's) is a second descent of the key index for
 * nothing: the insertion into the index finds a conflict by itself.  So a
 * claim inserts at once, unless the last one was a duplicate: after one,
 * more may follow (a redelivered batch), and a duplicate found by inserting
 * costs a tuple inserted and killed.  Under SERIALIZABLE a claim always
 * looks first: an insertion takes part in conflict detection where the
 * look alone does not, and a duplicate must not cost a retry the statement
 * would not.
 */
static bool claim_last_duplicate = false;

static bool
varlenas_equal(Datum a, Datum b)
{
	struct varlena *va = PG_DETOAST_DATUM_PACKED(a);
	struct varlena *vb = PG_DETOAST_DATUM_PACKED(b);

	return VARSIZE_ANY_EXHDR(va) == VARSIZE_ANY_EXHDR(vb) &&
		memcmp(VARDATA_ANY(va), VARDATA_ANY(vb), VARSIZE_ANY_EXHDR(va)) == 0;
}

/* Does the row in slot hold the consumer and message id of the claim? */
static bool
same_key(ClaimWriter *writer, TupleTableSlot *slot)
{
	bool		isnull;

	return varlenas_equal(slot_getattr(slot, 1, &isnull),
						  writer->slot->tts_values[0]) &&
		varlenas_equal(slot_getattr(slot, 2, &isnull),
					   writer->slot->tts_values[1]);
}

/*
 * With REPEATABLE READ or SERIALIZABLE, a row that a claim conflicts with
 * (in slot) and that this transaction's snapshot cannot see was committed
 * after the snapshot was taken: answering from it would act on data the
 * transaction must not see, so raise a serialization failure, as ON
 * CONFLICT does (nodeModifyTable.c, ExecCheckTIDVisible and
 * ExecCheckTupleVisible).  A row this transaction wrote itself is an answer
 * however the snapshot sees it.
 */
static void
claim_check_visible(ClaimWriter *writer, TupleTableSlot *slot)
{
	bool		isnull;

	if (IsolationUsesXactSnapshot() &&
		!table_tuple_satisfies_snapshot(writer->rel, slot,
										writer->estate->es_snapshot) &&
		!TransactionIdIsCurrentTransactionId(
											 DatumGetTransactionId(slot_getsysattr(slot,
																				   MinTransactionIdAttributeNumber,
																				   &isnull))))
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("could not serialize access due to concurrent update")));
}

/*
 * A claim found the row conflict_tid with its key: decide that it is a
 * duplicate, or raise the error that it is not: a serialization failure
 * (claim_check_visible), or a reused message id.
 *
 * With a fingerprint, a row of the same key recorded with a different one
 * means that the producer reused the message id for another message: an
 * error, never a silent "duplicate".  A row recorded without a fingerprint
 * matches any.  A row found through another unique index a DBA added (of
 * another consumer, say) is a duplicate by that index, as for ON CONFLICT,
 * and neither its fingerprint nor its key is ever shown to the caller.
 */
static void
claim_check_conflict(ClaimWriter *writer, ItemPointer conflict_tid,
					 Datum fingerprint, bool has_fingerprint)
{
	TupleTableSlot *slot = writer->conflict_slot;
	bool		isnull;

	if (!IsolationUsesXactSnapshot() && !has_fingerprint)
		return;
	if (!table_tuple_fetch_row_version(writer->rel, conflict_tid, SnapshotAny,
									   slot))
		elog(ERROR, "failed to fetch conflicting claim");
	claim_check_visible(writer, slot);
	if (has_fingerprint && writer->fingerprint_attnum != 0 &&
		same_key(writer, slot))
	{
		Datum		recorded = slot_getattr(slot, writer->fingerprint_attnum,
											&isnull);

		if (!isnull && !varlenas_equal(recorded, fingerprint))
			ereport(ERROR,
					(errcode(ERRCODE_DEDUP_MESSAGE_ID_REUSED),
					 errmsg("message id \"%s\" of consumer \"%s\" was claimed before with a different fingerprint",
							TextDatumGetCString(writer->slot->tts_values[1]),
							TextDatumGetCString(writer->slot->tts_values[0])),
					 errdetail("The producer reused the message id for a different message, or the fingerprint is not computed the same way every time."),
					 errhint("Give each message its own id.")));
	}
	ExecClearTuple(slot);
}

/*
 * Open an index of processed_messages as ExecOpenIndices would: locked,
 * with its IndexInfo, and for a unique index the information speculative
 * insertion needs.
 */
static void
claim_writer_open_index(ClaimWriter *writer, Oid indexoid)
{
	ResultRelInfo *result_rel = writer->result_rel;
	Relation	index = index_open(indexoid, RowExclusiveLock);
	IndexInfo  *info = BuildIndexInfo(index);
	int			n = result_rel->ri_NumIndices++;

	if (info->ii_Unique)
		BuildSpeculativeIndexInfo(index, info);
	result_rel->ri_IndexRelationDescs[n] = index;
	result_rel->ri_IndexRelationInfo[n] = info;
}

/*
 * Is index, besides the key, an arbiter of ON CONFLICT with the key's
 * columns as its target?  What the planner infers from that target
 * (infer_arbiter_indexes in plancat.c): a valid unique index on exactly
 * the key's columns, in any order, without expressions or predicate.
 */
static bool
claim_writer_infers(ClaimWriter *writer, Relation index)
{
	Form_pg_index key = writer->key_index->rd_index;
	Form_pg_index form = index->rd_index;
	Bitmapset  *key_columns = NULL;
	Bitmapset  *columns = NULL;

	if (!form->indisvalid || !form->indisunique ||
		RelationGetIndexExpressions(index) != NIL ||
		RelationGetIndexPredicate(index) != NIL)
		return false;
	for (int i = 0; i < key->indnkeyatts; i++)
		key_columns = bms_add_member(key_columns, key->indkey.values[i]);
	for (int i = 0; i < form->indnkeyatts; i++)
		columns = bms_add_member(columns, form->indkey.values[i]);
	return bms_equal(key_columns, columns);
}

/*
 * Before the first insertion of the statement: open the indexes besides the
 * key, which a duplicate never needs.  Returns whether one of them is an
 * arbiter too (a unique index a DBA added; with the key as the target, one
 * on exactly its columns), so that the caller must look for conflicts
 * again.
 */
static bool
claim_writer_open_other_indexes(ClaimWriter *writer)
{
	MemoryContext oldcontext = MemoryContextSwitchTo(writer->estate->es_query_cxt);
	ResultRelInfo *result_rel = writer->result_rel;
	bool		arbiter = false;
	ListCell   *lc;

	foreach(lc, writer->indexes)
	{
		int			n = result_rel->ri_NumIndices;

		if (lfirst_oid(lc) == RelationGetRelid(writer->key_index))
			continue;
		claim_writer_open_index(writer, lfirst_oid(lc));
		if (writer->arbiters == NIL)
			arbiter |= result_rel->ri_IndexRelationInfo[n]->ii_Unique;
		else if (claim_writer_infers(writer, result_rel->ri_IndexRelationDescs[n]))
		{
			writer->arbiters = lappend_oid(writer->arbiters, lfirst_oid(lc));
			arbiter = true;
		}
	}
	writer->all_indexes_open = true;
	MemoryContextSwitchTo(oldcontext);
	return arbiter;
}

/*
 * Get ready to claim into processed_messages (rel), whose key is index
 * key_index and whose fingerprint column is fingerprint_attnum (0: none),
 * with every unique index and exclusion constraint as an arbiter (ON
 * CONFLICT DO NOTHING), or into stream_positions (fingerprint_attnum 0)
 * with the key as the arbiter (key_target: ON CONFLICT on the key's
 * columns).  Each claim is then one dedup_claim_writer_insert() (or
 * dedup_claim_writer_upsert()) call; the caller ends with
 * dedup_claim_writer_end(), or an error.
 */
ClaimWriter *
dedup_claim_writer_begin(Relation rel, Oid key_index,
						 AttrNumber fingerprint_attnum, bool key_target)
{
	MemoryContext caller_context = CurrentMemoryContext;
	EState	   *estate = CreateExecutorState();
	ClaimWriter *writer;
	ResultRelInfo *result_rel;
	int			nindexes;

	/* a running sweep yields to claims (heartbeat.c) */
	dedup_claims_heartbeat();

	MemoryContextSwitchTo(estate->es_query_cxt);
	writer = palloc0(sizeof(ClaimWriter));
	writer->rel = rel;
	writer->natts = RelationGetDescr(rel)->natts;
	writer->fingerprint_attnum = fingerprint_attnum;
	writer->caller_context = caller_context;
	writer->estate = estate;
	result_rel = writer->result_rel = makeNode(ResultRelInfo);
	InitResultRelInfo(result_rel, rel, 1, NULL, 0);

	/* the key first: all that a duplicate needs */
	writer->indexes = RelationGetIndexList(rel);
	nindexes = list_length(writer->indexes);
	result_rel->ri_IndexRelationDescs = palloc(nindexes * sizeof(Relation));
	result_rel->ri_IndexRelationInfo = palloc(nindexes * sizeof(IndexInfo *));
	claim_writer_open_index(writer, key_index);
	writer->key_index = result_rel->ri_IndexRelationDescs[0];
	writer->all_indexes_open = (nindexes == 1);
	if (key_target)
		writer->arbiters = list_make1_oid(key_index);

	writer->estate->es_snapshot = GetActiveSnapshot();
	writer->slot = table_slot_create(rel, NULL);
	writer->conflict_slot = table_slot_create(rel, NULL);
	MemoryContextSwitchTo(caller_context);
	return writer;
}

/* Close what the writer opened, and free it. */
void
dedup_claim_writer_end(ClaimWriter *writer)
{
	EState	   *estate = writer->estate;

	ExecDropSingleTupleTableSlot(writer->conflict_slot);
	ExecDropSingleTupleTableSlot(writer->slot);
	ExecCloseIndices(writer->result_rel);
	FreeExecutorState(estate);
}

/*
 * Without waiting for anyone: does a row conflict with the claim in the slot
 * through arbiter index (a unique index or an exclusion constraint, info
 * its IndexInfo)?  The same dirty read of the index that ON CONFLICT starts
 * with (check_exclusion_or_unique_constraint in execIndexing.c), minus the
 * wait: CLAIM_DUPLICATE (with its TID in *conflict_tid) for a row whose
 * inserting transaction committed (or is ours), CLAIM_IN_PROGRESS for one
 * that another transaction is inserting or deleting right now,
 * CLAIM_CLAIMED for none.
 */
static ClaimOutcome
claim_probe_index(ClaimWriter *writer, Relation index, IndexInfo *info,
				  ItemPointer conflict_tid)
{
	EState	   *estate = writer->estate;
	ExprContext *econtext = GetPerTupleExprContext(estate);
	TupleTableSlot *existing = writer->conflict_slot;
	int			nkeys = IndexRelationGetNumberOfKeyAttributes(index);
	Oid		   *procs = info->ii_ExclusionOps ? info->ii_ExclusionProcs : info->ii_UniqueProcs;
	uint16	   *strategies = info->ii_ExclusionOps ? info->ii_ExclusionStrats : info->ii_UniqueStrats;
	Datum		values[INDEX_MAX_KEYS];
	bool		isnull[INDEX_MAX_KEYS];
	ScanKeyData keys[INDEX_MAX_KEYS];
	SnapshotData dirty;
	IndexScanDesc scan;
	ClaimOutcome outcome = CLAIM_CLAIMED;

	/* a partial index the claim would not enter, or a null key: no conflict */
	econtext->ecxt_scantuple = writer->slot;
	if (info->ii_Predicate != NIL)
	{
		if (info->ii_PredicateState == NULL)
			info->ii_PredicateState = ExecPrepareQual(info->ii_Predicate, estate);
		if (!ExecQual(info->ii_PredicateState, econtext))
			return CLAIM_CLAIMED;
	}
	FormIndexDatum(info, writer->slot, estate, values, isnull);
	for (int i = 0; i < nkeys; i++)
	{
		if (isnull[i] && !info->ii_NullsNotDistinct)
			return CLAIM_CLAIMED;
		ScanKeyEntryInitialize(&keys[i], isnull[i] ? SK_ISNULL | SK_SEARCHNULL : 0,
							   i + 1, strategies[i], InvalidOid,
							   index->rd_indcollation[i], procs[i], values[i]);
	}

	InitDirtySnapshot(dirty);
	econtext->ecxt_scantuple = existing;
	scan = dedup_index_beginscan(writer->rel, index, &dirty, nkeys);
	index_rescan(scan, keys, nkeys, NULL, 0);
	while (index_getnext_slot(scan, ForwardScanDirection, existing))
	{
		/* a lossy index: does the row really conflict? */
		if (scan->xs_recheck)
		{
			Datum		found[INDEX_MAX_KEYS];
			bool		found_null[INDEX_MAX_KEYS];
			bool		conflicts = true;

			FormIndexDatum(info, existing, estate, found, found_null);
			for (int i = 0; conflicts && i < nkeys; i++)
				conflicts = !found_null[i] &&
					DatumGetBool(OidFunctionCall2Coll(procs[i],
													  index->rd_indcollation[i],
													  found[i], values[i]));
			if (!conflicts)
				continue;
		}
		/* the dirty snapshot tells of a transaction still at work on it */
		if (TransactionIdIsValid(dirty.xmin) || TransactionIdIsValid(dirty.xmax))
			outcome = CLAIM_IN_PROGRESS;
		else
		{
			*conflict_tid = existing->tts_tid;
			outcome = CLAIM_DUPLICATE;
		}
		break;
	}
	index_endscan(scan);
	ExecClearTuple(existing);
	return outcome;
}

/*
 * Without waiting for anyone: the first conflict of the claim in the slot,
 * through the arbiter indexes open so far, in the order ON CONFLICT checks
 * them (ExecCheckIndexConstraints): the key first, then the unique indexes
 * and exclusion constraints a DBA added.  So dedup_try_claim answers
 * 'duplicate' where dedup_claim answers false, and 'in_progress' where
 * dedup_claim would wait.
 */
static ClaimOutcome
claim_probe(ClaimWriter *writer, ItemPointer conflict_tid)
{
	ResultRelInfo *result_rel = writer->result_rel;

	for (int i = 0; i < result_rel->ri_NumIndices; i++)
	{
		Relation	index = result_rel->ri_IndexRelationDescs[i];
		IndexInfo  *info = result_rel->ri_IndexRelationInfo[i];
		ClaimOutcome outcome;

		if ((!info->ii_Unique && info->ii_ExclusionOps == NULL) ||
			!info->ii_ReadyForInserts)
			continue;
		if (!index->rd_index->indimmediate)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("ON CONFLICT does not support deferrable unique constraints/exclusion constraints as arbiters"),
					 errtableconstraint(writer->rel,
										RelationGetRelationName(index))));
		outcome = claim_probe_index(writer, index, info, conflict_tid);
		if (outcome != CLAIM_CLAIMED)
			return outcome;
	}
	return CLAIM_CLAIMED;
}

/*
 * Start a row to write: in the per-tuple context, its first nvalues
 * attributes values, NULL in every other one (dropped ones, a missing
 * fingerprint).  The caller may set more, then stores it
 * (ExecStoreVirtualTuple), writes it, and ends with claim_writer_finish().
 */
static TupleTableSlot *
claim_writer_start(ClaimWriter *writer, const Datum *values, int nvalues)
{
	TupleTableSlot *slot = writer->slot;

	Assert(nvalues <= writer->natts);
	MemoryContextSwitchTo(GetPerTupleMemoryContext(writer->estate));
	ExecClearTuple(slot);
	memset(slot->tts_isnull, true, writer->natts * sizeof(bool));
	memcpy(slot->tts_values, values, nvalues * sizeof(Datum));
	memset(slot->tts_isnull, false, nvalues * sizeof(bool));
	return slot;
}

/* Back to the caller's context, freeing what the row needed. */
static void
claim_writer_finish(ClaimWriter *writer)
{
	ExecClearTuple(writer->slot);
	MemoryContextSwitchTo(writer->caller_context);
	ResetPerTupleExprContext(writer->estate);
}

/*
 * Insert the row in the writer's slot unless a row with its key is there
 * already, and say what happened: the speculative insertion protocol of
 * ExecInsert for ON CONFLICT with the writer's arbiters.
 *
 * First look for a conflicting row: with wait, as ON CONFLICT does,
 * waiting for an in-progress inserter of the same key to finish; without,
 * answering CLAIM_IN_PROGRESS instead.  If there is none, insert the heap
 * tuple speculatively, under a speculative insertion lock, and then its
 * index entries; if a concurrent claim of the same key got into the unique
 * index first, the tuple is killed ("super-deleted") and the whole thing
 * starts again, now finding the other claim as a conflict, whose TID is
 * returned in *conflict_tid with CLAIM_DUPLICATE.  A conflict in an index
 * that is not an arbiter is that index's error, as for the statement.
 */
static ClaimOutcome
claim_writer_put(ClaimWriter *writer, bool wait, bool look_first,
				 ItemPointer conflict_tid)
{
	EState	   *estate = writer->estate;
	TupleTableSlot *slot = writer->slot;
	ClaimOutcome outcome;

	for (;;)
	{
		TransactionId xid;
		uint32		token;
		bool		spec_conflict = false;
		List	   *recheck;

		CHECK_FOR_INTERRUPTS();
		if (!look_first)
		{
			/*
			 * Insert at once: the unique indexes still refuse a second entry
			 * of the key (without waiting), and the loop then starts again,
			 * looking first.  A unique index opened now is checked that way.
			 */
			Assert(wait);
			look_first = true;
			if (!writer->all_indexes_open)
				(void) claim_writer_open_other_indexes(writer);
		}
		else
		{
			if (wait)
				outcome = dedup_check_index_constraints(writer->result_rel, slot,
														estate, conflict_tid,
														writer->arbiters) ?
					CLAIM_CLAIMED : CLAIM_DUPLICATE;
			else
				outcome = claim_probe(writer, conflict_tid);
			if (outcome != CLAIM_CLAIMED)
				return outcome;

			/*
			 * Only a claim that writes needs the other indexes, a transaction
			 * ID and a command ID.  A unique index opened now must be checked
			 * too.
			 */
			if (!writer->all_indexes_open &&
				claim_writer_open_other_indexes(writer))
				continue;
		}
		xid = GetCurrentTransactionId();
		estate->es_output_cid = GetCurrentCommandId(true);
		token = SpeculativeInsertionLockAcquire(xid);
		table_tuple_insert_speculative(writer->rel, slot, estate->es_output_cid,
									   0, NULL, token);
		recheck = dedup_insert_index_tuples(writer->result_rel, slot, estate,
											&spec_conflict, writer->arbiters);
		table_tuple_complete_speculative(writer->rel, slot, token,
										 !spec_conflict);
		SpeculativeInsertionLockRelease(xid);
		list_free(recheck);
		if (!spec_conflict)
			return CLAIM_CLAIMED;
	}
}

/*
 * Insert (consumer, message_id, now(), fingerprint) into processed_messages
 * unless the key is there already (claim_writer_put), and say what
 * happened; a duplicate is checked (claim_check_conflict).  What one key
 * needs is allocated in the per-tuple context, reset afterwards.
 */
ClaimOutcome
dedup_claim_writer_insert(ClaimWriter *writer, Datum consumer,
						  Datum message_id, Datum fingerprint,
						  bool has_fingerprint, bool wait)
{
	Datum		values[3];
	TupleTableSlot *slot;
	ItemPointerData conflict_tid;
	ClaimOutcome outcome;

	values[0] = consumer;
	values[1] = message_id;
	values[2] = TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());
	slot = claim_writer_start(writer, values, lengthof(values));
	if (writer->fingerprint_attnum != 0 && has_fingerprint)
	{
		slot->tts_values[writer->fingerprint_attnum - 1] = fingerprint;
		slot->tts_isnull[writer->fingerprint_attnum - 1] = false;
	}
	ExecStoreVirtualTuple(slot);

	outcome = claim_writer_put(writer, wait,
							   !wait || claim_last_duplicate ||
							   IsolationIsSerializable(),
							   &conflict_tid);
	claim_last_duplicate = (outcome == CLAIM_DUPLICATE);
	if (outcome == CLAIM_DUPLICATE)
		claim_check_conflict(writer, &conflict_tid, fingerprint,
							 has_fingerprint);
	claim_writer_finish(writer);
	return outcome;
}

/*
 * INSERT ... ON CONFLICT DO NOTHING of any row into the writer's table
 * (dedup_publish's into dedup_outbox, outbox/publish.c): the row whose
 * first nvalues attributes are values, nulls saying which are NULL (every
 * other attribute NULL), inserted unless a row with its key is there
 * already; returns CLAIM_CLAIMED if it was written, CLAIM_DUPLICATE if
 * not.  Inserted at once, as a claim is (claim_last_duplicate aside); a
 * duplicate is checked as for a claim without a fingerprint (a row this
 * transaction's snapshot must not see is a serialization failure).
 */
ClaimOutcome
dedup_claim_writer_insert_row(ClaimWriter *writer, const Datum *values,
							  const bool *nulls, int nvalues)
{
	TupleTableSlot *slot = claim_writer_start(writer, values, nvalues);
	ItemPointerData conflict_tid;
	ClaimOutcome outcome;

	memcpy(slot->tts_isnull, nulls, nvalues * sizeof(bool));
	ExecStoreVirtualTuple(slot);
	outcome = claim_writer_put(writer, true, IsolationIsSerializable(),
							   &conflict_tid);
	if (outcome == CLAIM_DUPLICATE)
		claim_check_conflict(writer, &conflict_tid, (Datum) 0, false);
	claim_writer_finish(writer);
	return outcome;
}

/*
 * Replace the locked row tid by the one in the writer's slot, as an UPDATE
 * would: HOT when no indexed column changes and the page has room, else
 * with new index entries.
 */
static void
claim_writer_update(ClaimWriter *writer, ItemPointer tid)
{
	DedupUpdateIndexes update_indexes;

	/* what an UPDATE checks: a publication may need the row's identity */
	CheckCmdReplicaIdentity(writer->rel, CMD_UPDATE);
	simple_table_tuple_update(writer->rel, tid, writer->slot,
							  writer->estate->es_snapshot, &update_indexes);
	if (!dedup_update_needs_indexes(update_indexes))
		return;
	if (!writer->all_indexes_open)
		(void) claim_writer_open_other_indexes(writer);
	list_free(dedup_insert_update_index_tuples(writer->result_rel,
											   writer->slot, writer->estate,
											   update_indexes));
}

/*
 * INSERT ... ON CONFLICT DO UPDATE ... WHERE test: insert the row whose
 * first nvalues attributes are values (every other one NULL) unless a row
 * with its key is there already; if one is, lock its latest version (as
 * SELECT ... FOR NO KEY UPDATE, to the end of the transaction, whatever
 * test answers), and replace it by the new row if test(existing, arg)
 * says so.  Returns whether a row with the key was there.
 *
 * As for ON CONFLICT: a concurrent inserter or updater of the row is
 * waited for; in READ COMMITTED, the row is then looked for again, and
 * its latest version decided on; with REPEATABLE READ or SERIALIZABLE, a
 * version the transaction's snapshot cannot see is a serialization
 * failure, never a wrong answer.  What one call needs is allocated in the
 * per-tuple context, reset afterwards.
 */
bool
dedup_claim_writer_upsert(ClaimWriter *writer, const Datum *values,
						  int nvalues, ClaimUpdateTest test, void *arg)
{
	EState	   *estate = writer->estate;
	TupleTableSlot *existing = writer->conflict_slot;
	bool		found = false;

	ExecStoreVirtualTuple(claim_writer_start(writer, values, nvalues));
	for (;;)
	{
		ItemPointerData tid;
		TM_FailureData tmfd;
		TM_Result	result;
		bool		isnull;

		if (claim_writer_put(writer, true, true, &tid) == CLAIM_CLAIMED)
			break;

		/* the row exists: lock its latest version, as ON CONFLICT does */
		estate->es_output_cid = GetCurrentCommandId(true);
		result = table_tuple_lock(writer->rel, &tid, estate->es_snapshot,
								  existing, estate->es_output_cid,
								  LockTupleNoKeyExclusive, LockWaitBlock, 0,
								  &tmfd);
		if (result == TM_Invisible &&
			TransactionIdIsCurrentTransactionId(
												DatumGetTransactionId(slot_getsysattr(existing,
																					  MinTransactionIdAttributeNumber,
																					  &isnull))))
		{
			/*
			 * This statement wrote the row itself (it inserted the key
			 * before, in the same command): make that visible, and again.
			 */
			ExecClearTuple(existing);
			CommandCounterIncrement();
			continue;
		}
		if (result == TM_Updated || result == TM_Deleted)
		{
			if (IsolationUsesXactSnapshot())
				ereport(ERROR,
						(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
						 errmsg("could not serialize access due to concurrent update")));
			/* READ COMMITTED: look for the row again, from the index */
			ExecClearTuple(existing);
			continue;
		}
		if (result != TM_Ok)
			elog(ERROR, "unexpected table_tuple_lock status: %u", result);

		/* locked: a version this transaction must not see is no answer */
		claim_check_visible(writer, existing);
		found = true;
		if (test(existing, arg))
			claim_writer_update(writer, &existing->tts_tid);
		ExecClearTuple(existing);
		break;
	}
	claim_writer_finish(writer);
	return found;
}
