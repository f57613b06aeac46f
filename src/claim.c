/*-------------------------------------------------------------------------
 *
 * claim.c
 *	  dedup_claim(): record, in the caller's transaction, that a consumer has
 *	  processed a message.
 *
 * A claim is one INSERT ... ON CONFLICT DO NOTHING into the extension's
 * processed_messages table, run through a saved SPI plan.  The executor's
 * speculative insertion then gives a claim exactly the guarantees of that
 * statement under every isolation level: a concurrent claimer of the same
 * key waits for the first one and sees its outcome; REPEATABLE READ and
 * SERIALIZABLE transactions get a serialization failure rather than a wrong
 * answer; savepoints and rollbacks undo a claim like any other row.
 *
 * This file owns argument checking, the per-backend plan cache and the
 * claim itself, which reports its outcome to the counters (stats.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/detoast.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
#include "utils/timeout.h"

#include "dedup.h"

PG_FUNCTION_INFO_V1(dedup_claim);

/*
 * The saved claim plan, and the dedup_claim function it was prepared for.
 * A new function OID means the extension was dropped and created again, so
 * the table may live elsewhere; a schema change clears claim_plan_function.
 * A stale plan is freed at the next claim, never inside the invalidation
 * callback, where it might be in use.
 */
static SPIPlanPtr claim_plan = NULL;
static Oid	claim_plan_function = InvalidOid;
static bool claim_callback_registered = false;

static void
claim_plan_invalidate(Datum arg, int cacheid, uint32 hashvalue)
{
	claim_plan_function = InvalidOid;
}

/*
 * Return the claim plan for the dedup_claim function with OID fn_oid,
 * preparing it on first use.  Must be called inside an SPI connection.
 */
static SPIPlanPtr
claim_plan_get(Oid fn_oid)
{
	Oid			schema;
	char	   *query;
	Oid			argtypes[2] = {TEXTOID, TEXTOID};
	SPIPlanPtr	plan;

	if (claim_plan != NULL && claim_plan_function == fn_oid)
		return claim_plan;

	if (!claim_callback_registered)
	{
		CacheRegisterSyscacheCallback(NAMESPACEOID, claim_plan_invalidate,
									  (Datum) 0);
		claim_callback_registered = true;
	}
	if (claim_plan != NULL)
	{
		SPI_freeplan(claim_plan);
		claim_plan = NULL;
	}

	/*
	 * Fully qualified, and free of functions and operators: nothing in it is
	 * resolved through the caller's search_path.
	 */
	schema = dedup_extension_schema(false);
	query = psprintf("INSERT INTO %s (consumer_name, message_id) "
					 "VALUES ($1, $2) ON CONFLICT DO NOTHING",
					 quote_qualified_identifier(get_namespace_name(schema),
												"processed_messages"));
	plan = SPI_prepare(query, 2, argtypes);
	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed for \"%s\": %s",
			 query, SPI_result_code_string(SPI_result));
	if (SPI_keepplan(plan) != 0)
		elog(ERROR, "SPI_keepplan failed");
	pfree(query);

	claim_plan = plan;
	claim_plan_function = fn_oid;
	return plan;
}

/*
 * Raise the error a caller must see, rather than a NULL or a silently
 * truncated key, when argument argno (called argname) is unusable.
 *
 * The length is read from the varlena header, so an oversized value is
 * rejected without being detoasted and before any index is touched.
 */
static void
claim_check_argument(FunctionCallInfo fcinfo, int argno, const char *argname,
					 Size max_bytes)
{
	Size		len;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument \"%s\" of dedup_claim must not be null",
						argname),
				 errdetail("A claim is either recorded or a duplicate; a null key can be neither.")));

	len = toast_raw_datum_size(PG_GETARG_DATUM(argno)) - VARHDRSZ;
	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"%s\" of dedup_claim must not be empty",
						argname)));
	if (len > max_bytes)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("argument \"%s\" of dedup_claim is too long", argname),
				 errdetail("It is %zu bytes; at most %zu bytes are accepted.",
						   len, max_bytes),
				 errhint("Claim a digest of long keys, for example encode(sha256(convert_to(key, 'UTF8')), 'hex').")));
}

/*
 * Did this backend wait for a lock since get_timeout_start_time() returned
 * mark?  Every lock wait re-arms the deadlock timeout (ProcSleep), so a new
 * start time means it did: for a claim, nearly always for an in-flight claim
 * of the same key.
 */
static inline bool
claim_waited(TimestampTz mark)
{
	return get_timeout_start_time(DEADLOCK_TIMEOUT) != mark;
}

/*
 * dedup_claim(consumer text, message_id text) RETURNS boolean
 *
 * True when this transaction has just recorded the claim: do the work, in the
 * same transaction.  False when a committed claim for the same consumer and
 * message id exists, or this transaction made it already: skip the work.
 */
Datum
dedup_claim(PG_FUNCTION_ARGS)
{
	Datum		values[2];
	SPIPlanPtr	plan;
	int			ret;
	bool		claimed;
	TimestampTz lock_wait_mark;

	claim_check_argument(fcinfo, 0, "consumer", DEDUP_MAX_CONSUMER_BYTES);
	claim_check_argument(fcinfo, 1, "message_id", DEDUP_MAX_MESSAGE_ID_BYTES);
	PreventCommandDuringRecovery("dedup_claim()");
	PreventCommandIfReadOnly("dedup_claim()");

	values[0] = PG_GETARG_DATUM(0);
	values[1] = PG_GETARG_DATUM(1);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	plan = claim_plan_get(fcinfo->flinfo->fn_oid);

	lock_wait_mark = get_timeout_start_time(DEADLOCK_TIMEOUT);
	PG_TRY();
	{
		ret = SPI_execute_plan(plan, values, NULL, false, 0);
	}
	PG_CATCH();
	{
		if (geterrcode() == ERRCODE_T_R_SERIALIZATION_FAILURE)
			dedup_stats_count(PG_GETARG_TEXT_PP(0), DEDUP_SERIALIZATION_FAILURE,
							  claim_waited(lock_wait_mark));
		PG_RE_THROW();
	}
	PG_END_TRY();
	if (ret != SPI_OK_INSERT)
		elog(ERROR, "claim insert failed: %s", SPI_result_code_string(ret));
	claimed = (SPI_processed == 1);
	SPI_finish();

	dedup_stats_count(PG_GETARG_TEXT_PP(0),
					  claimed ? DEDUP_CLAIMED : DEDUP_DUPLICATE,
					  claim_waited(lock_wait_mark));
	PG_RETURN_BOOL(claimed);
}
