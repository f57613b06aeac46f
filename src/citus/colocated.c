/*-------------------------------------------------------------------------
 *
 * colocated.c
 *	  Records colocated with the business rows on a Citus cluster: a
 *	  distributed table per colocation group, created and registered by
 *	  dedup_create_colocated_records() (or made by hand, or left by DROP
 *	  EXTENSION, and registered by dedup_register_colocated_records()),
 *	  claimed by routing key (dedup_claim_routed(), dedup_claim_routed_many(),
 *	  dedup_seen_routed()) and forgotten (dedup_forget_routed()), here; their
 *	  registry and shape are registry.c's, their creation and registration
 *	  colocated_ddl.c's, the statements prepared for these calls
 *	  routed_plan.c's, and their sweep and storage figures
 *	  colocated_sweep.c's.
 *
 * A records table is an ordinary user table (the caller's, not a member of
 * the extension), distributed by its route column and colocated with the
 * business table: the record of a message lives in the shard, on the
 * worker, that holds the business row it is about, and moves with it
 * (citus_move_shard_placement, the rebalancer).  The claim is INSERT ...
 * ON CONFLICT DO NOTHING into it, run through SPI on the coordinator, so
 * that Citus's planner routes it by the routing key to that shard, over
 * the connection the transaction's update of the business row uses: claim
 * and update commit on one worker, in one transaction, with Citus's
 * one-phase commit, and the speculative insertion (the row lock of a
 * concurrent claimer, the answers under every isolation level) happens in
 * the worker's shard, exactly as the statement does it on one node.
 *
 * Unlike the local claim (claim_writer.c), the statement runs as the
 * caller, with the caller's privileges on the table: a role that claims
 * needs INSERT and SELECT on it, and the registry (dedup_colocated_tables)
 * is what keeps the table argument from naming any other table.  The
 * extension's local tables are only read here (the registry, the claimant
 * mapping, the windows): no two-phase commit is asked for (citus.c), unless
 * the transaction also writes on the coordinator (dedup_citus_routed_write).
 *
 * A records table carries no code of its owner's that a claim or the sweep
 * would run (no trigger but TRUNCATE ones, no rule, no row security):
 * refused at registration, and at every claim, sweep and count after a
 * change (registry.c).  A dropped records table leaves the registry through
 * the extension's sql_drop event trigger (colocated_ddl.c), so that a table
 * given its OID later is not taken for it.
 *
 * The statements are prepared once per backend and table (SPI_keepplan),
 * and dropped when the table's relcache entry, or the registry's, is
 * invalidated (routed_plan.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/array.h"

#include "audit.h"
#include "citus/citus.h"
#include "citus/colocated.h"
#include "citus/routed_plan.h"
#include "claim/claim.h"
#include "claim/claimants.h"
#include "guc.h"
#include "keys.h"
#include "stats/claim_stats.h"

PG_FUNCTION_INFO_V1(dedup_claim_routed);
PG_FUNCTION_INFO_V1(dedup_claim_routed_many);
PG_FUNCTION_INFO_V1(dedup_seen_routed);
PG_FUNCTION_INFO_V1(dedup_forget_routed);

/* what routed_begin() checks besides the first three arguments */
#define ROUTED_KEY		0x01	/* the fourth, a message id */
#define ROUTED_WRITES	0x02	/* not in recovery or a read-only transaction */
#define ROUTED_CLAIMANT 0x04	/* the claimant mapping (not for a forget) */

/*
 * The checks every routed entry point makes on its arguments (records,
 * route, consumer and, with ROUTED_KEY, message_id; message_ids are left to
 * the caller), then the node, the registry and (ROUTED_CLAIMANT) the
 * claimant.
 */
