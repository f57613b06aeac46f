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
#include "utils/array.h"

#include "audit.h"
#include "citus/citus.h"
#include "citus/routed_plan.h"
#include "claim/claim.h"
#include "guc.h"
#include "keys.h"
#include "stats/claim_stats.h"

PG_FUNCTION_INFO_V1(dedup_claim_routed);
PG_FUNCTION_INFO_V1(dedup_claim_routed_many);
PG_FUNCTION_INFO_V1(dedup_seen_routed);
PG_FUNCTION_INFO_V1(dedup_forget_routed);

/*
 * Check the arguments every routed entry point takes (records, route,
 * consumer and, with_key, message_id), in their order.
 */
static void
routed_args(FunctionCallInfo fcinfo, const char *name, bool with_key)
{
	dedup_check_not_null(name, "records", 0, PG_ARGISNULL(0));
	dedup_check_not_null(name, "route", 0, PG_ARGISNULL(1));
	dedup_check_key(name, "consumer", 0, PG_GETARG_DATUM(2), PG_ARGISNULL(2),
					DEDUP_MAX_CONSUMER_BYTES);
	if (with_key)
		dedup_check_key(name, "message_id", 0, PG_GETARG_DATUM(3),
						PG_ARGISNULL(3), DEDUP_MAX_MESSAGE_ID_BYTES);
}

/*
 * After the arguments, the checks of dedup_claim_checks that checks asks
 * for, in its order, with the node's between them: the transaction
 * (DEDUP_CHECK_WRITES), the node (the Citus coordinator, where the guard of
 * a local claim refuses a worker too), the claimant (DEDUP_CHECK_CLAIMANT,
 * reading the extension's tables only: no two-phase commit is asked for,
 * citus.c); then the records table, registered and of the right shape.  A
 * call that writes marks the transaction (dedup_citus_routed_write).
 */
static ColocatedTable *
routed_open(FunctionCallInfo fcinfo, const char *call, int checks)
{
	ColocatedTable *table;
	bool		was;

	dedup_claim_checks(call, NULL, checks & DEDUP_CHECK_WRITES);
	dedup_colocated_check_node(call);
	was = dedup_citus_reading_only(true);
	PG_TRY();
	{
		dedup_claim_checks(call, PG_GETARG_TEXT_PP(2),
						   checks & DEDUP_CHECK_CLAIMANT);
	}
	PG_FINALLY();
	{
		dedup_citus_reading_only(was);
	}
	PG_END_TRY();
	table = dedup_colocated_table(PG_GETARG_OID(0));
	if (checks & DEDUP_CHECK_WRITES)
		dedup_citus_routed_write();
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
	DedupClaimFrame frame;
	instr_time	start;
	SPIPlanPtr	plan;
	int			rc;
	uint64		rows;

	dedup_claim_frame_start(&frame, consumer, NULL);
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
			dedup_claim_failed(&frame, false, &start);
		PG_RE_THROW();
	}
	PG_END_TRY();
	rows = SPI_processed;
	if (count)
	{
		/* the batch's time is shared by its keys, as a lock wait is not seen */
		for (uint64 i = 0; i < (uint64) nkeys; i++)
			dedup_stats_tally(&frame.tally,
							  i < rows ? DEDUP_CLAIMED : DEDUP_DUPLICATE,
							  false, &start);
		dedup_claim_counted(&frame);
	}
	return rows;
}

/*
 * The entry points of one key (records, route, consumer, message_id):
 * claim, seen and forget.  Check the arguments and what checks asks for
 * (routed_open), run the statement kind (a claim counted as one), and say
 * whether it found or wrote a row.
 */
static bool
routed_one_key(FunctionCallInfo fcinfo, RoutedStatement kind,
			   const char *name, int checks)
{
	ColocatedTable *table;
	bool		claim = kind == ROUTED_CLAIM;
	Datum		values[3];
	uint64		rows;

	routed_args(fcinfo, name, true);
	table = routed_open(fcinfo, psprintf("%s()", name), checks);
	values[0] = dedup_route_value(table, PG_GETARG_TEXT_PP(1));
	values[1] = PointerGetDatum(PG_GETARG_TEXT_PP(2));
	values[2] = PointerGetDatum(PG_GETARG_TEXT_PP(3));
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	rows = routed_execute(table, kind, values,
						  claim ? PG_GETARG_TEXT_PP(2) : NULL, claim ? 1 : 0,
						  claim);
	SPI_finish();
	if (claim && rows > 0)
	{
		/* the outbox derives no ids from a routed claim */
		DedupClaimOrigin origin = {PG_GETARG_TEXT_PP(2)};

		dedup_claim_observed(&origin);
	}
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
								  DEDUP_CHECK_WRITES | DEDUP_CHECK_CLAIMANT));
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
	const char *name = "dedup_claim_routed_many";
	ColocatedTable *table;
	DedupBatch	batch;
	int			ndistinct = 0;
	text	  **sorted;
	text	  **claimed;
	bool	   *answers;
	Datum		values[3];
	uint64		rows;
	instr_time	start;

	routed_args(fcinfo, name, false);
	dedup_batch_arg(fcinfo, 3, name, "message_ids", TEXTOID, &batch);
	for (int i = 0; i < batch.n; i++)
		dedup_check_key(name, "message_ids", i + 1, batch.elements[i],
						batch.nulls[i], DEDUP_MAX_MESSAGE_ID_BYTES);
	table = routed_open(fcinfo, "dedup_claim_routed_many()",
						DEDUP_CHECK_WRITES | DEDUP_CHECK_CLAIMANT);
	if (batch.n == 0)
		PG_RETURN_ARRAYTYPE_P(dedup_batch_answers(&batch, NULL));

	sorted = palloc(batch.n * sizeof(text *));
	for (int i = 0; i < batch.n; i++)
		sorted[i] = DatumGetTextPP(batch.elements[i]);
	qsort(sorted, batch.n, sizeof(text *), text_compare);
	for (int i = 0; i < batch.n; i++)
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
		DedupClaimFrame frame;
		bool	   *taken = palloc0((rows + 1) * sizeof(bool));

		dedup_claim_frame_start(&frame, PG_GETARG_TEXT_PP(2), NULL);
		answers = palloc(batch.n * sizeof(bool));
		for (int i = 0; i < batch.n; i++)
		{
			text	   *key = DatumGetTextPP(batch.elements[i]);
			text	  **hit = bsearch(&key, claimed, rows, sizeof(text *),
									  text_compare);
			bool		now = hit != NULL && !taken[hit - claimed];

			if (now)
				taken[hit - claimed] = true;
			answers[i] = now;
			dedup_stats_tally(&frame.tally,
							  now ? DEDUP_CLAIMED : DEDUP_DUPLICATE,
							  false, &start);
		}
		dedup_claim_counted(&frame);
	}
	if (rows > 0)
	{
		DedupClaimOrigin origin = {PG_GETARG_TEXT_PP(2)};

		dedup_claim_observed(&origin);
	}
	PG_RETURN_ARRAYTYPE_P(dedup_batch_answers(&batch, answers));
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
								  DEDUP_CHECK_CLAIMANT));
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
									   "dedup_forget_routed", DEDUP_CHECK_WRITES);

	dedup_audit_forget(PG_GETARG_TEXT_PP(2), PG_GETARG_TEXT_PP(3), found);
	PG_RETURN_BOOL(found);
}
