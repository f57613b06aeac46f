/*-------------------------------------------------------------------------
 *
 * audit.c
 *	  The audit trail: one server log line (LOG) for every record deleted on
 *	  purpose (dedup_forget, dedup_forget_since, the manual dedup_sweep), for
 *	  every stream position moved or deleted on purpose
 *	  (dedup_set_stream_position, dedup_forget_stream_positions) and for
 *	  every change of a retention window, whatever made it (the trigger
 *	  dedup_retention_audit on dedup_retention).
 *
 * Every line begins "dedup audit: role R (session user S)": R is the role
 * the caller acts as outside any SECURITY DEFINER function (the retention
 * functions and dedup_retire_consumer run as their owner, which would name
 * the owner every time), S the role that logged in (which SET ROLE does not
 * change).  Every name and id in a line is written as a SQL string literal
 * that reads back as the original (dedup_quote_literal), so no consumer
 * name, message id or role name can end a line, start another, or make one
 * line say something else.
 *
 * A line is written when the change is made, not when it commits, as
 * log_statement does: it names the transaction ("in transaction 1234", the
 * %x of log_line_prefix), and the change takes effect only if that
 * transaction commits (and is not rolled back to a savepoint).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/dependency.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "commands/trigger.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "audit.h"

PG_FUNCTION_INFO_V1(dedup_retention_audit);

/* how a missing dedup_retention row reads in a window change */
#define DEFAULT_WINDOW	"dedup.retention (the default)"

/*
 * str as a SQL string literal on one line that reads back as str: quotes
 * doubled; if str holds a backslash or a control character (a byte below
 * 0x20, or 0x7f), in the E'...' form, with backslashes doubled and each
 * control character written as \b, \f, \n, \r, \t or \xNN.  Server
 * encodings never use bytes below 0x80 inside a multibyte character, so
 * looking at bytes is enough.  Allocated in the current memory context.
 */
char *
dedup_quote_literal(const char *str)
{
	StringInfoData buf;
	bool		escaped = false;

	initStringInfo(&buf);
	appendStringInfoString(&buf, "E'");
	for (const char *p = str; *p != '\0'; p++)
	{
		unsigned char c = (unsigned char) *p;

		switch (c)
		{
			case '\'':
				appendStringInfoString(&buf, "''");
				continue;
			case '\\':
				appendStringInfoString(&buf, "\\\\");
				break;
			case '\b':
				appendStringInfoString(&buf, "\\b");
				break;
			case '\f':
				appendStringInfoString(&buf, "\\f");
				break;
			case '\n':
				appendStringInfoString(&buf, "\\n");
				break;
			case '\r':
				appendStringInfoString(&buf, "\\r");
				break;
			case '\t':
				appendStringInfoString(&buf, "\\t");
				break;
			default:
				if (c >= 0x20 && c != 0x7f)
				{
					appendStringInfoChar(&buf, (char) c);
					continue;
				}
				appendStringInfo(&buf, "\\x%02x", c);
				break;
		}
		escaped = true;
	}
	appendStringInfoChar(&buf, '\'');
	/* without an escape, the plain form: the same text without the E */
	return escaped ? buf.data : buf.data + 1;
}

static char *
text_literal(text *t)
{
	return dedup_quote_literal(text_to_cstring(t));
}

static char *
role_literal(Oid role)
{
	return dedup_quote_literal(GetUserNameFromId(role, false));
}

/*
 * Write one audit line: its message, a whole sentence that begins with who
 * ("dedup audit: role %s (session user %s)", AUDIT_WHO its first two
 * arguments), and its arguments; audit_log_plural with a singular and a
 * plural form, chosen by n.  Who is the role outside any SECURITY DEFINER
 * function (the current_user its caller sees) and the session user.  The
 * line stands alone: without the STATEMENT that log_min_error_statement
 * would add to every LOG message, which holds the caller's query text as it
 * was sent, line breaks included.
 */
#define audit_log(...) \
	ereport(LOG, \
			(errcode(ERRCODE_SUCCESSFUL_COMPLETION), \
			 errhidestmt(true), \
			 errmsg(__VA_ARGS__)))

#define audit_log_plural(singular, plural, n, ...) \
	ereport(LOG, \
			(errcode(ERRCODE_SUCCESSFUL_COMPLETION), \
			 errhidestmt(true), \
			 errmsg_plural(singular, plural, n, __VA_ARGS__)))

#define AUDIT_WHO \
	role_literal(GetOuterUserId()), role_literal(GetSessionUserId())

/*
 * dedup_forget of consumer's record of message_id: deleted it (found), or
 * found none.
 */