static ColocatedTable *
routed_begin(FunctionCallInfo fcinfo, const char *name, const char *call,
			 int checks)
{
	ColocatedTable *table;
	bool		was;

	dedup_check_not_null(name, "records", 0, PG_ARGISNULL(0));
	dedup_check_not_null(name, "route", 0, PG_ARGISNULL(1));
	dedup_check_key(name, "consumer", 0, PG_GETARG_DATUM(2), PG_ARGISNULL(2),
					DEDUP_MAX_CONSUMER_BYTES);
	if (checks & ROUTED_KEY)
		dedup_check_key(name, "message_id", 0, PG_GETARG_DATUM(3),
						PG_ARGISNULL(3), DEDUP_MAX_MESSAGE_ID_BYTES);
	if (checks & ROUTED_WRITES)
	{
		PreventCommandDuringRecovery(call);
		PreventCommandIfReadOnly(call);
	}
	table = dedup_colocated_table(PG_GETARG_OID(0), call);
	if (checks & ROUTED_WRITES)
		dedup_citus_routed_write();
	if (!(checks & ROUTED_CLAIMANT))
		return table;
	was = dedup_citus_reading_only(true);
	PG_TRY();
	{
		dedup_check_claimant(PG_GETARG_TEXT_PP(2), call);
	}
	PG_FINALLY();
	{
		dedup_citus_reading_only(was);
	}
	PG_END_TRY();
	return table;
}

/*
 * Run a prepared statement of table with values; count its outcome as
 * nkeys claims (when counting) whose claimed ones are those it returned,
 * and return the rows it returned (SPI_tuptable is valid until
 * SPI_finish, which the caller calls).
 */
static uint64
routed_execute(ColocatedTable *table, RoutedStatement kind, Datum *values,
			   text *consumer, int nkeys, bool count)
{
	MemoryContext caller_context = CurrentMemoryContext;
	DedupClaimTally tally = {0};
	instr_time	start;
	SPIPlanPtr	plan;
	int			rc;
	uint64		rows;

	if (count && dedup_track_claims)
		INSTR_TIME_SET_CURRENT(start);
	PG_TRY();
	{
		plan = dedup_routed_plan(table, kind);
		rc = SPI_execute_plan(plan, values, NULL, kind == ROUTED_SEEN, 0);
		if (rc < 0)
			elog(ERROR, "SPI_execute_plan failed: %s", SPI_result_code_string(rc));
	}
	PG_CATCH();
	{
		if (count)
		{
			int			code = geterrcode();

			MemoryContextSwitchTo(caller_context);
			dedup_stats_tally(&tally, dedup_claim_failure(code), false, &start);
			dedup_stats_flush(consumer, NULL, &tally);
		}
		PG_RE_THROW();
	}
	PG_END_TRY();
	rows = SPI_processed;
	if (count)
	{
		/* the batch's time is shared by its keys, as a lock wait is not seen */
		for (uint64 i = 0; i < (uint64) nkeys; i++)
			dedup_stats_tally(&tally, i < rows ? DEDUP_CLAIMED : DEDUP_DUPLICATE,
							  false, &start);
		dedup_stats_flush(consumer, NULL, &tally);
	}
	return rows;
}

/*
 * The entry points of one key (records, route, consumer, message_id):
 * claim, seen and forget.  Check what checks asks for besides the key, run
 * the statement kind (a claim counted as one), and say whether it found or
 * wrote a row.
 */
static bool
routed_one_key(FunctionCallInfo fcinfo, RoutedStatement kind,
			   const char *name, int checks)
{
	ColocatedTable *table = routed_begin(fcinfo, name, psprintf("%s()", name),
										 ROUTED_KEY | checks);
	bool		claim = kind == ROUTED_CLAIM;
	Datum		values[3];
	uint64		rows;

	values[0] = dedup_route_value(table, PG_GETARG_TEXT_PP(1));
	values[1] = PointerGetDatum(PG_GETARG_TEXT_PP(2));
	values[2] = PointerGetDatum(PG_GETARG_TEXT_PP(3));
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	rows = routed_execute(table, kind, values,
						  claim ? PG_GETARG_TEXT_PP(2) : NULL, claim ? 1 : 0,
						  claim);
	SPI_finish();
	return rows > 0;
}

