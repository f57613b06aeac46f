/*-------------------------------------------------------------------------
 *
 * maintain.c
 *	  Keeping the outbox: its settings (dedup.outbox_retention,
 *	  dedup.outbox_max_payload, dedup.outbox_max_attempts), the deletion
 *	  of sent messages once dedup.outbox_retention has passed
 *	  (dedup_outbox_sweep(), and the batches of the retention worker's
 *	  step, dedup_outbox_sweep_batch()), and the audit of a message sent
 *	  again on purpose (dedup_outbox_resend(), dedup_outbox_retry()).
 *
 * Only sent messages are ever deleted: a message is deleted when its
 * sent_at is older than the retention, checked again on the row's latest
 * version as it is locked (FOR UPDATE), so a message made unsent meanwhile
 * (dedup_outbox_resend) stays; rows locked by a relay or a resend are
 * skipped (SKIP LOCKED) and deleted at a later sweep.  The retention worker
 * deletes at most dedup.sweep_batch_size messages per transaction, as the
 * owner of dedup_outbox in a security-restricted operation, after the
 * claims of its database (sweeper.c), paced and bounded as they are; the
 * sweeper then vacuums dedup_outbox as it vacuums processed_messages, when
 * enough of it is dead (sweep_vacuum.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "audit.h"
#include "guc.h"
#include "outbox/outbox.h"
#include "tables/relations.h"

PG_FUNCTION_INFO_V1(dedup_outbox_sweep);
PG_FUNCTION_INFO_V1(dedup_outbox_retention);
PG_FUNCTION_INFO_V1(dedup_outbox_audit_resend);
PG_FUNCTION_INFO_V1(dedup_outbox_audit_retry);

int			dedup_outbox_retention_s = 60 * 60;
int			dedup_outbox_max_payload = 1024 * 1024;
int			dedup_outbox_max_attempts = 10;

/* The outbox's settings: called by dedup_define_gucs() */
void
dedup_outbox_define_gucs(void)
{
	DefineCustomIntVariable("dedup.outbox_retention",
							"How long a sent outbox message is kept before the retention worker deletes it.",
							"Unsent messages are never deleted; -1 keeps sent messages forever.",
							&dedup_outbox_retention_s,
							60 * 60, -1, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);

	/* a role that could raise it could fill the outbox with huge messages */
	DefineCustomIntVariable("dedup.outbox_max_payload",
							"Largest payload, and largest headers, dedup_publish() accepts.",
							NULL,
							&dedup_outbox_max_payload,
							1024 * 1024, 1, MaxAllocSize / 4,
							PGC_SUSET, GUC_UNIT_BYTE,
							NULL, NULL, NULL);

	/* read in the relay's refusal calls: no role may change it */
	DefineCustomIntVariable("dedup.outbox_max_attempts",
							"Attempts after which a message the broker refuses is moved to the outbox's dead letters.",
							"0 never moves one aside.",
							&dedup_outbox_max_attempts,
							10, 0, INT_MAX,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);
}

/*
 * Delete up to limit (0: every) sent messages of dedup_outbox (OID outbox,
 * in schema nspname) older than dedup.outbox_retention, as the current
 * user, through SPI (connected); returns how many.
 */
static uint64
outbox_delete_sent(Oid outbox, int limit)
{
	const char *nspname = quote_identifier(get_namespace_name(get_rel_namespace(outbox)));
	char	   *sql;
	Oid			argtypes[2] = {TIMESTAMPTZOID, INT4OID};
	Datum		args[2];
	char		nulls[2] = {' ', ' '};
	int			rc;

	sql = psprintf("DELETE FROM %s.dedup_outbox o"
				   " WHERE o.ctid OPERATOR(pg_catalog.=) ANY (ARRAY("
				   "SELECT s.ctid FROM %s.dedup_outbox s"
				   " WHERE s.sent_at OPERATOR(pg_catalog.<) $1"
				   " ORDER BY s.sent_at LIMIT $2 FOR UPDATE SKIP LOCKED))"
				   " AND o.sent_at OPERATOR(pg_catalog.<) $1",
				   nspname, nspname);
	args[0] = TimestampTzGetDatum(TimestampTzPlusMilliseconds(GetCurrentTransactionStartTimestamp(),
															  -(int64) dedup_outbox_retention_s * 1000));
	args[1] = Int32GetDatum(limit);
	if (limit == 0)
		nulls[1] = 'n';
	rc = SPI_execute_with_args(sql, 2, argtypes, args, nulls, false, 0);
	if (rc != SPI_OK_DELETE)
		elog(ERROR, "deleting sent outbox messages failed: %s",
			 SPI_result_code_string(rc));
	pfree(sql);
	return SPI_processed;
}

/*
 * dedup_outbox_sweep() RETURNS bigint
 *
 * Delete every sent message older than dedup.outbox_retention now, in the
 * caller's transaction (SECURITY DEFINER: as the function's owner);
 * returns how many.
 */