void
dedup_audit_forget(text *consumer, text *message_id, bool found)
{
	if (found)
		audit_log("dedup audit: role %s (session user %s) deleted the record of message id %s of consumer %s in transaction %u",
				  AUDIT_WHO, text_literal(message_id), text_literal(consumer),
				  GetTopTransactionId());
	else
		audit_log("dedup audit: role %s (session user %s) found no record of message id %s of consumer %s to forget",
				  AUDIT_WHO, text_literal(message_id), text_literal(consumer));
}

/*
 * dedup_forget_since (also through dedup_retire_consumer): deleted records
 * of consumer claimed at or after since.
 */
void
dedup_audit_forget_since(text *consumer, TimestampTz since, uint64 deleted)
{
	if (deleted > 0)
		audit_log_plural("dedup audit: role %s (session user %s) deleted %llu record of consumer %s claimed since %s in transaction %u",
						 "dedup audit: role %s (session user %s) deleted %llu records of consumer %s claimed since %s in transaction %u",
						 deleted, AUDIT_WHO, (unsigned long long) deleted,
						 text_literal(consumer), timestamptz_to_str(since),
						 GetTopTransactionId());
	else
		audit_log("dedup audit: role %s (session user %s) found no records of consumer %s claimed since %s to forget",
				  AUDIT_WHO, text_literal(consumer),
				  timestamptz_to_str(since));
}

/*
 * dedup_sweep() deleted deleted (> 0) expired records of consumer, claimed
 * before cutoff.  The sweeper's own sweeps are not audited: they follow
 * the windows, whose every change is.
 */
void
dedup_audit_sweep(text *consumer, TimestampTz cutoff, uint64 deleted)
{
	audit_log_plural("dedup audit: role %s (session user %s) swept %llu expired record of consumer %s claimed before %s in transaction %u",
					 "dedup audit: role %s (session user %s) swept %llu expired records of consumer %s claimed before %s in transaction %u",
					 deleted, AUDIT_WHO, (unsigned long long) deleted,
					 text_literal(consumer), timestamptz_to_str(cutoff),
					 GetTopTransactionId());
}

/*
 * dedup_set_stream_position set consumer's position in partition of
 * stream to next_offset; it was previous (the next offset), or there was
 * none (had_position false).
 */
void
dedup_audit_stream_position(text *consumer, text *stream, int32 partition,
							bool had_position, int64 previous,
							int64 next_offset)
{
	if (had_position)
		audit_log("dedup audit: role %s (session user %s) set the position of consumer %s in partition %d of stream %s to next offset %lld (it was %lld) in transaction %u",
				  AUDIT_WHO, text_literal(consumer), partition,
				  text_literal(stream), (long long) next_offset,
				  (long long) previous, GetTopTransactionId());
	else
		audit_log("dedup audit: role %s (session user %s) set the position of consumer %s in partition %d of stream %s to next offset %lld (it was unset) in transaction %u",
				  AUDIT_WHO, text_literal(consumer), partition,
				  text_literal(stream), (long long) next_offset,
				  GetTopTransactionId());
}

/*
 * dedup_forget_stream_positions (also through dedup_retire_consumer):
 * deleted consumer's positions, in stream only (NULL: in every stream).
 */
void
dedup_audit_forget_positions(text *consumer, text *stream, uint64 deleted)
{
	if (deleted > 0 && stream != NULL)
		audit_log_plural("dedup audit: role %s (session user %s) deleted %llu stream position of consumer %s in stream %s in transaction %u",
						 "dedup audit: role %s (session user %s) deleted %llu stream positions of consumer %s in stream %s in transaction %u",
						 deleted, AUDIT_WHO, (unsigned long long) deleted,
						 text_literal(consumer), text_literal(stream),
						 GetTopTransactionId());
	else if (deleted > 0)
		audit_log_plural("dedup audit: role %s (session user %s) deleted %llu stream position of consumer %s in transaction %u",
						 "dedup audit: role %s (session user %s) deleted %llu stream positions of consumer %s in transaction %u",
						 deleted, AUDIT_WHO, (unsigned long long) deleted,
						 text_literal(consumer), GetTopTransactionId());
	else if (stream != NULL)
		audit_log("dedup audit: role %s (session user %s) found no stream positions of consumer %s in stream %s to forget",
				  AUDIT_WHO, text_literal(consumer), text_literal(stream));
	else
		audit_log("dedup audit: role %s (session user %s) found no stream positions of consumer %s to forget",
				  AUDIT_WHO, text_literal(consumer));
}

/* a window as a line shows it: "forever" (NULL) or an interval literal */
static char *
window_text(Datum window, bool isnull)
{
	if (isnull)
		return "forever";
	return psprintf("interval %s",
					dedup_quote_literal(DatumGetCString(DirectFunctionCall1(interval_out,
																			window))));
}