/*
 * dedup_claim_routed(records regclass, route text, consumer text,
 * message_id text) RETURNS boolean
 *
 * dedup_claim's answer for a claim kept in the colocated records table
 * records, in the shard of route (a value of its route column, as text):
 * true when this transaction has just recorded it, false when it was
 * recorded before.  Never NULL.
 */
Datum
dedup_claim_routed(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(routed_one_key(fcinfo, ROUTED_CLAIM, "dedup_claim_routed",
								  ROUTED_WRITES | ROUTED_CLAIMANT));
}

/* bytewise order of keys, as claim.c's batches are claimed */
static int
text_compare(const void *a, const void *b)
{
	text	   *ta = *(text *const *) a;
	text	   *tb = *(text *const *) b;
	int			la = VARSIZE_ANY_EXHDR(ta);
	int			lb = VARSIZE_ANY_EXHDR(tb);
	int			cmp = memcmp(VARDATA_ANY(ta), VARDATA_ANY(tb), Min(la, lb));

	if (cmp != 0)
		return cmp;
	return la < lb ? -1 : (la > lb ? 1 : 0);
}

/*
 * dedup_claim_routed_many(records regclass, route text, consumer text,
 * message_ids text[]) RETURNS boolean[]
 *
 * dedup_claim_many for a batch of one routing key, in one routed
 * statement: element i is true when message_ids[i] was claimed now, false
 * when it is a duplicate, of an earlier claim or of an earlier element.
 * The distinct keys are inserted in bytewise order, so that two batches
 * with keys in common lock them in the same order.
 */