Datum
dedup_outbox_sweep(PG_FUNCTION_ARGS)
{
	Oid			outbox;
	uint64		deleted;

	PreventCommandDuringRecovery("dedup_outbox_sweep()");
	PreventCommandIfReadOnly("dedup_outbox_sweep()");
	outbox = dedup_member_table("dedup_outbox");
	if (!OidIsValid(outbox) || dedup_outbox_retention_s < 0)
		PG_RETURN_INT64(0);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	deleted = outbox_delete_sent(outbox, 0);
	SPI_finish();
	PG_RETURN_INT64((int64) deleted);
}

/*
 * dedup_outbox_retention() RETURNS interval
 *
 * dedup.outbox_retention as an interval; NULL when sent messages are kept
 * forever.
 */
Datum
dedup_outbox_retention(PG_FUNCTION_ARGS)
{
	Interval   *result;

	if (dedup_outbox_retention_s < 0)
		PG_RETURN_NULL();
	result = palloc0(sizeof(Interval));
	result->time = (int64) dedup_outbox_retention_s * USECS_PER_SEC;
	PG_RETURN_INTERVAL_P(result);
}

/*
 * One batch of the retention worker's step (sweeper.c runs them), in a
 * transaction of its own: returns the messages deleted, -1 when there is
 * no outbox (dedup older than 1.4, or gone).
 */
int64
dedup_outbox_sweep_batch(void)
{
	Oid			outbox;
	Oid			save_userid;
	int			save_sec_context;
	int			save_nestlevel;
	int64		deleted = -1;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, "dedup sweep: deleting sent outbox messages");
	outbox = dedup_member_table("dedup_outbox");
	if (OidIsValid(outbox))
	{
		GetUserIdAndSecContext(&save_userid, &save_sec_context);
		SetUserIdAndSecContext(dedup_table_owner(outbox),
							   save_sec_context | SECURITY_RESTRICTED_OPERATION);
		save_nestlevel = NewGUCNestLevel();
		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "SPI_connect failed");
		deleted = (int64) outbox_delete_sent(outbox, dedup_sweep_batch_size);
		SPI_finish();
		AtEOXact_GUC(false, save_nestlevel);
		SetUserIdAndSecContext(save_userid, save_sec_context);
	}
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_activity(STATE_IDLE, NULL);
	return deleted;
}

/*
 * The audit line of an operator's change to the message message_id
 * (argument 0 of fcinfo) of function, which made it seq (argument 1; NULL:
 * it found nothing to change): the role outside SECURITY DEFINER
 * functions, as in every audit line (audit.c), then "<did> id <id> (seq
 * <seq>) <how> in transaction <xid>", or "found no <missing> with id <id>
 * <how_not>".  Returns whether it did.
 */
static bool
outbox_audit(FunctionCallInfo fcinfo, const char *function,
			 const char *did, const char *how, const char *missing,
			 const char *how_not)
{
	char	   *message_id;
	char	   *who;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument \"message_id\" of %s must not be null",
						function)));
	message_id = dedup_quote_literal(text_to_cstring(PG_GETARG_TEXT_PP(0)));
	who = psprintf("role %s (session user %s)",
				   dedup_quote_literal(GetUserNameFromId(GetOuterUserId(), false)),
				   dedup_quote_literal(GetUserNameFromId(GetSessionUserId(), false)));
	ereport(LOG,
			(errcode(ERRCODE_SUCCESSFUL_COMPLETION),
			 errhidestmt(true),
			 PG_ARGISNULL(1) ?
			 errmsg("dedup audit: %s found no %s with id %s %s", who, missing,
					message_id, how_not) :
			 errmsg("dedup audit: %s %s id %s (seq %lld) %s in transaction %u",
					who, did, message_id, (long long) PG_GETARG_INT64(1), how,
					GetTopTransactionId())));
	return !PG_ARGISNULL(1);
}

/*
 * dedup_outbox_audit_resend(message_id text, seq bigint) RETURNS boolean
 *
 * The audit line of dedup_outbox_resend(message_id), which made the sent
 * message seq unsent again (seq NULL: found no sent message of that id);
 * returns whether it did.
 */
Datum
dedup_outbox_audit_resend(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(outbox_audit(fcinfo, "dedup_outbox_resend",
								"made outbox message", "unsent again",
								"sent outbox message", "to send again"));
}

/*
 * dedup_outbox_audit_retry(message_id text, seq bigint) RETURNS boolean
 *
 * The audit line of dedup_outbox_retry(message_id), which moved the dead
 * letter back into dedup_outbox as the unsent message seq (NULL: found no
 * dead letter of that id); returns whether it did.
 */
Datum
dedup_outbox_audit_retry(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(outbox_audit(fcinfo, "dedup_outbox_retry",
								"moved the dead letter", "back into the outbox",
								"dead letter", "to send again"));
}