/* consumer's window changed from old_window to new_window (as window_text shows them) */
static void
audit_window(Datum consumer, const char *old_window, const char *new_window)
{
	audit_log("dedup audit: role %s (session user %s) changed the retention window of consumer %s from %s to %s in transaction %u",
			  AUDIT_WHO, text_literal(DatumGetTextPP(consumer)), old_window,
			  new_window, GetTopTransactionId());
}

/*
 * The window change of a row of dedup_retention (tuple, of desc) that has
 * come (inserted) or gone (deleted): the other side is the default.
 */
static void
audit_row(HeapTuple tuple, TupleDesc desc, bool gone)
{
	bool		isnull;
	Datum		consumer = heap_getattr(tuple, 1, desc, &isnull);
	Datum		window = heap_getattr(tuple, 2, desc, &isnull);
	char	   *shown = window_text(window, isnull);

	audit_window(consumer, gone ? shown : DEFAULT_WINDOW,
				 gone ? DEFAULT_WINDOW : shown);
}

/*
 * TRUNCATE, before it happens: every row's consumer goes back to the
 * default.  The table is locked (AccessExclusiveLock), so the latest
 * snapshot sees every row the truncation removes.
 */
static void
audit_truncate(Relation rel)
{
	Snapshot	snapshot = RegisterSnapshot(GetLatestSnapshot());
	TableScanDesc scan = table_beginscan(rel, snapshot, 0, NULL);
	TupleTableSlot *slot = table_slot_create(rel, NULL);

	while (table_scan_getnextslot(scan, ForwardScanDirection, slot))
	{
		bool		isnull;
		Datum		consumer = slot_getattr(slot, 1, &isnull);
		Datum		window = slot_getattr(slot, 2, &isnull);

		audit_window(consumer, window_text(window, isnull), DEFAULT_WINDOW);
	}
	ExecDropSingleTupleTableSlot(slot);
	table_endscan(scan);
	UnregisterSnapshot(snapshot);
}

/*
 * dedup_retention_audit(): the trigger of dedup_retention that audits every
 * change of a window, AFTER each INSERT, UPDATE or DELETE of a row, and
 * BEFORE a TRUNCATE (afterwards the rows can no longer be read).  Both
 * triggers are ENABLE ALWAYS: they also fire with session_replication_role
 * = replica and in logical replication apply.
 */
Datum
dedup_retention_audit(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	Relation	rel;
	TupleDesc	desc;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("function dedup_retention_audit must be called as a trigger")));
	if (TRIGGER_FIRED_BY_TRUNCATE(trigdata->tg_event) ?
		!TRIGGER_FIRED_BEFORE(trigdata->tg_event) :
		!(TRIGGER_FIRED_AFTER(trigdata->tg_event) &&
		  TRIGGER_FIRED_FOR_ROW(trigdata->tg_event)))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("function dedup_retention_audit must be fired AFTER each row or BEFORE TRUNCATE")));

	rel = trigdata->tg_relation;
	desc = RelationGetDescr(rel);
	if (strcmp(RelationGetRelationName(rel), "dedup_retention") != 0 ||
		getExtensionOfObject(RelationRelationId, RelationGetRelid(rel)) !=
		get_extension_oid("dedup", true) ||
		desc->natts < 2 ||
		TupleDescAttr(desc, 0)->atttypid != TEXTOID ||
		TupleDescAttr(desc, 1)->atttypid != INTERVALOID)
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("function dedup_retention_audit can only be a trigger of table dedup_retention of extension \"dedup\"")));

	if (TRIGGER_FIRED_BY_TRUNCATE(trigdata->tg_event))
		audit_truncate(rel);
	else if (TRIGGER_FIRED_BY_INSERT(trigdata->tg_event))
		audit_row(trigdata->tg_trigtuple, desc, false);
	else if (TRIGGER_FIRED_BY_DELETE(trigdata->tg_event))
		audit_row(trigdata->tg_trigtuple, desc, true);
	else
	{
		HeapTuple	oldtup = trigdata->tg_trigtuple;
		HeapTuple	newtup = trigdata->tg_newtuple;
		bool		isnull;
		Datum		old_consumer = heap_getattr(oldtup, 1, desc, &isnull);
		Datum		consumer = heap_getattr(newtup, 1, desc, &isnull);
		bool		old_null;
		bool		new_null;
		Datum		old_window = heap_getattr(oldtup, 2, desc, &old_null);
		Datum		new_window = heap_getattr(newtup, 2, desc, &new_null);

		if (strcmp(TextDatumGetCString(old_consumer),
				   TextDatumGetCString(consumer)) == 0)
			audit_window(consumer, window_text(old_window, old_null),
						 window_text(new_window, new_null));
		else
		{
			/*
			 * renamed: the old name falls back to the default, the new gets
			 * the window
			 */
			audit_row(oldtup, desc, true);
			audit_row(newtup, desc, false);
		}
	}
	return PointerGetDatum(NULL);
}