Datum
dedup_claim_routed_many(PG_FUNCTION_ARGS)
{
	ColocatedTable *table;
	ArrayType  *array;
	Datum	   *elements;
	bool	   *nulls;
	int			nkeys;
	int			ndistinct = 0;
	text	  **sorted;
	text	  **claimed;
	Datum	   *results;
	Datum		values[3];
	uint64		rows;
	int			lbound = 1;
	instr_time	start;

	if (PG_ARGISNULL(3))
		ereport(ERROR,
				errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				errmsg("argument \"message_ids\" of dedup_claim_routed_many must not be null"));
	array = PG_GETARG_ARRAYTYPE_P(3);
	if (ARR_NDIM(array) > 1)
		ereport(ERROR,
				errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				errmsg("argument \"message_ids\" of dedup_claim_routed_many must be a one-dimensional array"));
	nkeys = ArrayGetNItems(ARR_NDIM(array), ARR_DIMS(array));
	if (nkeys > DEDUP_MAX_BATCH_KEYS)
		ereport(ERROR,
				errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				errmsg("argument \"message_ids\" of dedup_claim_routed_many has too many elements"),
				errdetail("It has %d elements; at most %d are accepted.",
						  nkeys, DEDUP_MAX_BATCH_KEYS),
				errhint("Claim a larger batch in several calls, in the same transaction."));
	deconstruct_array(array, TEXTOID, -1, false, TYPALIGN_INT,
					  &elements, &nulls, &nkeys);
	for (int i = 0; i < nkeys; i++)
		dedup_check_key("dedup_claim_routed_many", "message_ids", i + 1,
						elements[i], nulls[i], DEDUP_MAX_MESSAGE_ID_BYTES);
	table = routed_begin(fcinfo, "dedup_claim_routed_many",
						 "dedup_claim_routed_many()",
						 ROUTED_WRITES | ROUTED_CLAIMANT);
	if (nkeys == 0)
		PG_RETURN_ARRAYTYPE_P(construct_empty_array(BOOLOID));

	sorted = palloc(nkeys * sizeof(text *));
	for (int i = 0; i < nkeys; i++)
		sorted[i] = DatumGetTextPP(elements[i]);
	qsort(sorted, nkeys, sizeof(text *), text_compare);
	for (int i = 0; i < nkeys; i++)
		if (ndistinct == 0 || text_compare(&sorted[ndistinct - 1], &sorted[i]) != 0)
			sorted[ndistinct++] = sorted[i];

	values[0] = dedup_route_value(table, PG_GETARG_TEXT_PP(1));
	values[1] = PointerGetDatum(PG_GETARG_TEXT_PP(2));
	{
		Datum	   *keys = palloc(ndistinct * sizeof(Datum));

		for (int i = 0; i < ndistinct; i++)
			keys[i] = PointerGetDatum(sorted[i]);
		values[2] = PointerGetDatum(construct_array(keys, ndistinct, TEXTOID,
													-1, false, TYPALIGN_INT));
	}
	INSTR_TIME_SET_CURRENT(start);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	rows = routed_execute(table, ROUTED_CLAIM_MANY, values,
						  PG_GETARG_TEXT_PP(2), 0, false);
	/* the claimed keys, sorted, in this function's memory */
	claimed = palloc((rows + 1) * sizeof(text *));
	for (uint64 i = 0; i < rows; i++)
	{
		bool		isnull;
		Datum		id = SPI_getbinval(SPI_tuptable->vals[i],
									   SPI_tuptable->tupdesc, 1, &isnull);

		claimed[i] = (text *) SPI_datumTransfer(id, false, -1);
	}
	SPI_finish();
	qsort(claimed, rows, sizeof(text *), text_compare);

	/* the first element of each claimed key is true; counted per element */
	{
		DedupClaimTally tally = {0};
		bool	   *taken = palloc0((rows + 1) * sizeof(bool));

		results = palloc(nkeys * sizeof(Datum));
		for (int i = 0; i < nkeys; i++)
		{
			text	   *key = DatumGetTextPP(elements[i]);
			text	  **hit = bsearch(&key, claimed, rows, sizeof(text *),
									  text_compare);
			bool		now = hit != NULL && !taken[hit - claimed];

			if (now)
				taken[hit - claimed] = true;
			results[i] = BoolGetDatum(now);
			dedup_stats_tally(&tally, now ? DEDUP_CLAIMED : DEDUP_DUPLICATE,
							  false, &start);
		}
		dedup_stats_flush(PG_GETARG_TEXT_PP(2), NULL, &tally);
	}
	if (ARR_NDIM(array) == 1)
		lbound = ARR_LBOUND(array)[0];
	PG_RETURN_ARRAYTYPE_P(construct_md_array(results, NULL, 1, &nkeys, &lbound,
											 BOOLOID, 1, true, TYPALIGN_CHAR));
}

/*
 * dedup_seen_routed(records regclass, route text, consumer text,
 * message_id text) RETURNS boolean
 *
 * dedup_seen for colocated records: is the claim recorded (and visible to
 * this transaction)?  Only reads.
 */
Datum
dedup_seen_routed(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(routed_one_key(fcinfo, ROUTED_SEEN, "dedup_seen_routed",
								  ROUTED_CLAIMANT));
}

/*
 * dedup_forget_routed(records regclass, route text, consumer text,
 * message_id text) RETURNS boolean
 *
 * dedup_forget for colocated records: delete consumer's record of
 * message_id from the shard of route, in the caller's transaction (and
 * with its privileges on the table), so that its next delivery is
 * processed again.  True if there was one.  Written to the server log, as
 * dedup_forget is.
 */
Datum
dedup_forget_routed(PG_FUNCTION_ARGS)
{
	bool		found = routed_one_key(fcinfo, ROUTED_FORGET,
									   "dedup_forget_routed", ROUTED_WRITES);

	dedup_audit_forget(PG_GETARG_TEXT_PP(2), PG_GETARG_TEXT_PP(3), found);
	PG_RETURN_BOOL(found);
}
